"""Many clicks on one ticket at once resume the run exactly once.

The bodies only use `runtime_factory` and the store protocol, so a suite that overrides
the `store` fixture runs them over another store.
"""

from __future__ import annotations

import asyncio
from typing import Any

from runtime import (
    Actor,
    Agent,
    Allow,
    CallState,
    NotAwaiting,
    RunStatus,
    ScriptedModel,
    TicketStatus,
    final_reply,
    tool_call_reply,
)

CLICKS = 50


def _agent(ran: list[str]) -> Agent:
    agent = Agent(
        "payments",
        "Pay.",
        ScriptedModel([tool_call_reply(("pay", {"invoice": "INV-1"})), final_reply("paid")]),
        approvers=["*"],
    )

    @agent.tool(permission="ask")
    async def pay(invoice: str) -> str:
        ran.append(invoice)
        await asyncio.sleep(0)
        return f"paid {invoice}"

    return agent


async def _gather(attempts: list[Any]) -> tuple[list[Any], list[BaseException]]:
    outcomes = await asyncio.gather(*attempts, return_exceptions=True)
    won = [o for o in outcomes if not isinstance(o, BaseException)]
    lost = [o for o in outcomes if isinstance(o, BaseException)]
    return won, lost


async def test_fifty_approvals_resume_exactly_once(runtime_factory: Any, store: Any) -> None:
    ran: list[str] = []
    rt = runtime_factory(_agent(ran))
    parked = await rt.start("payments", "pay INV-1", requester="U1")
    entry = parked.pending[0]
    won, lost = await _gather(
        [rt.approve(entry, actor=f"U{n}", resume=True) for n in range(CLICKS)]
    )
    assert len(won) == 1
    assert len(lost) == CLICKS - 1
    assert all(isinstance(e, NotAwaiting) for e in lost), {type(e) for e in lost}
    assert won[0].status is RunStatus.DONE
    assert ran == ["INV-1"]
    final = await rt.get(parked.run_id)
    assert final.status is RunStatus.DONE
    assert final.text == "paid"
    async with store.transaction() as tx:
        (call,) = await tx.calls_for_run(parked.run_id)
        ticket = await tx.get_ticket(entry.ticket_id)
        events = await tx.events(parked.run_id)
    assert call.state is CallState.COMPLETED
    assert call.attempts == 1
    assert ticket is not None and ticket.status is TicketStatus.DECIDED
    assert sum(1 for e in events if e.kind == "ticket_decided") == 1
    assert sum(1 for e in events if e.kind == "tool_dispatched") == 1


async def test_clicks_on_two_replicas_resume_exactly_once(runtime_factory: Any) -> None:
    ran: list[str] = []
    agent = _agent(ran)
    replicas = [runtime_factory(agent, worker_id=f"replica-{n}") for n in range(2)]
    parked = await replicas[0].start("payments", "pay INV-1", requester="U1")
    ticket = parked.pending[0].ticket
    attempts = [
        replicas[n % 2].decide(
            ticket.ticket_id,
            Allow(),
            Actor(id=f"U{n}", platform="slack"),
            correlation=ticket.correlation,
            resume=True,
        )
        for n in range(CLICKS)
    ]
    won, lost = await _gather(attempts)
    assert len(won) == 1
    assert all(isinstance(e, NotAwaiting) for e in lost)
    assert ran == ["INV-1"]
    assert (await replicas[1].get(parked.run_id)).status is RunStatus.DONE


async def test_approve_and_decline_race_has_one_winner(runtime_factory: Any) -> None:
    ran: list[str] = []
    rt = runtime_factory(_agent(ran))
    parked = await rt.start("payments", "pay INV-1", requester="U1")
    entry = parked.pending[0]
    attempts = []
    for n in range(CLICKS):
        if n % 2:
            attempts.append(rt.approve(entry, actor=f"U{n}", resume=True))
        else:
            attempts.append(rt.decline(entry, actor=f"U{n}", reason="race", resume=True))
    won, lost = await _gather(attempts)
    assert len(won) == 1
    assert all(isinstance(e, NotAwaiting) for e in lost)
    assert len(ran) <= 1
    assert (await rt.get(parked.run_id)).status is RunStatus.DONE


async def test_concurrent_resumes_drive_the_run_once(runtime_factory: Any) -> None:
    ran: list[str] = []
    agent = _agent(ran)
    rt = runtime_factory(agent)
    parked = await rt.start("payments", "pay INV-1", requester="U1")
    await rt.approve(parked.pending[0], actor="U1")
    results = await asyncio.gather(*[rt.resume(parked.run_id) for _ in range(10)])
    assert ran == ["INV-1"]
    assert all(r.status in (RunStatus.DONE, RunStatus.RUNNING) for r in results)
    assert (await rt.get(parked.run_id)).status is RunStatus.DONE
    assert isinstance(agent.model, ScriptedModel)
    assert len(agent.model.calls) == 2
