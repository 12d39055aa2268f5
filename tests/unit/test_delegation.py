"""Delegation: a parent's model hands a task to a sub-agent, whose run parks the parent.

The parent `ops` lists the sub-agent `billing`; `billing`'s `refund` asks. A person sees
billing's request (naming the chain ops -> billing), decides it, billing finishes, and ops
continues with billing's answer as the delegating call's result.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest

from runtime import (
    Actor,
    Agent,
    CallState,
    Child,
    ChildFinished,
    ConfigurationError,
    ModelRequest,
    NotAwaiting,
    ResolutionError,
    RunNotFound,
    RunStatus,
    ScriptedModel,
    TicketStatus,
    delegate_tool_name,
    final_reply,
    tool_call_reply,
)

DELEGATE = delegate_tool_name("billing")


def _tool_results(request: ModelRequest) -> list[str]:
    return [str(m.get("content")) for m in request.messages if m.get("role") == "tool"]


class Team:
    """`ops` delegates to `billing` (twice, with `keys`), then answers with what it saw."""

    def __init__(
        self,
        runtime_factory: Any,
        *,
        keys: tuple[str, ...] = ("refund-A1",),
        billing_replies: list[dict[str, Any]] | None = None,
        billing_turns: int = 20,
    ) -> None:
        self.refunds: list[str] = []
        self.billing_model = ScriptedModel(
            billing_replies
            or [
                tool_call_reply(("refund", {"order": "A1", "amount": 120})),
                final_reply("refunded A1"),
            ]
        )
        self.billing = Agent(
            "billing",
            "Refund orders.",
            self.billing_model,
            description="refunds orders",
            max_turns=billing_turns,
        )

        @self.billing.tool(permission="ask")
        async def refund(order: str, amount: float) -> str:
            self.refunds.append(order)
            return f"refunded {amount} on {order}"

        self.seen: list[list[str]] = []

        def ops_reply(request: ModelRequest) -> dict[str, Any]:
            results = _tool_results(request)
            self.seen.append(results)
            if len(results) < len(keys):
                key = keys[len(results)]
                return tool_call_reply((DELEGATE, {"task_key": key, "task": "refund A1 120"}))
            return final_reply("ops saw: " + " | ".join(results))

        self.ops_model = ScriptedModel(ops_reply)
        self.ops = Agent("ops", "Operate.", self.ops_model, subagents=[self.billing])
        self.runtime = runtime_factory(self.ops)


async def _runs(store: Any) -> list[Any]:
    async with store.transaction() as tx:
        return await tx.list_runs(limit=100)


async def _calls(store: Any, run_id: str) -> list[Any]:
    async with store.transaction() as tx:
        return await tx.calls_for_run(run_id)


async def _tickets(store: Any, run_id: str) -> list[Any]:
    async with store.transaction() as tx:
        return await tx.tickets_for_run(run_id)


def test_an_agent_lists_sub_agents_as_delegating_tools() -> None:
    billing = Agent("billing", "Refund orders.", ScriptedModel([final_reply("x")]))
    ops = Agent("ops", "Operate.", ScriptedModel([final_reply("x")]), subagents=[billing])
    tool = ops.tools[DELEGATE]
    assert ops.delegates == {DELEGATE: "billing"}
    assert ops.subagents == {"billing": billing}
    assert tool.parameters["required"] == ["task_key", "task"]
    assert "billing" in tool.description
    with pytest.raises(ConfigurationError, match="more than once"):
        Agent("ops", "Operate.", ScriptedModel([]), subagents=[billing, billing])
    with pytest.raises(ConfigurationError, match="more than once"):
        Agent("billing", "x", ScriptedModel([]), subagents=[billing])


def test_sub_agents_that_form_a_cycle_are_refused(runtime_factory: Any) -> None:
    a = Agent("a", "A.", ScriptedModel([final_reply("a")]))
    b = Agent("b", "B.", ScriptedModel([final_reply("b")]), subagents=[a])
    a.subagents["b"] = b  # a cycle a -> b -> a, built behind the constructor's back
    rt = runtime_factory()
    with pytest.raises(ConfigurationError, match="cycle"):
        rt.register(b)
    assert "b" not in rt.agents


async def test_a_parked_child_parks_its_parent_and_its_answer_is_the_tool_result(
    runtime_factory: Any, store: Any
) -> None:
    team = Team(runtime_factory)
    rt = team.runtime
    assert "billing" in rt.agents  # registered with its parent

    parked = await rt.start("ops", "refund A1", requester="U1")
    assert parked.status is RunStatus.AWAITING
    (entry,) = parked.pending
    assert entry.call.name == "refund"
    assert entry.run_id != parked.run_id
    assert entry.chain == ("ops", "billing")
    assert [c.agent for c in parked.children] == ["billing"]
    child = await rt.get(entry.run_id)
    assert child.status is RunStatus.AWAITING
    assert child.parent_run_id == parked.run_id
    assert child.task_key == "refund-A1"
    assert child.depth == 1
    assert [link.agent for link in child.chain] == ["ops", "billing"]
    assert (await rt.children(parked.run_id))[0].run_id == child.run_id

    (parent_ticket,) = await _tickets(store, parked.run_id)
    assert isinstance(parent_ticket.target, Child)
    assert parent_ticket.target.child_run_id == child.run_id
    (parent_call,) = await _calls(store, parked.run_id)
    assert parent_call.state is CallState.AWAITING_CHILD
    assert team.refunds == []

    await rt.approve(entry, resume=True)
    done = await rt.get(parked.run_id)
    assert done.status is RunStatus.DONE
    assert done.text == "ops saw: refunded A1"
    assert team.refunds == ["A1"]
    (parent_call,) = await _calls(store, parked.run_id)
    assert parent_call.state is CallState.COMPLETED
    assert parent_call.result == "refunded A1"
    (parent_ticket,) = await _tickets(store, parked.run_id)
    assert parent_ticket.status is TicketStatus.DECIDED
    assert parent_ticket.decision == ChildFinished(status="done", text="refunded A1")
    kinds = [e["kind"] for e in await rt.events(parked.run_id)]
    assert kinds.count("child_started") == 1
    assert kinds.count("child_finished") == 1
    assert kinds[-1] == "run_done"
    assert len(await _runs(store)) == 2


async def test_the_same_task_key_never_starts_a_second_child(
    runtime_factory: Any, store: Any
) -> None:
    team = Team(runtime_factory, keys=("refund-A1", "refund-A1"))
    rt = team.runtime
    parked = await rt.start("ops", "refund A1", requester="U1")
    await rt.approve(parked.pending[0], resume=True)
    done = await rt.get(parked.run_id)
    assert done.status is RunStatus.DONE
    # The second call with the key returned the first task's answer at once.
    assert done.text == "ops saw: refunded A1 | refunded A1"
    assert len(await _runs(store)) == 2
    assert team.refunds == ["A1"]
    kinds = [e["kind"] for e in await rt.events(parked.run_id)]
    assert kinds.count("child_started") == 1
    assert kinds.count("child_reattached") == 1


async def test_a_failed_child_is_a_tool_error_the_parent_model_sees(
    runtime_factory: Any, store: Any
) -> None:
    # billing may take one turn only, and its first reply asks for another.
    team = Team(
        runtime_factory,
        billing_replies=[tool_call_reply(("refund", {"order": "A1", "amount": 1}))],
        billing_turns=1,
    )
    rt = team.runtime
    parked = await rt.start("ops", "refund A1", requester="U1")
    await rt.approve(parked.pending[0], resume=True)
    done = await rt.get(parked.run_id)
    assert done.status is RunStatus.DONE
    (child,) = done.children
    assert child.status is RunStatus.FAILED
    assert done.text is not None
    assert "Error: sub-agent 'billing' failed" in done.text
    assert "turns" in done.text
    (call,) = await _calls(store, parked.run_id)
    assert call.state is CallState.FAILED


async def test_a_task_key_of_another_sub_agent_is_refused_to_the_model(
    runtime_factory: Any, store: Any
) -> None:
    billing = Agent("billing", "B.", ScriptedModel([final_reply("billed")]))
    audit = Agent("audit", "A.", ScriptedModel([final_reply("audited")]))
    replies = [
        tool_call_reply((DELEGATE, {"task_key": "k", "task": "bill"})),
        tool_call_reply((delegate_tool_name("audit"), {"task_key": "k", "task": "audit"})),
        final_reply("over"),
    ]
    model = ScriptedModel(replies)
    ops = Agent("ops", "Operate.", model, subagents=[billing, audit])
    rt = runtime_factory(ops)
    done = await rt.start("ops", "go", requester="U1")
    assert done.status is RunStatus.DONE
    assert len(await _runs(store)) == 2
    results = _tool_results(model.calls[-1])
    assert results[0] == "billed"
    assert "already names a task of the sub-agent 'billing'" in results[1]


async def test_sub_agents_nest_and_the_card_names_the_whole_chain(runtime_factory: Any) -> None:
    leaf = Agent(
        "leaf",
        "Leaf.",
        ScriptedModel([tool_call_reply(("wipe", {"disk": "d1"})), final_reply("wiped d1")]),
    )

    @leaf.tool(permission="ask")
    async def wipe(disk: str) -> str:
        return f"wiped {disk}"

    def middle_reply(request: ModelRequest) -> dict[str, Any]:
        results = _tool_results(request)
        if not results:
            return tool_call_reply(
                (delegate_tool_name("leaf"), {"task_key": "wipe-d1", "task": "wipe d1"})
            )
        return final_reply("middle: " + results[0])

    middle = Agent("middle", "Middle.", ScriptedModel(middle_reply), subagents=[leaf])

    def top_reply(request: ModelRequest) -> dict[str, Any]:
        results = _tool_results(request)
        if not results:
            return tool_call_reply(
                (delegate_tool_name("middle"), {"task_key": "t", "task": "clean up"})
            )
        return final_reply("top: " + results[0])

    top = Agent("top", "Top.", ScriptedModel(top_reply), subagents=[middle])
    rt = runtime_factory(top)
    parked = await rt.start("top", "clean", requester="U1")
    (entry,) = parked.pending
    assert entry.chain == ("top", "middle", "leaf")
    leaf_run = await rt.get(entry.run_id)
    assert leaf_run.depth == 2
    await rt.approve(entry, resume=True)
    done = await rt.get(parked.run_id)
    assert done.status is RunStatus.DONE
    assert done.text == "top: middle: wiped d1"
    assert done.children_totals.runs == 2


async def test_counters_grow_and_the_parent_reports_children_separately(
    runtime_factory: Any,
) -> None:
    team = Team(runtime_factory)
    rt = team.runtime
    parked = await rt.start("ops", "refund A1", requester="U1")
    before = await rt.get(parked.run_id)
    assert before.turns == 1
    assert before.children_totals.runs == 1
    assert before.children_totals.turns == 1
    await rt.approve(parked.pending[0], resume=True)
    done = await rt.get(parked.run_id)
    child = await rt.get(done.children[0].run_id)
    assert done.turns == 2  # its own model calls only
    assert child.turns == 2
    assert done.children_totals.turns == child.turns
    assert done.children_totals.prompt_tokens == child.prompt_tokens
    assert done.children_totals.completion_tokens == child.completion_tokens
    assert done.prompt_tokens == 12 + 20  # ops' scripted replies, not billing's
    assert done.children_totals.total_tokens == child.total_tokens > 0


async def test_cancelling_the_parent_cancels_the_child_and_refuses_its_ticket(
    runtime_factory: Any, store: Any
) -> None:
    team = Team(runtime_factory)
    rt = team.runtime
    parked = await rt.start("ops", "refund A1", requester="U1")
    (entry,) = parked.pending
    cancelled = await rt.cancel(parked.run_id, actor="U1", reason="wrong order")
    assert cancelled.status is RunStatus.CANCELLED
    assert cancelled.pending == ()
    child = await rt.get(entry.run_id)
    assert child.status is RunStatus.CANCELLED
    assert "parent run" in (child.error or "")
    assert all(t.status is TicketStatus.VOIDED for t in await _tickets(store, entry.run_id))
    before = await _calls(store, entry.run_id)
    with pytest.raises(NotAwaiting):
        await rt.approve(entry, resume=True)
    assert await _calls(store, entry.run_id) == before
    assert team.refunds == []
    assert (await rt.get(parked.run_id)).status is RunStatus.CANCELLED


async def test_cancelling_the_child_is_a_tool_error_for_the_parent(
    runtime_factory: Any, store: Any
) -> None:
    team = Team(runtime_factory)
    rt = team.runtime
    parked = await rt.start("ops", "refund A1", requester="U1")
    (entry,) = parked.pending
    await rt.cancel(entry.run_id, actor="U1", reason="not needed")
    await rt.resume(parked.run_id, wait=True)
    done = await rt.get(parked.run_id)
    assert done.status is RunStatus.DONE
    assert done.text == "ops saw: Error: sub-agent 'billing' was cancelled: not needed"


async def test_pause_and_resume_go_down_to_the_child(runtime_factory: Any) -> None:
    team = Team(runtime_factory)
    rt = team.runtime
    parked = await rt.start("ops", "refund A1", requester="U1")
    (entry,) = parked.pending
    paused = await rt.pause(parked.run_id, actor="U1")
    assert paused.status is RunStatus.PAUSED
    assert (await rt.get(entry.run_id)).status is RunStatus.PAUSED
    await rt.resume(parked.run_id, wait=True)
    assert (await rt.get(parked.run_id)).status is RunStatus.AWAITING
    child = await rt.get(entry.run_id)
    assert child.status is RunStatus.AWAITING
    await rt.approve(child.pending[0], resume=True)
    assert (await rt.get(parked.run_id)).text == "ops saw: refunded A1"


async def test_the_parents_child_ticket_cannot_be_decided_by_a_person(
    runtime_factory: Any, store: Any
) -> None:
    team = Team(runtime_factory)
    rt = team.runtime
    parked = await rt.start("ops", "refund A1", requester="U1")
    (ticket,) = await _tickets(store, parked.run_id)
    with pytest.raises(ResolutionError, match="decide that run's tickets instead"):
        await rt.approve(ticket.ticket_id, actor="U1")
    assert (await _tickets(store, parked.run_id))[0].status is TicketStatus.OPEN
    assert (await rt.get(parked.run_id)).status is RunStatus.AWAITING


async def test_who_sees_a_parent_sees_its_children_and_strangers_see_neither(
    runtime_factory: Any,
) -> None:
    team = Team(runtime_factory)
    rt = team.runtime
    parked = await rt.start("ops", "refund A1", requester="U1")
    child_id = parked.pending[0].run_id
    owner = Actor(id="U1")
    stranger = Actor(id="U9")
    assert (await rt.get(child_id, viewer=owner)).run_id == child_id
    assert [c.run_id for c in await rt.children(parked.run_id, viewer=owner)] == [child_id]
    with pytest.raises(RunNotFound):
        await rt.get(child_id, viewer=stranger)
    with pytest.raises(RunNotFound):
        await rt.children(parked.run_id, viewer=stranger)
    assert [e.ticket.run_id for e in await rt.open_tickets(viewer=owner)] == [child_id]
    assert await rt.open_tickets(viewer=stranger) == []


async def test_a_fresh_runtime_continues_the_parent_when_the_child_ends(
    runtime_factory: Any, store: Any
) -> None:
    team = Team(runtime_factory)
    parked = await team.runtime.start("ops", "refund A1", requester="U1")
    entry = parked.pending[0]
    # A second process: the same agents, a new runtime over the same store.
    fresh = Team(runtime_factory)
    await fresh.runtime.approve(entry.ticket_id, actor="U1", resume=True)
    done = await fresh.runtime.get(parked.run_id)
    assert done.status is RunStatus.DONE
    assert done.text == "ops saw: refunded A1"
    assert len(await _runs(store)) == 2
    assert fresh.refunds == ["A1"]


async def test_the_childs_card_goes_where_the_parents_would_and_names_the_chain(
    runtime_factory: Any, store: Any
) -> None:
    team = Team(runtime_factory)
    rt = team.runtime
    origin = {"platform": "slack", "channel": "C1", "callback_url": "https://example.test/cb"}
    parked = await rt.start("ops", "refund A1", requester="U1", origin=origin)
    child_id = parked.pending[0].run_id
    async with store.transaction() as tx:
        child_outbox = await tx.outbox_for_run(child_id)
        parent_outbox = await tx.outbox_for_run(parked.run_id)
    (card,) = [o for o in child_outbox if o.kind == "approval_requested"]
    assert card.payload["chain"] == ["ops", "billing"]
    assert card.payload["agent"] == "billing"
    assert card.destination.get("channel") == "C1"
    # The parent's wait on its child has no card of its own.
    assert [o for o in parent_outbox if o.kind == "approval_requested"] == []
    await rt.approve(parked.pending[0], resume=True)
    async with store.transaction() as tx:
        child_kinds = [o.kind for o in await tx.outbox_for_run(child_id)]
        parent_kinds = [o.kind for o in await tx.outbox_for_run(parked.run_id)]
    # Only the top-level run announces its end (and calls back).
    assert "run_finished" not in child_kinds
    assert "run_callback" not in child_kinds
    assert parent_kinds.count("run_finished") == 1


def test_a_listed_agent_runs_the_tasks_of_a_sub_agent_of_its_name(runtime_factory: Any) -> None:
    inner = Agent("billing", "Inner.", ScriptedModel([final_reply("inner")]))
    listed = Agent("billing", "Listed.", ScriptedModel([final_reply("listed")]))
    ops = Agent("ops", "Operate.", ScriptedModel([final_reply("x")]), subagents=[inner])
    rt = runtime_factory(ops, listed)
    assert rt.agents["billing"] is listed
    alone = runtime_factory(ops)
    assert alone.agents["billing"] is inner


def test_with_model_moves_the_sub_agents_too() -> None:
    billing = Agent("billing", "B.", ScriptedModel([final_reply("b")]))
    ops = Agent("ops", "Operate.", ScriptedModel([final_reply("x")]), subagents=[billing])
    moved = ops.with_model("openai:gpt-4.1-mini")
    assert moved.subagents["billing"].model == "openai:gpt-4.1-mini"
    assert billing.model_name == "scripted"


async def test_a_child_cancelled_by_its_deadline_is_an_error_for_the_parent(
    runtime_factory: Any, clock: Any
) -> None:
    billing = Agent(
        "billing",
        "Refund.",
        ScriptedModel([tool_call_reply(("refund", {"order": "A1"})), final_reply("refunded")]),
    )

    @billing.tool(permission="ask", deadline=timedelta(minutes=5), on_expiry="cancel")
    async def refund(order: str) -> str:
        return f"refunded {order}"

    def ops_reply(request: ModelRequest) -> dict[str, Any]:
        results = _tool_results(request)
        if not results:
            return tool_call_reply((DELEGATE, {"task_key": "k", "task": "refund A1"}))
        return final_reply("ops saw: " + results[0])

    ops = Agent("ops", "Operate.", ScriptedModel(ops_reply), subagents=[billing])
    rt = runtime_factory(ops)
    parked = await rt.start("ops", "refund A1", requester="U1")
    clock.advance(360)
    assert await rt.expire_overdue() == [parked.pending[0].ticket_id]
    await rt.recover()
    done = await rt.get(parked.run_id)
    assert done.status is RunStatus.DONE
    assert done.text is not None
    assert done.text.startswith("ops saw: Error: sub-agent 'billing' was cancelled")
    assert done.children[0].status is RunStatus.CANCELLED


async def test_cancelling_a_parent_while_its_child_runs_a_tool_stops_both(
    runtime_factory: Any, store: Any
) -> None:
    entered = asyncio.Event()
    release = asyncio.Event()
    billing = Agent(
        "billing",
        "Drain then refund.",
        ScriptedModel(
            [
                tool_call_reply(("drain", {"node": "n1"})),
                tool_call_reply(("refund", {"order": "A1"})),
                final_reply("done"),
            ]
        ),
    )
    ran: list[str] = []

    @billing.tool
    async def drain(node: str) -> str:
        entered.set()
        await release.wait()
        ran.append(node)
        return f"drained {node}"

    @billing.tool(permission="ask")
    async def refund(order: str) -> str:
        ran.append(order)
        return "refunded"

    model = ScriptedModel(
        [tool_call_reply((DELEGATE, {"task_key": "k", "task": "go"})), final_reply("over")]
    )
    ops = Agent("ops", "Operate.", model, subagents=[billing])
    rt = runtime_factory(ops)
    task = asyncio.create_task(rt.start("ops", "go", requester="U1"))
    await asyncio.wait_for(entered.wait(), 5)
    top = next(r for r in await _runs(store) if r.parent_run_id is None)
    asked = await rt.cancel(top.run_id, actor="U1", reason="stop")
    assert asked.status is RunStatus.RUNNING  # cooperative: the drain settles first
    release.set()
    await asyncio.wait_for(task, 5)
    runs = {r.agent: r for r in await _runs(store)}
    assert runs["ops"].status is RunStatus.CANCELLED
    assert runs["billing"].status is RunStatus.CANCELLED
    assert ran == ["n1"]  # the running tool settled; nothing after it ran
    async with store.transaction() as tx:
        assert await tx.open_tickets(limit=10) == []


async def test_pausing_a_parent_while_its_child_runs_a_tool_pauses_both(
    runtime_factory: Any, store: Any
) -> None:
    entered = asyncio.Event()
    release = asyncio.Event()
    billing = Agent(
        "billing",
        "Drain then refund.",
        ScriptedModel(
            [
                tool_call_reply(("drain", {"node": "n1"})),
                tool_call_reply(("refund", {"order": "A1"})),
                final_reply("refunded A1"),
            ]
        ),
    )
    ran: list[str] = []

    @billing.tool
    async def drain(node: str) -> str:
        entered.set()
        await release.wait()
        ran.append(node)
        return f"drained {node}"

    @billing.tool(permission="ask")
    async def refund(order: str) -> str:
        ran.append(order)
        return "refunded"

    def ops_reply(request: ModelRequest) -> dict[str, Any]:
        results = _tool_results(request)
        if not results:
            return tool_call_reply((DELEGATE, {"task_key": "k", "task": "go"}))
        return final_reply("ops saw: " + results[0])

    ops = Agent("ops", "Operate.", ScriptedModel(ops_reply), subagents=[billing])
    rt = runtime_factory(ops)
    task = asyncio.create_task(rt.start("ops", "go", requester="U1"))
    await asyncio.wait_for(entered.wait(), 5)
    top = next(r for r in await _runs(store) if r.parent_run_id is None)
    assert (await rt.pause(top.run_id, actor="U1")).status is RunStatus.RUNNING
    release.set()
    await asyncio.wait_for(task, 5)
    runs = {r.agent: r for r in await _runs(store)}
    assert runs["ops"].status is RunStatus.PAUSED
    assert runs["billing"].status is RunStatus.PAUSED
    assert ran == ["n1"]

    resumed = await rt.resume(top.run_id, wait=True)
    assert resumed.status is RunStatus.AWAITING
    (entry,) = resumed.pending  # billing went on to its refund, which asks
    assert entry.call.name == "refund"
    await rt.approve(entry, resume=True)
    done = await rt.get(top.run_id)
    assert done.status is RunStatus.DONE
    assert done.text == "ops saw: refunded A1"
    assert ran == ["n1", "A1"]
