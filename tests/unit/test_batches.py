"""Several tool calls in one model reply: one decision each, continue after the last."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from runtime import (
    Agent,
    CallState,
    RunStatus,
    ScriptedModel,
    TicketStatus,
    final_reply,
    tool_call_reply,
)


class Batch:
    """An agent whose first reply asks for `calls`; `ask_*` tools ask, `look` is allowed."""

    def __init__(self, runtime_factory: Any, calls: list[tuple[str, dict[str, Any]]]) -> None:
        self.ran: list[tuple[str, Any]] = []
        self.model = ScriptedModel([tool_call_reply(*calls), final_reply("all done")])
        self.agent = Agent("ops", "Operate.", self.model)

        @self.agent.tool(permission="ask")
        async def restart(service: str) -> str:
            self.ran.append(("restart", service))
            return f"restarted {service}"

        @self.agent.tool(permission="allow")
        async def look(service: str) -> str:
            self.ran.append(("look", service))
            return f"{service} looks fine"

        self.runtime = runtime_factory(self.agent)

    def tool_messages(self) -> list[dict[str, Any]]:
        return [m for m in self.model.calls[-1].messages if m.get("role") == "tool"]


THREE = [("restart", {"service": s}) for s in ("api", "db", "cache")]


def by_call_order(pending: Any) -> list[Any]:
    """Pending entries in the order the model asked for the calls."""
    return sorted(pending, key=lambda p: int(p.call.model_call_id.rsplit("_", 1)[1]))


async def test_one_park_with_one_entry_per_call(runtime_factory: Any, store: Any) -> None:
    app = Batch(runtime_factory, THREE)
    parked = await app.runtime.start("ops", "restart all", requester="U1")
    assert parked.status is RunStatus.AWAITING
    ordered = by_call_order(parked.pending)
    assert [p.call.arguments["service"] for p in ordered] == ["api", "db", "cache"]
    assert {p.status for p in parked.pending} == {"approval"}
    assert len({p.ticket_id for p in parked.pending}) == 3
    assert len({p.execution_key for p in parked.pending}) == 3
    assert app.ran == []
    events = [e["kind"] for e in await app.runtime.events(parked.run_id)]
    assert events.count("run_awaiting") == 1
    assert events.count("ticket_opened") == 3
    async with store.transaction() as tx:
        calls = await tx.calls_for_run(parked.run_id)
    assert [c.state for c in calls] == [CallState.AWAITING_DECISION] * 3


async def _decide_all_but_last(app: Batch) -> Any:
    parked = await app.runtime.start("ops", "restart all", requester="U1")
    first, second, last = by_call_order(parked.pending)
    after_first = await app.runtime.approve(first, actor="U1", resume=True)
    assert after_first.status is RunStatus.AWAITING
    assert {p.ticket_id for p in after_first.pending} == {second.ticket_id, last.ticket_id}
    after_second = await app.runtime.decline(second, actor="U1", reason="db is busy", resume=True)
    assert after_second.status is RunStatus.AWAITING
    assert [p.ticket_id for p in after_second.pending] == [last.ticket_id]
    # Nothing ran and the model was not asked again while one decision is missing.
    assert app.ran == []
    assert len(app.model.calls) == 1
    resumed = await app.runtime.resume(parked.run_id)
    assert resumed.status is RunStatus.AWAITING
    assert app.ran == []
    return parked, last


def _assert_finished_in_order(app: Batch, result: Any) -> None:
    assert result.status is RunStatus.DONE
    assert result.text == "all done"
    assert app.ran == [("restart", "api"), ("restart", "cache")]
    messages = app.tool_messages()
    assert [m["tool_call_id"] for m in messages] == ["call_1", "call_2", "call_3"]
    assert messages[0]["content"] == "restarted api"
    assert messages[1]["content"] == "Permission denied: db is busy"
    assert messages[2]["content"] == "restarted cache"


async def test_last_decision_with_resume_continues(runtime_factory: Any) -> None:
    app = Batch(runtime_factory, THREE)
    _, last = await _decide_all_but_last(app)
    done = await app.runtime.approve(last, actor="U1", resume=True)
    _assert_finished_in_order(app, done)


@pytest.mark.parametrize("by", ["run_id", "thread_id"])
async def test_explicit_resume_after_the_last_decision(runtime_factory: Any, by: str) -> None:
    app = Batch(runtime_factory, THREE)
    parked, last = await _decide_all_but_last(app)
    ready = await app.runtime.approve(last, actor="U1")
    assert ready.status is RunStatus.QUEUED
    assert app.ran == []
    done = await app.runtime.resume(parked.run_id if by == "run_id" else parked.thread_id)
    assert done.run_id == parked.run_id
    _assert_finished_in_order(app, done)


async def test_a_worker_picks_up_a_ready_run(runtime_factory: Any) -> None:
    app = Batch(runtime_factory, THREE)
    _, last = await _decide_all_but_last(app)
    await app.runtime.approve(last, actor="U1")
    assert await app.runtime.work_once() == 1
    parked_id = last.ticket.run_id
    _assert_finished_in_order(app, await app.runtime.get(parked_id))


async def test_decisions_in_any_order(runtime_factory: Any, store: Any) -> None:
    app = Batch(runtime_factory, THREE)
    parked = await app.runtime.start("ops", "restart all", requester="U1")
    first, second, last = by_call_order(parked.pending)
    await app.runtime.approve(last, actor="U1")
    await app.runtime.decline(second, actor="U1", reason="db is busy")
    done = await app.runtime.approve(first, actor="U1", resume=True)
    _assert_finished_in_order(app, done)
    async with store.transaction() as tx:
        tickets = await tx.tickets_for_run(parked.run_id)
    assert {t.status for t in tickets} == {TicketStatus.DECIDED}


async def test_mixed_batch_runs_the_allowed_call_before_parking(
    runtime_factory: Any, store: Any
) -> None:
    calls = [("look", {"service": "api"}), ("restart", {"service": "api"})]
    app = Batch(runtime_factory, calls)
    parked = await app.runtime.start("ops", "check and restart", requester="U1")
    assert parked.status is RunStatus.AWAITING
    assert app.ran == [("look", "api")]
    assert [p.call.name for p in parked.pending] == ["restart"]
    async with store.transaction() as tx:
        states = [c.state for c in await tx.calls_for_run(parked.run_id)]
    assert states == [CallState.COMPLETED, CallState.AWAITING_DECISION]
    done = await app.runtime.approve(parked.pending[0], actor="U1", resume=True)
    assert done.status is RunStatus.DONE
    assert app.ran == [("look", "api"), ("restart", "api")]
    messages = app.tool_messages()
    assert [m["tool_call_id"] for m in messages] == ["call_1", "call_2"]
    assert [m["content"] for m in messages] == ["api looks fine", "restarted api"]


async def test_results_follow_call_order_not_completion_order(runtime_factory: Any) -> None:
    calls = [
        ("restart", {"service": "a"}),
        ("look", {"service": "b"}),
        ("restart", {"service": "c"}),
        ("look", {"service": "d"}),
    ]
    app = Batch(runtime_factory, calls)
    parked = await app.runtime.start("ops", "go", requester="U1")
    # The allowed calls already ran; the asks are decided last-first.
    assert app.ran == [("look", "b"), ("look", "d")]
    ask_a, ask_c = by_call_order(parked.pending)
    await app.runtime.approve(ask_c, actor="U1")
    done = await app.runtime.approve(ask_a, actor="U1", resume=True)
    assert done.status is RunStatus.DONE
    assert [m["content"] for m in app.tool_messages()] == [
        "restarted a",
        "b looks fine",
        "restarted c",
        "d looks fine",
    ]
    assert [m["tool_call_id"] for m in app.tool_messages()] == [
        "call_1",
        "call_2",
        "call_3",
        "call_4",
    ]


async def test_pending_entries_are_listed_in_call_order(runtime_factory: Any) -> None:
    # A batch of twelve asks: the pending list (what a person sees, in that order) must
    # follow the model's call order, not the sort order of the ticket ids.
    calls = [("restart", {"service": f"s{n}"}) for n in range(12)]
    app = Batch(runtime_factory, calls)
    parked = await app.runtime.start("ops", "restart twelve", requester="U1")
    assert [p.call.arguments["service"] for p in parked.pending] == [f"s{n}" for n in range(12)]
    listed = await app.runtime.open_tickets()
    assert [p.call.arguments["service"] for p in listed] == [f"s{n}" for n in range(12)]


async def test_decision_while_the_allowed_part_still_runs(runtime_factory: Any) -> None:
    # The ask ticket is open as soon as the model's reply is committed, so a person can
    # decide it while an allowed call of the same batch is still running. The decision
    # must not be lost: the run finishes instead of parking with nothing left to decide.
    entered = asyncio.Event()
    release = asyncio.Event()
    calls = [("slow_look", {"service": "api"}), ("restart", {"service": "api"})]
    app = Batch(runtime_factory, calls)

    @app.agent.tool
    async def slow_look(service: str) -> str:
        entered.set()
        await release.wait()
        app.ran.append(("slow_look", service))
        return f"{service} looked at"

    task = asyncio.create_task(app.runtime.start("ops", "go", requester="U1"))
    await asyncio.wait_for(entered.wait(), 5)
    (entry,) = await app.runtime.open_tickets()
    decided = await app.runtime.approve(entry, actor="U1", resume=True)
    assert decided.status is RunStatus.RUNNING
    release.set()
    await asyncio.wait_for(task, 5)
    final = await app.runtime.resume(decided.run_id)
    assert final.status is RunStatus.DONE, (final.status, final.pending)
    assert app.ran == [("slow_look", "api"), ("restart", "api")]
