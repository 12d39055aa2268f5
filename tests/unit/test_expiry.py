"""Decision deadlines: each overdue ticket expires once and its action happens once."""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING

import pytest

from runtime import (
    Actor,
    Agent,
    Escalate,
    Expired,
    ManualClock,
    RunStatus,
    ScriptedModel,
    TicketStatus,
    final_reply,
    tool_call_reply,
)

if TYPE_CHECKING:
    from conftest import RuntimeFactory, Snapshot


def deploy_agent(ran: list[str], on_expiry: object = "deny") -> Agent:
    model = ScriptedModel(
        [tool_call_reply(("deploy", {"service": "api"})), final_reply("Finished.")]
    )
    agent = Agent("deployer", "Deploy.", model)

    @agent.tool(permission="ask", deadline=timedelta(minutes=10), on_expiry=on_expiry)
    def deploy(service: str) -> str:
        """Deploy a service."""
        ran.append(service)
        return f"deployed {service}"

    return agent


async def test_expiry_denies_once_and_a_late_click_gets_expired(
    runtime_factory: RuntimeFactory, clock: ManualClock, snapshot: Snapshot
) -> None:
    ran: list[str] = []
    rt = runtime_factory(deploy_agent(ran))
    parked = await rt.start("deployer", "ship it", requester="U1")
    pending = parked.pending[0]
    assert pending.ticket.deadline == clock.now() + timedelta(minutes=10)

    clock.advance(minutes=9)
    assert await rt.expire_overdue() == []
    clock.advance(minutes=2)
    assert await rt.expire_overdue() == [pending.ticket_id]
    assert await rt.expire_overdue() == []  # once only

    before = await snapshot(parked.run_id)
    with pytest.raises(Expired):
        await rt.approve(pending, actor="U1")
    assert await snapshot(parked.run_id) == before

    finished = await rt.resume(parked.run_id)
    assert finished.status is RunStatus.DONE
    assert ran == []
    tool_messages = [
        m
        for m in rt.agents["deployer"].model.calls[-1].messages
        if m["role"] == "tool"  # type: ignore[attr-defined]
    ]
    assert "expired" in tool_messages[0]["content"]
    events = [e["kind"] for e in await rt.events(parked.run_id)]
    assert events.count("ticket_expired") == 1
    async with rt.store.transaction() as tx:
        outbox = await tx.outbox_for_run(parked.run_id)
    assert [o.kind for o in outbox].count("expired") == 1


async def test_expiry_can_cancel_the_run(
    runtime_factory: RuntimeFactory, clock: ManualClock
) -> None:
    ran: list[str] = []
    rt = runtime_factory(deploy_agent(ran, on_expiry="cancel"))
    parked = await rt.start("deployer", "ship it", requester="U1")
    clock.advance(minutes=11)
    assert len(await rt.expire_overdue()) == 1
    result = await rt.get(parked.run_id)
    assert result.status is RunStatus.CANCELLED
    assert result.pending == ()
    assert ran == []
    assert await rt.expire_overdue() == []


async def test_expiry_escalates_once_then_denies(
    runtime_factory: RuntimeFactory, clock: ManualClock
) -> None:
    ran: list[str] = []
    escalate = Escalate(approvers=("U-lead",), deadline=timedelta(minutes=30))
    rt = runtime_factory(deploy_agent(ran, on_expiry=escalate))
    parked = await rt.start("deployer", "ship it", requester="U1")
    first = parked.pending[0]

    clock.advance(minutes=11)
    assert await rt.expire_overdue() == [first.ticket_id]
    escalated = (await rt.get(parked.run_id)).pending
    assert len(escalated) == 1
    second = escalated[0]
    assert second.ticket_id != first.ticket_id
    assert second.ticket.approvers == ("U-lead",)
    assert second.ticket.deadline == clock.now() + timedelta(minutes=30)
    assert second.call.call_id == first.call.call_id

    # The lead may decide the escalated ticket; the old one is gone.
    with pytest.raises(Expired):
        await rt.approve(first, actor="U1")
    done = await rt.approve(second, actor=Actor(id="U-lead"), resume=True)
    assert done.status is RunStatus.DONE
    assert ran == ["api"]


async def test_an_escalated_ticket_that_expires_is_denied(
    runtime_factory: RuntimeFactory, clock: ManualClock
) -> None:
    ran: list[str] = []
    escalate = Escalate(approvers=("U-lead",), deadline=timedelta(minutes=30))
    rt = runtime_factory(deploy_agent(ran, on_expiry=escalate))
    parked = await rt.start("deployer", "ship it", requester="U1")
    clock.advance(minutes=11)
    await rt.expire_overdue()
    clock.advance(minutes=31)
    assert len(await rt.expire_overdue()) == 1
    assert (await rt.get(parked.run_id)).status is RunStatus.QUEUED
    async with rt.store.transaction() as tx:
        tickets = await tx.tickets_for_run(parked.run_id)
    assert [t.status for t in tickets] == [TicketStatus.EXPIRED, TicketStatus.EXPIRED]
    finished = await rt.resume(parked.run_id)
    assert finished.status is RunStatus.DONE
    assert ran == []
