"""Sub-agents in an agents file: ``subagents = [...]`` names other agents of the file,
the parent hands them tasks, and every naming mistake is one configuration line."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path
from typing import Any

import pytest

from bot.agents_file import load_agents_file
from runtime import (
    ConfigurationError,
    MemoryStore,
    RunStatus,
    Runtime,
    delegate_tool_name,
)

MODULE = '''
from runtime import ScriptedModel, final_reply, tool_call_reply

def triage_model():
    return ScriptedModel(
        [
            tool_call_reply(
                ("delegate_to_billing", {"task_key": "refund-A1", "task": "refund A1"})
            ),
            final_reply("handed over"),
        ],
        name="triage-model",
    )

def billing_model():
    return ScriptedModel(
        [tool_call_reply(("refund", {"order": "A1"})), final_reply("refunded A1")],
        name="billing-model",
    )

def refund(order: str) -> str:
    """Refund an order."""
    return f"refund of {order} sent"
'''


@pytest.fixture
def module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: Any) -> str:
    name = f"subfile_{request.node.name.split('[')[0]}_{os.getpid()}"
    (tmp_path / f"{name}.py").write_text(MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    return name


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "agents.toml"
    path.write_text(textwrap.dedent(text))
    return path


def team(tmp_path: Path, module: str, subagents: str = '["billing"]') -> Path:
    return write(
        tmp_path,
        f"""
        [agents.triage]
        instructions = "Hand refunds to billing."
        model = "{module}:triage_model"
        subagents = {subagents}

        [agents.billing]
        instructions = "Refund orders."
        description = "Refunds orders."
        model = "{module}:billing_model"
        tools = ["{module}:refund"]

        [agents.billing.rules.refund]
        permission = "ask"
        """,
    )


async def test_a_listed_subagent_takes_the_task_and_its_request_waits_for_a_person(
    tmp_path: Path, module: str
) -> None:
    loaded = load_agents_file(team(tmp_path, module))
    triage, billing = loaded.agents
    assert delegate_tool_name("billing") in triage.tools
    assert triage.subagents["billing"] is billing  # the listed agent, with its own rules
    runtime = Runtime(MemoryStore(), loaded.agents)
    parked = await runtime.start("triage", "customer wants a refund", requester="U1")
    assert parked.status is RunStatus.AWAITING
    [entry] = parked.pending
    assert entry.call.name == "refund"  # the deepest request: billing's ask
    assert entry.ticket.run_id != parked.run_id
    done = await runtime.approve(entry, actor="U1", resume=True)
    assert done.status is RunStatus.DONE
    parent = await runtime.get(parked.run_id)
    assert parent.status is RunStatus.DONE and parent.text == "handed over"
    assert [c.agent for c in parent.children] == ["billing"]


@pytest.mark.parametrize(
    ("subagents", "message"),
    [
        ('["payroll"]', "agents.triage.subagents[0] (line 5): no agent named 'payroll'"),
        ('["triage"]', "agents.triage.subagents[0] (line 5): 'triage' would be a sub-agent"),
        ('["billing", "billing"]', "agents.triage.subagents[1] (line 5): "),
    ],
)
def test_a_subagent_mistake_names_the_key_and_the_line(
    tmp_path: Path, module: str, subagents: str, message: str
) -> None:
    path = team(tmp_path, module, subagents)
    with pytest.raises(ConfigurationError) as caught:
        load_agents_file(path)
    assert str(caught.value).startswith(f"SIGNOFF_AGENTS={path}: {message}"), caught.value


def test_a_cycle_through_two_agents_is_refused(tmp_path: Path, module: str) -> None:
    path = write(
        tmp_path,
        f"""
        [agents.a]
        instructions = "A."
        model = "{module}:triage_model"
        subagents = ["b"]

        [agents.b]
        instructions = "B."
        model = "{module}:billing_model"
        subagents = ["a"]
        """,
    )
    with pytest.raises(ConfigurationError, match=r"'b' would be a sub-agent of itself"):
        load_agents_file(path)
