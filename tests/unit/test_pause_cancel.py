"""Pause and cancel: parked runs, runs with a tool in flight, and what a person sees."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from runtime import (
    Agent,
    CallState,
    NotAwaiting,
    RunStatus,
    ScriptedModel,
    TicketStatus,
    final_reply,
    tool_call_reply,
)


class Ops:
    """`restart` asks; `drain` is allowed and waits for `release` before it returns."""

    def __init__(self, runtime_factory: Any, calls: list[tuple[str, dict[str, Any]]]) -> None:
        self.ran: list[str] = []
        self.entered = asyncio.Event()
        self.release = asyncio.Event()
        self.model = ScriptedModel([tool_call_reply(*calls), final_reply("finished")])
        self.agent = Agent("ops", "Operate.", self.model)

        @self.agent.tool(permission="ask")
        async def restart(service: str) -> str:
            self.ran.append(f"restart {service}")
            return f"restarted {service}"

        @self.agent.tool
        async def drain(node: str) -> str:
            self.entered.set()
            await self.release.wait()
            self.ran.append(f"drain {node}")
            return f"drained {node}"

        self.runtime = runtime_factory(self.agent)

    async def start_in_background(self) -> tuple[asyncio.Task[Any], str]:
        task = asyncio.create_task(self.runtime.start("ops", "go", requester="U1"))
        await asyncio.wait_for(self.entered.wait(), 5)
        async with self.runtime.store.transaction() as tx:
            (run,) = await tx.list_runs(limit=1)
        return task, run.run_id


async def _calls(store: Any, run_id: str) -> list[Any]:
    async with store.transaction() as tx:
        return await tx.calls_for_run(run_id)


async def _tickets(store: Any, run_id: str) -> list[Any]:
    async with store.transaction() as tx:
        return await tx.tickets_for_run(run_id)


# --- pause -----------------------------------------------------------------------------------


async def test_pause_of_an_awaiting_run_holds_it_after_decisions(
    runtime_factory: Any, store: Any
) -> None:
    app = Ops(runtime_factory, [("restart", {"service": "api"})])
    parked = await app.runtime.start("ops", "go", requester="U1")
    assert parked.status is RunStatus.AWAITING
    paused = await app.runtime.pause(parked.run_id, actor="ops-lead")
    assert paused.status is RunStatus.PAUSED
    assert [p.ticket_id for p in paused.pending] == [parked.pending[0].ticket_id]
    still = await app.runtime.approve(parked.pending[0], actor="U1", resume=True)
    assert still.status is RunStatus.PAUSED
    assert app.ran == []
    assert len(app.model.calls) == 1
    assert await app.runtime.work_once() == 0, "a paused run is not claimable"
    done = await app.runtime.resume(parked.run_id)
    assert done.status is RunStatus.DONE
    assert app.ran == ["restart api"]
    tickets = await _tickets(store, parked.run_id)
    assert {t.target.kind: t.status for t in tickets} == {
        "tool_permission": TicketStatus.DECIDED,
        "pause": TicketStatus.DECIDED,
    }
    kinds = [e["kind"] for e in await app.runtime.events(parked.run_id)]
    assert "run_paused" in kinds and "run_resumed" in kinds


async def test_resume_of_a_paused_run_without_decisions_waits_again(
    runtime_factory: Any,
) -> None:
    app = Ops(runtime_factory, [("restart", {"service": "api"})])
    parked = await app.runtime.start("ops", "go", requester="U1")
    await app.runtime.pause(parked.run_id)
    back = await app.runtime.resume(parked.run_id)
    assert back.status is RunStatus.AWAITING
    assert [p.ticket_id for p in back.pending] == [parked.pending[0].ticket_id]
    done = await app.runtime.approve(back.pending[0], actor="U1", resume=True)
    assert done.status is RunStatus.DONE


async def test_pause_waits_for_the_running_tool(runtime_factory: Any, store: Any) -> None:
    app = Ops(runtime_factory, [("drain", {"node": "n1"}), ("drain", {"node": "n2"})])
    task, run_id = await app.start_in_background()
    requested = await app.runtime.pause(run_id, actor="ops-lead")
    assert requested.status is RunStatus.RUNNING, "the tool is still running"
    assert not task.done()
    app.release.set()
    result = await asyncio.wait_for(task, 5)
    assert result.status is RunStatus.PAUSED
    # The running tool finished and its result is kept; the next one did not start.
    assert app.ran == ["drain n1"]
    states = [c.state for c in await _calls(store, run_id)]
    assert states == [CallState.COMPLETED, CallState.APPROVED]
    assert len(app.model.calls) == 1
    done = await app.runtime.resume(run_id)
    assert done.status is RunStatus.DONE
    assert app.ran == ["drain n1", "drain n2"]
    tool_messages = [m for m in app.model.calls[-1].messages if m["role"] == "tool"]
    assert [m["content"] for m in tool_messages] == ["drained n1", "drained n2"]


async def test_pause_of_a_finished_or_paused_run_is_refused(runtime_factory: Any) -> None:
    app = Ops(runtime_factory, [("restart", {"service": "api"})])
    parked = await app.runtime.start("ops", "go", requester="U1")
    await app.runtime.pause(parked.run_id)
    with pytest.raises(NotAwaiting):
        await app.runtime.pause(parked.run_id)
    await app.runtime.cancel(parked.run_id)
    with pytest.raises(NotAwaiting):
        await app.runtime.pause(parked.run_id)


# --- cancel ----------------------------------------------------------------------------------


async def test_cancel_of_an_awaiting_run_voids_its_tickets(
    runtime_factory: Any, store: Any
) -> None:
    app = Ops(runtime_factory, [("restart", {"service": "api"}), ("restart", {"service": "db"})])
    parked = await app.runtime.start("ops", "go", requester="U1")
    assert len(parked.pending) == 2
    cancelled = await app.runtime.cancel(parked.run_id, actor="ops-lead", reason="wrong target")
    assert cancelled.status is RunStatus.CANCELLED
    assert cancelled.pending == ()
    assert cancelled.error == "wrong target"
    assert {t.status for t in await _tickets(store, parked.run_id)} == {TicketStatus.VOIDED}
    assert {c.state for c in await _calls(store, parked.run_id)} == {CallState.CANCELLED}
    for entry in parked.pending:
        with pytest.raises(NotAwaiting):
            await app.runtime.approve(entry, actor="U1", resume=True)
        with pytest.raises(NotAwaiting):
            await app.runtime.approve(entry.execution_key, actor="U1")
    assert app.ran == []
    assert await app.runtime.open_tickets() == []
    with pytest.raises(NotAwaiting):
        await app.runtime.cancel(parked.run_id)
    final = await app.runtime.resume(parked.run_id)
    assert final.status is RunStatus.CANCELLED
    assert len(app.model.calls) == 1


async def test_cancel_of_a_paused_run(runtime_factory: Any, store: Any) -> None:
    app = Ops(runtime_factory, [("restart", {"service": "api"})])
    parked = await app.runtime.start("ops", "go", requester="U1")
    await app.runtime.pause(parked.run_id)
    cancelled = await app.runtime.cancel(parked.run_id)
    assert cancelled.status is RunStatus.CANCELLED
    assert {t.status for t in await _tickets(store, parked.run_id)} == {TicketStatus.VOIDED}


async def test_cancel_while_running_is_cooperative(runtime_factory: Any, store: Any) -> None:
    app = Ops(runtime_factory, [("drain", {"node": "n1"}), ("drain", {"node": "n2"})])
    task, run_id = await app.start_in_background()
    requested = await app.runtime.cancel(run_id, actor="ops-lead")
    assert requested.status is RunStatus.RUNNING
    assert not task.done()
    app.release.set()
    result = await asyncio.wait_for(task, 5)
    assert result.status is RunStatus.CANCELLED
    # The running tool finished (no rollback); the next one never ran; no model call.
    assert app.ran == ["drain n1"]
    states = [c.state for c in await _calls(store, run_id)]
    assert states == [CallState.COMPLETED, CallState.CANCELLED]
    assert len(app.model.calls) == 1
    kinds = [e["kind"] for e in await app.runtime.events(run_id)]
    assert "cancel_requested" in kinds and "run_cancelled" in kinds
