"""Where undeclared external agents may ask, any name no agent is loaded under finds a
stand-in external agent; the runs and tickets of an agent of signoff's own that is gone
must not take it for their agent."""

from __future__ import annotations

import pytest
from approvals_kit import RuntimeFactory
from testkit import echo_model

from runtime import Actor, Agent, RunStatus, StaleTicket, tool

ALICE = Actor(id="alice")


def refunds_agent() -> Agent:
    @tool(permission="ask")
    async def refund(order_id: str) -> str:
        return f"refunded {order_id}"

    return Agent(
        "refunds", "Refund orders.", echo_model(("refund", {"order_id": "A1"})), tools=[refund]
    )


async def test_a_ticket_of_an_agent_that_is_gone_is_stale_not_the_stand_ins(
    runtime_factory: RuntimeFactory,
) -> None:
    before = runtime_factory(refunds_agent(), undeclared_agents="any")
    parked = await before.start("refunds", "refund A1", requester="alice")
    [entry] = parked.pending

    after = runtime_factory(undeclared_agents="any")  # restarted without the agent
    with pytest.raises(StaleTicket, match="'refunds' is not loaded any more"):
        await after.approve(entry.ticket_id, actor=ALICE)

    assert (await after.get(parked.run_id)).status is RunStatus.AWAITING


async def test_a_queued_run_of_an_agent_that_is_gone_fails_and_is_not_driven_by_the_stand_in(
    runtime_factory: RuntimeFactory,
) -> None:
    before = runtime_factory(refunds_agent(), undeclared_agents="any")
    queued = await before.start("refunds", "refund A1", requester="alice", wait=False)

    after = runtime_factory(undeclared_agents="any")
    assert await after.drive(queued.run_id)

    run = await after.get(queued.run_id)
    assert run.status is RunStatus.FAILED
    assert "agent 'refunds' is not loaded" in (run.error or "")
    kinds = [event["kind"] for event in await after.events(queued.run_id)]
    assert "model_call" not in kinds and "tool_proposed" not in kinds
