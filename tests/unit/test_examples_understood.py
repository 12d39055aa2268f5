"""The bundled demo agents say what they understand, and act only on that: a message they
do not understand gets a reply naming what they do and what to type, and no tool runs."""

from __future__ import annotations

from typing import Any

import pytest

from examples import demo_agents
from examples.mcp import DEMO_INPUT as INFRA_INPUT
from examples.mcp import infra_model
from runtime import Agent, RunStatus

UNDERSTOOD = {
    "refunds": "Order A1001 was charged twice",
    "deploys": "deploy checkout 2.4.1",
    "oncall": "payments API returns 502s (team payments)",
}


def _agents() -> list[Agent]:
    # The infra agent's tools come from its MCP server; its model alone decides whether
    # it acts, so a stand-in without tools is enough here.
    return [*demo_agents(), Agent("infra", "Deploy.", infra_model())]


@pytest.mark.parametrize(
    ("agent", "text", "offered"),
    [
        ("refunds", "hello", '"Order A1001 was charged twice. Please refund the duplicate'),
        ("deploys", "hello", '"deploy checkout 2.4.1"'),
        ("oncall", "hello", '"payments API returns 502s (team payments)"'),
        ("infra", "Destroy the staging environment", f'"{INFRA_INPUT}"'),
        ("infra", "hello", f'"{INFRA_INPUT}" or "Deploy checkout 2.5.0 to staging"'),
    ],
)
async def test_a_message_the_agent_does_not_understand_runs_nothing(
    runtime_factory: Any, agent: str, text: str, offered: str
) -> None:
    rt = runtime_factory(*_agents())

    done = await rt.start(agent, text, requester="U1")

    assert done.status is RunStatus.DONE
    assert done.text is not None and done.text.startswith("I can ")
    assert f"Try: {offered}" in done.text
    kinds = [event["kind"] for event in await rt.events(done.run_id)]
    assert not [kind for kind in kinds if kind.startswith(("tool_", "ticket_"))], kinds


@pytest.mark.parametrize("agent", sorted(UNDERSTOOD))
async def test_each_agent_names_an_example_in_its_description_and_acts_on_it(
    runtime_factory: Any, agent: str
) -> None:
    rt = runtime_factory(*_agents())
    described = rt.agents[agent].description

    assert f'Try: "{UNDERSTOOD[agent]}' in described
    parked = await rt.start(agent, UNDERSTOOD[agent], requester="U1")
    assert parked.status is RunStatus.AWAITING
