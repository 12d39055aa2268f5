"""The flight recorder and the outbox of platform notifications."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest

from runtime import (
    Actor,
    Agent,
    CallState,
    Expired,
    InputRequest,
    RunStatus,
    ScriptedModel,
    TicketStatus,
    final_reply,
    tool_call_reply,
)

ORIGIN = {"platform": "slack", "channel": "C42", "thread_ts": "1700000000.1"}


def _agent(replies: list[dict[str, Any]], **ask_options: Any) -> Agent:
    agent = Agent("ops", "Operate.", ScriptedModel(replies))
    assert isinstance(agent.model, ScriptedModel)

    @agent.tool(permission="ask", **ask_options)
    async def restart(service: str) -> str:
        return f"restarted {service}"

    @agent.tool
    async def look(service: str) -> str:
        return f"{service} ok"

    @agent.tool
    async def crash(service: str) -> str:
        raise ValueError(f"{service} is gone")

    return agent


async def _outbox(store: Any, run_id: str) -> list[Any]:
    async with store.transaction() as tx:
        return await tx.outbox_for_run(run_id)


async def test_flight_recorder_of_a_whole_run(runtime_factory: Any) -> None:
    agent = _agent(
        [
            tool_call_reply(
                ("look", {"service": "api"}),
                ("crash", {"service": "db"}),
                ("restart", {"service": "api"}),
                content="api looks stuck",
                prompt_tokens=11,
                completion_tokens=7,
            ),
            final_reply("done", prompt_tokens=13, completion_tokens=5),
        ]
    )
    rt = runtime_factory(agent)
    parked = await rt.start("ops", "fix api", requester="U1", origin=ORIGIN)
    approver = Actor(id="U1", platform="slack", name="Ann")
    await rt.approve(parked.pending[0], actor=approver, resume=True)
    events = await rt.events(parked.run_id)
    kinds = [e["kind"] for e in events]
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    assert kinds[0] == "run_started"
    assert kinds[-1] == "run_done"
    for kind in (
        "model_call",
        "tool_proposed",
        "tool_dispatched",
        "tool_completed",
        "tool_failed",
        "ticket_opened",
        "ticket_decided",
        "run_awaiting",
    ):
        assert kind in kinds, kind
    started = events[0]
    assert started["actor"] == "U1"
    assert started["data"]["input"] == "fix api"
    assert started["data"]["origin"] == ORIGIN
    model_calls = [e["data"] for e in events if e["kind"] == "model_call"]
    assert [(m["prompt_tokens"], m["completion_tokens"]) for m in model_calls] == [(11, 7), (13, 5)]
    assert model_calls[0]["tool_calls"] == ["look", "crash", "restart"]
    assert model_calls[0]["text"] == "api looks stuck"
    dispatched = [e["data"]["tool"] for e in events if e["kind"] == "tool_dispatched"]
    assert dispatched == ["look", "crash", "restart"]
    completed = {e["data"]["tool"]: e["data"] for e in events if e["kind"] == "tool_completed"}
    assert completed["look"]["result"] == "api ok"
    assert completed["restart"]["result"] == "restarted api"
    (failed,) = [e["data"] for e in events if e["kind"] == "tool_failed"]
    assert failed["tool"] == "crash"
    assert "db is gone" in failed["error"]
    (opened,) = [e["data"] for e in events if e["kind"] == "ticket_opened"]
    assert opened["ticket_id"] == parked.pending[0].ticket_id
    assert opened["target"]["tool"] == "restart"
    assert opened["target"]["args"] == {"service": "api"}
    assert opened["target"]["reason"] == "api looks stuck"
    (decided,) = [e for e in events if e["kind"] == "ticket_decided"]
    assert decided["actor"] == "U1"
    assert decided["data"]["decision"] == "allow"
    assert decided["data"]["platform"] == "slack"
    assert decided["data"]["actor_name"] == "Ann"
    # Decision before dispatch of the asked call.
    restart_dispatch = next(
        i
        for i, e in enumerate(events)
        if e["kind"] == "tool_dispatched" and e["data"]["tool"] == "restart"
    )
    assert kinds.index("ticket_decided") < restart_dispatch


async def test_export_is_json_lines_of_the_same_events(runtime_factory: Any) -> None:
    agent = _agent([tool_call_reply(("restart", {"service": "api"})), final_reply("done")])
    rt = runtime_factory(agent)
    parked = await rt.start("ops", "go", requester="U1")
    await rt.decline(parked.pending[0], actor="U1", reason="no", resume=True)
    exported = await rt.export_events(parked.run_id)
    assert exported.endswith("\n")
    lines = [json.loads(line) for line in exported.splitlines()]
    assert lines == json.loads(json.dumps(await rt.events(parked.run_id), default=str))
    assert all({"seq", "at", "run_id", "kind", "actor", "data"} <= set(e) for e in lines)
    assert {e["run_id"] for e in lines} == {parked.run_id}
    (decided,) = [e for e in lines if e["kind"] == "ticket_decided"]
    assert decided["data"]["decision"] == "deny"
    assert decided["data"]["reason"] == "no"


async def test_outbox_rows_of_an_approval(runtime_factory: Any, store: Any) -> None:
    agent = _agent([tool_call_reply(("restart", {"service": "api"})), final_reply("done")])
    rt = runtime_factory(agent)
    parked = await rt.start("ops", "go", requester="U1", origin=ORIGIN)
    rows = await _outbox(store, parked.run_id)
    assert [r.kind for r in rows] == ["approval_requested"]
    (requested,) = rows
    ticket_id = parked.pending[0].ticket_id
    assert requested.ticket_id == ticket_id
    assert requested.payload["target"]["tool"] == "restart"
    assert requested.payload["who_may_decide"] == "U1"
    assert requested.state == "pending"
    done = await rt.approve(parked.pending[0], actor=Actor(id="U1", platform="slack"), resume=True)
    assert done.status is RunStatus.DONE
    rows = await _outbox(store, parked.run_id)
    assert [r.kind for r in rows] == ["approval_requested", "decided", "run_finished"]
    for row in rows:
        assert row.destination == ORIGIN
        assert row.run_id == parked.run_id
        assert row.payload["run_id"] == parked.run_id
        assert row.payload["agent"] == "ops"
    decided = rows[1]
    assert decided.ticket_id == ticket_id
    assert decided.payload["decision"] == "allow"
    assert decided.payload["actor"] == "U1"
    finished = rows[2]
    assert finished.payload["status"] == "done"
    assert finished.payload["text"] == "done"
    found = await _find(store, ticket_id, "approval_requested")
    assert found is not None and found.outbox_id == requested.outbox_id


async def _find(store: Any, ticket_id: str, kind: str) -> Any:
    async with store.transaction() as tx:
        return await tx.find_outbox(ticket_id=ticket_id, kind=kind)


async def test_outbox_rows_are_separate_per_run(runtime_factory: Any, store: Any) -> None:
    agent = _agent([final_reply("hi")])
    rt = runtime_factory(agent)
    one = await rt.start("ops", "a", origin={"channel": "C1"})
    two = await rt.start("ops", "b", origin={"channel": "C2"})
    assert [r.destination for r in await _outbox(store, one.run_id)] == [{"channel": "C1"}]
    assert [r.destination for r in await _outbox(store, two.run_id)] == [{"channel": "C2"}]


async def test_outbox_row_for_an_input_request(runtime_factory: Any, store: Any) -> None:
    agent = Agent("ops", "Operate.", ScriptedModel([tool_call_reply(("ask", {}))]))

    @agent.tool
    async def ask() -> Any:
        return InputRequest("Which region?", {"type": "object"})

    parked = await runtime_factory(agent).start("ops", "go", requester="U1", origin=ORIGIN)
    (row,) = await _outbox(store, parked.run_id)
    assert row.kind == "input_requested"
    assert row.destination == ORIGIN
    assert row.ticket_id == parked.pending[0].ticket_id
    assert row.payload["target"]["prompt"] == "Which region?"


async def test_expire_overdue(runtime_factory: Any, store: Any, clock: Any) -> None:
    agent = _agent(
        [tool_call_reply(("restart", {"service": "api"})), final_reply("gave up")],
        deadline=timedelta(minutes=5),
    )
    rt = runtime_factory(agent)
    parked = await rt.start("ops", "go", requester="U1", origin=ORIGIN)
    entry = parked.pending[0]
    assert await rt.expire_overdue() == []
    clock.advance(minutes=4, seconds=59)
    assert await rt.expire_overdue() == []
    clock.advance(1)
    assert await rt.expire_overdue() == [entry.ticket_id]
    assert await rt.expire_overdue() == [], "expiring is done once"
    rows = await _outbox(store, parked.run_id)
    assert [r.kind for r in rows] == ["approval_requested", "expired"]
    assert rows[1].ticket_id == entry.ticket_id
    assert rows[1].destination == ORIGIN
    async with store.transaction() as tx:
        ticket = await tx.get_ticket(entry.ticket_id)
        (call,) = await tx.calls_for_run(parked.run_id)
    assert ticket is not None and ticket.status is TicketStatus.EXPIRED
    assert call.state is CallState.DENIED
    with pytest.raises(Expired):
        await rt.approve(entry, actor="U1")
    done = await rt.resume(parked.run_id)
    assert done.status is RunStatus.DONE
    assert isinstance(agent.model, ScriptedModel)
    tool_messages = [m for m in agent.model.calls[-1].messages if m["role"] == "tool"]
    assert tool_messages[0]["content"].startswith("Permission denied")
    assert "expired" in tool_messages[0]["content"]


async def test_outbox_rows_for_pause_and_cancel(runtime_factory: Any, store: Any) -> None:
    agent = _agent([tool_call_reply(("restart", {"service": "api"}))])
    rt = runtime_factory(agent)
    parked = await rt.start("ops", "go", requester="U1", origin=ORIGIN)
    await rt.cancel(parked.run_id, reason="not needed")
    rows = await _outbox(store, parked.run_id)
    assert [r.kind for r in rows] == ["approval_requested", "ticket_voided", "run_finished"]
    assert rows[1].ticket_id == parked.pending[0].ticket_id
    assert rows[2].payload["status"] == "cancelled"
    assert all(r.destination == ORIGIN for r in rows)


async def test_failed_run_is_announced(runtime_factory: Any, store: Any) -> None:
    agent = Agent("ops", "Operate.", ScriptedModel([]))
    result = await runtime_factory(agent).start("ops", "go", origin=ORIGIN)
    assert result.status is RunStatus.FAILED
    assert result.error and "model call failed" in result.error
    (row,) = await _outbox(store, result.run_id)
    assert row.kind == "run_finished"
    assert row.payload["status"] == "failed"
    assert row.destination == ORIGIN


def test_ticket_notifications_stored_before_deciders_existed_still_name_them() -> None:
    from runtime.domain.notifications import ApprovalRequested, read_notification

    base = {"run_id": "run_1", "ticket_id": "tk_1", "target": {"tool": "t"}}
    alone = read_notification("approval_requested", {**base, "requester": "U1"})
    assert isinstance(alone, ApprovalRequested) and alone.deciders == ["U1"]
    listed = read_notification(
        "approval_requested", {**base, "requester": "U1", "approvers": ["group:x"]}
    )
    assert listed.payload()["deciders"] == ["group:x"]
    four_eyes = read_notification(
        "approval_requested", {**base, "requester": "U1", "four_eyes": True}
    )
    assert four_eyes.payload()["deciders"] == []
