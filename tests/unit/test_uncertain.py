"""Recovery after a worker dies mid-flight: replay policies and uncertain calls.

A checkpoint raising a `BaseException` abandons the driver at a named point, as a killed
process would; a second runtime on the same store then recovers once the lease expired.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from runtime import (
    Agent,
    CallState,
    NotAwaiting,
    ResolutionError,
    RunStatus,
    ScriptedModel,
    TicketStatus,
    current_tool_context,
    final_reply,
    tool_call_reply,
)

LEASE = 30.0


class Abandon(BaseException):
    """The worker vanished (not an `Exception`, so nothing in the runtime catches it)."""


def crash_at(point: str) -> Any:
    def checkpoint(reached: str, info: dict[str, Any]) -> None:
        if reached == point:
            raise Abandon(point)

    return checkpoint


class Payments:
    def __init__(self, runtime_factory: Any, policy: str, permission: str = "allow") -> None:
        self.factory = runtime_factory
        self.ran: list[dict[str, Any]] = []
        self.model = ScriptedModel(
            [tool_call_reply(("pay", {"invoice": "INV-7", "cents": 1200})), final_reply("Paid.")]
        )
        self.agent = Agent("payments", "Pay invoices.", self.model)

        @self.agent.tool(permission=permission, replay_policy=policy)
        async def pay(invoice: str, cents: int) -> str:
            ctx = current_tool_context()
            self.ran.append({"key": ctx.execution_key, "attempt": ctx.attempt, "call": ctx.call_id})
            return f"paid {cents} on {invoice}"

    async def crash(self, point: str) -> str:
        """Start a run whose worker dies at `point`; returns the run id."""
        doomed = self.factory(self.agent, checkpoint=crash_at(point), lease_seconds=LEASE)
        with pytest.raises(Abandon):
            await doomed.start("payments", "pay INV-7", requester="U1", origin={"ch": "C1"})
        async with doomed.store.transaction() as tx:
            (run,) = await tx.list_runs(limit=1)
        assert run.status is RunStatus.RUNNING
        return run.run_id

    def fresh(self) -> Any:
        return self.factory(self.agent, lease_seconds=LEASE)

    def tool_messages(self) -> list[dict[str, Any]]:
        return [m for m in self.model.calls[-1].messages if m.get("role") == "tool"]


async def _call(store: Any, run_id: str) -> Any:
    async with store.transaction() as tx:
        (call,) = await tx.calls_for_run(run_id)
    return call


async def test_crash_leaves_a_dispatched_call_without_result(
    runtime_factory: Any, store: Any
) -> None:
    app = Payments(runtime_factory, "manual")
    run_id = await app.crash("tool_returned")
    call = await _call(store, run_id)
    assert call.state is CallState.DISPATCHED
    assert call.result is None
    assert len(app.ran) == 1


async def test_no_recovery_while_the_lease_holds(
    runtime_factory: Any, store: Any, clock: Any
) -> None:
    app = Payments(runtime_factory, "safe")
    run_id = await app.crash("tool_returned")
    clock.advance(LEASE - 1)
    assert await app.fresh().recover() == []
    assert (await _call(store, run_id)).state is CallState.DISPATCHED
    assert len(app.ran) == 1


async def test_manual_becomes_uncertain(runtime_factory: Any, store: Any, clock: Any) -> None:
    app = Payments(runtime_factory, "manual")
    run_id = await app.crash("tool_returned")
    clock.advance(LEASE + 1)
    (result,) = await app.fresh().recover()
    assert result.run_id == run_id
    assert result.status is RunStatus.AWAITING
    (entry,) = result.pending
    assert entry.status == "uncertain"
    assert entry.ticket.target.kind == "uncertain"
    assert entry.ticket.target.execution_key == app.ran[0]["key"]  # type: ignore[union-attr]
    assert entry.call.arguments == {"invoice": "INV-7", "cents": 1200}
    assert len(app.ran) == 1, "a manual call is never run again by recovery"
    assert (await _call(store, run_id)).state is CallState.UNCERTAIN
    async with store.transaction() as tx:
        outbox = await tx.outbox_for_run(run_id)
        events = [e.kind for e in await tx.events(run_id)]
    (row,) = [o for o in outbox if o.kind == "uncertain"]
    assert row.ticket_id == entry.ticket_id
    assert row.destination == {"ch": "C1"}
    assert row.payload["target"]["execution_key"] == app.ran[0]["key"]
    assert "tool_uncertain" in events


@pytest.mark.parametrize("policy", ["safe", "idempotent"])
async def test_replayable_calls_run_again_with_the_same_key(
    runtime_factory: Any, store: Any, clock: Any, policy: str
) -> None:
    app = Payments(runtime_factory, policy)
    run_id = await app.crash("tool_returned")
    clock.advance(LEASE + 1)
    (result,) = await app.fresh().recover()
    assert result.status is RunStatus.DONE
    assert result.text == "Paid."
    assert [r["attempt"] for r in app.ran] == [1, 2]
    assert app.ran[0]["key"] == app.ran[1]["key"]
    assert app.ran[0]["call"] == app.ran[1]["call"]
    call = await _call(store, run_id)
    assert call.state is CallState.COMPLETED
    assert call.attempts == 2
    async with store.transaction() as tx:
        events = [e for e in await tx.events(run_id) if e.kind == "tool_replayed"]
    assert [e.data["policy"] for e in events] == [policy]


async def _uncertain(app: Payments, clock: Any) -> tuple[Any, Any, str]:
    run_id = await app.crash("tool_returned")
    clock.advance(LEASE + 1)
    rt = app.fresh()
    (result,) = await rt.recover()
    return rt, result.pending[0], run_id


async def test_resolve_records_the_verified_result(
    runtime_factory: Any, store: Any, clock: Any
) -> None:
    app = Payments(runtime_factory, "manual")
    rt, entry, run_id = await _uncertain(app, clock)
    done = await rt.resolve_tool(
        entry, result={"paid": True, "ref": "PAY-1"}, actor="U1", resume=True
    )
    assert done.status is RunStatus.DONE
    assert len(app.ran) == 1, "resolving never runs the tool"
    (message,) = app.tool_messages()
    assert json.loads(message["content"]) == {"paid": True, "ref": "PAY-1"}
    call = await _call(store, run_id)
    assert call.state is CallState.RESOLVED
    assert call.result == {"paid": True, "ref": "PAY-1"}
    async with store.transaction() as tx:
        ticket = await tx.get_ticket(entry.ticket_id)
    assert ticket is not None and ticket.status is TicketStatus.DECIDED
    assert ticket.decision is not None and ticket.decision.kind == "resolve"


async def test_resolve_by_execution_key(runtime_factory: Any, clock: Any) -> None:
    app = Payments(runtime_factory, "manual")
    rt, entry, _ = await _uncertain(app, clock)
    done = await rt.resolve_tool(entry.execution_key, result="paid manually", resume=True)
    assert done.status is RunStatus.DONE
    assert app.tool_messages()[0]["content"] == "paid manually"


async def test_retry_runs_it_again_with_the_same_key(
    runtime_factory: Any, store: Any, clock: Any
) -> None:
    app = Payments(runtime_factory, "manual")
    rt, entry, run_id = await _uncertain(app, clock)
    done = await rt.resolve_tool(entry, retry=True, actor="U1", resume=True)
    assert done.status is RunStatus.DONE
    assert [r["attempt"] for r in app.ran] == [1, 2]
    assert app.ran[0]["key"] == app.ran[1]["key"] == entry.execution_key
    assert app.tool_messages()[0]["content"] == "paid 1200 on INV-7"
    assert (await _call(store, run_id)).state is CallState.COMPLETED


@pytest.mark.parametrize("reason", [None, "paid by phone"])
async def test_abort_tells_the_model(
    runtime_factory: Any, store: Any, clock: Any, reason: str | None
) -> None:
    app = Payments(runtime_factory, "manual")
    rt, entry, run_id = await _uncertain(app, clock)
    done = await rt.resolve_tool(entry, abort=True, reason=reason, actor="U1", resume=True)
    assert done.status is RunStatus.DONE
    assert len(app.ran) == 1
    content = app.tool_messages()[0]["content"]
    assert content.startswith("Abort")
    if reason:
        assert reason in content
    call = await _call(store, run_id)
    assert call.state is CallState.RESOLVED
    assert call.error == "aborted"


async def test_allow_does_not_fit_an_uncertain_call(
    runtime_factory: Any, snapshot: Any, clock: Any
) -> None:
    app = Payments(runtime_factory, "manual")
    rt, entry, run_id = await _uncertain(app, clock)
    before = await snapshot(run_id)
    with pytest.raises(ResolutionError):
        await rt.approve(entry, actor="U1")
    with pytest.raises(ResolutionError):
        await rt.decline(entry, actor="U1")
    with pytest.raises(ResolutionError):
        await rt.resolve_tool(entry, retry=True, abort=True)
    assert await snapshot(run_id) == before


async def test_resolved_uncertain_cannot_be_resolved_again(
    runtime_factory: Any, clock: Any
) -> None:
    app = Payments(runtime_factory, "manual")
    rt, entry, _ = await _uncertain(app, clock)
    await rt.resolve_tool(entry, result="ok", resume=True)
    with pytest.raises(NotAwaiting):
        await rt.resolve_tool(entry, retry=True, resume=True)
    assert len(app.ran) == 1


async def test_crash_right_after_dispatch_is_still_uncertain(
    runtime_factory: Any, store: Any, clock: Any
) -> None:
    # The dispatch intent is committed before the tool runs: a crash there leaves no way
    # to know whether the effect happened, so a manual call is uncertain too.
    app = Payments(runtime_factory, "manual")
    run_id = await app.crash("dispatch_committed")
    assert app.ran == []
    clock.advance(LEASE + 1)
    (result,) = await app.fresh().recover()
    assert [p.status for p in result.pending] == ["uncertain"]
    assert (await _call(store, run_id)).state is CallState.UNCERTAIN


async def test_crash_after_the_result_is_committed_does_not_rerun(
    runtime_factory: Any, store: Any, clock: Any
) -> None:
    app = Payments(runtime_factory, "manual")
    run_id = await app.crash("result_committed")
    clock.advance(LEASE + 1)
    (result,) = await app.fresh().recover()
    assert result.status is RunStatus.DONE
    assert len(app.ran) == 1
    assert app.tool_messages()[0]["content"] == "paid 1200 on INV-7"
    assert (await _call(store, run_id)).state is CallState.COMPLETED


async def test_crash_after_the_model_reply_runs_each_call_once(
    runtime_factory: Any, clock: Any
) -> None:
    app = Payments(runtime_factory, "manual")
    await app.crash("model_call_committed")
    assert app.ran == []
    clock.advance(LEASE + 1)
    (result,) = await app.fresh().recover()
    assert result.status is RunStatus.DONE
    assert len(app.ran) == 1
    assert result.turns == 2


async def test_crash_after_a_decision_resumes_on_recovery(runtime_factory: Any, clock: Any) -> None:
    app = Payments(runtime_factory, "manual", permission="ask")
    parked = await app.fresh().start("payments", "pay", requester="U1")
    doomed = app.factory(app.agent, checkpoint=crash_at("decision_committed"), lease_seconds=LEASE)
    with pytest.raises(Abandon):
        await doomed.approve(parked.pending[0], actor="U1", resume=True)
    assert app.ran == []
    # Deciding with resume=True claimed the run in the same commit: it is recovered
    # once the dead worker's lease expires, not before.
    assert await app.fresh().recover() == []
    clock.advance(LEASE + 1)
    (result,) = await app.fresh().recover()
    assert result.status is RunStatus.DONE
    assert len(app.ran) == 1


async def test_interrupted_model_call_is_a_new_attempt(runtime_factory: Any, clock: Any) -> None:
    attempts: list[int] = []

    def reply(request: Any) -> dict[str, Any]:
        attempts.append(request.attempt)
        if len(attempts) == 1:
            raise Abandon("model call in flight")
        return final_reply("hello", prompt_tokens=5, completion_tokens=2)

    agent = Agent("chat", "Chat.", ScriptedModel(reply))
    with pytest.raises(Abandon):
        await runtime_factory(agent, lease_seconds=LEASE).start("chat", "hi", requester="U1")
    clock.advance(LEASE + 1)
    (result,) = await runtime_factory(agent, lease_seconds=LEASE).recover()
    assert result.status is RunStatus.DONE
    assert attempts == [1, 2]
    assert result.usage_incomplete is True
    assert result.turns == 1
    assert result.total_tokens == 7
    kinds = [e["kind"] for e in await runtime_factory(agent).events(result.run_id)]
    assert "model_interrupted" in kinds


async def test_a_worker_that_lost_its_lease_cannot_record(
    runtime_factory: Any, store: Any, clock: Any
) -> None:
    entered = asyncio.Event()
    release = asyncio.Event()
    ran: list[int] = []
    model = ScriptedModel([tool_call_reply(("pay", {"invoice": "INV-9"})), final_reply("ok")])
    agent = Agent("payments", "Pay.", model)

    @agent.tool
    async def pay(invoice: str) -> str:
        ran.append(current_tool_context().attempt)
        entered.set()
        await release.wait()
        return "paid"

    slow = runtime_factory(agent, lease_seconds=LEASE, worker_id="slow")
    task = asyncio.create_task(slow.start("payments", "pay", requester="U1"))
    await asyncio.wait_for(entered.wait(), 5)
    clock.advance(LEASE + 1)
    fast = runtime_factory(agent, lease_seconds=LEASE, worker_id="fast")
    (taken,) = await asyncio.wait_for(fast.recover(), 5)
    assert taken.status is RunStatus.AWAITING
    assert [p.status for p in taken.pending] == ["uncertain"]
    release.set()
    late = await asyncio.wait_for(task, 5)
    # The slow worker's result write was refused: the person still decides.
    assert late.status is RunStatus.AWAITING
    assert [p.ticket_id for p in late.pending] == [taken.pending[0].ticket_id]
    assert (await _call(store, taken.run_id)).state is CallState.UNCERTAIN
    assert ran == [1]
    assert len(model.calls) == 1
