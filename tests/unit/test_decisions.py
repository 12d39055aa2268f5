"""Approve, decline and resolve: how decisions reach a parked run, and every refusal."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

import pytest

from runtime import (
    Actor,
    Agent,
    Allow,
    CallState,
    Expired,
    NotAwaiting,
    ResolutionError,
    ResumeError,
    RunStatus,
    ScriptedModel,
    StaleTicket,
    TicketStatus,
    Unauthorized,
    UnknownExecutionKey,
    current_tool_context,
    final_reply,
    tool,
    tool_call_reply,
)


class Refunds:
    """One `support` agent with an `ask` refund tool that records what ran."""

    def __init__(self, runtime_factory: Any, **tool_options: Any) -> None:
        self.ran: list[dict[str, Any]] = []
        self.states_seen: list[CallState] = []
        self.model = ScriptedModel(
            [tool_call_reply(("refund", {"order": "A1", "amount": 250})), final_reply("Done.")]
        )
        self.agent = Agent("support", "Be helpful.", self.model)
        options = {"permission": "ask", **tool_options}

        @self.agent.tool(**options)
        async def refund(order: str, amount: float) -> str:
            ctx = current_tool_context()
            async with self.runtime.store.transaction() as tx:
                call = await tx.get_call(ctx.call_id)
            assert call is not None
            self.states_seen.append(call.state)
            self.ran.append({"order": order, "amount": amount, "actor": ctx.actor})
            return f"refunded {amount}"

        self.runtime = runtime_factory(self.agent)

    async def park(self, requester: str = "U1") -> Any:
        result = await self.runtime.start(
            "support", "refund A1", requester=requester, origin={"channel": "C1"}
        )
        assert result.status is RunStatus.AWAITING
        return result

    def tool_messages(self) -> list[dict[str, Any]]:
        return [m for m in self.model.calls[-1].messages if m.get("role") == "tool"]


# --- the three ways to name a pending call ----------------------------------------------


@pytest.mark.parametrize("by", ["entry", "execution_key", "ticket_id", "ticket"])
async def test_approve_by_any_reference(runtime_factory: Any, by: str) -> None:
    app = Refunds(runtime_factory)
    parked = await app.park()
    entry = parked.pending[0]
    ref = {
        "entry": entry,
        "execution_key": entry.execution_key,
        "ticket_id": entry.ticket_id,
        "ticket": entry.ticket,
    }[by]
    decided = await app.runtime.approve(ref, actor="U1")
    assert decided.status is RunStatus.QUEUED
    assert decided.pending == ()
    assert app.ran == []
    done = await app.runtime.resume(parked.run_id)
    assert done.status is RunStatus.DONE
    assert done.text == "Done."
    assert [r["amount"] for r in app.ran] == [250.0]


async def test_unknown_execution_key(runtime_factory: Any, snapshot: Any) -> None:
    app = Refunds(runtime_factory)
    parked = await app.park()
    before = await snapshot(parked.run_id)
    with pytest.raises(UnknownExecutionKey):
        await app.runtime.approve("xk_does_not_exist", actor="U1")
    assert await snapshot(parked.run_id) == before


async def test_execution_key_of_a_decided_call_is_not_awaiting(runtime_factory: Any) -> None:
    app = Refunds(runtime_factory)
    parked = await app.park()
    key = parked.pending[0].execution_key
    await app.runtime.approve(key, actor="U1", resume=True)
    with pytest.raises(NotAwaiting):
        await app.runtime.approve(key, actor="U1")


# --- allow and deny ----------------------------------------------------------------------


async def test_allow_commits_dispatched_before_the_tool_runs(
    runtime_factory: Any, store: Any
) -> None:
    app = Refunds(runtime_factory)
    parked = await app.park()
    done = await app.runtime.approve(parked.pending[0], actor="U1", resume=True)
    assert done.status is RunStatus.DONE
    assert app.states_seen == [CallState.DISPATCHED]
    async with store.transaction() as tx:
        (call,) = await tx.calls_for_run(parked.run_id)
        ticket = await tx.get_ticket(parked.pending[0].ticket_id)
    assert call.state is CallState.COMPLETED
    assert call.attempts == 1
    assert call.result == "refunded 250.0"
    assert ticket is not None
    assert ticket.status is TicketStatus.DECIDED
    assert ticket.decision == Allow()
    assert ticket.decided_by == "U1"
    (message,) = app.tool_messages()
    assert message["content"] == "refunded 250.0"


@pytest.mark.parametrize("reason", [None, "over the limit"])
async def test_deny_never_runs_the_tool(
    runtime_factory: Any, store: Any, reason: str | None
) -> None:
    app = Refunds(runtime_factory)
    parked = await app.park()
    done = await app.runtime.decline(parked.pending[0], actor="U1", reason=reason, resume=True)
    assert done.status is RunStatus.DONE
    assert app.ran == []
    (message,) = app.tool_messages()
    assert message["content"].startswith("Permission denied")
    if reason:
        assert reason in message["content"]
    else:
        assert message["content"] == "Permission denied"
    async with store.transaction() as tx:
        (call,) = await tx.calls_for_run(parked.run_id)
    assert call.state is CallState.DENIED
    assert call.attempts == 0
    assert call.reason == reason


async def test_decision_without_resume_leaves_the_run_queued(runtime_factory: Any) -> None:
    app = Refunds(runtime_factory)
    parked = await app.park()
    decided = await app.runtime.approve(parked.pending[0], actor="U1")
    assert decided.status is RunStatus.QUEUED
    assert app.ran == []
    assert len(app.model.calls) == 1


# --- refusals change nothing ---------------------------------------------------------------


async def _assert_refused_changes_nothing(
    app: Refunds,
    snapshot: Any,
    store: Any,
    run_id: str,
    error: type[ResumeError],
    attempt: Callable[[], Awaitable[Any]],
) -> None:
    before = await snapshot(run_id)
    commits = store.commits
    with pytest.raises(error):
        await attempt()
    assert await snapshot(run_id) == before
    assert store.commits == commits
    assert app.ran == []


async def test_unauthorized_changes_nothing(
    runtime_factory: Any, snapshot: Any, store: Any
) -> None:
    app = Refunds(runtime_factory)
    parked = await app.park()
    await _assert_refused_changes_nothing(
        app,
        snapshot,
        store,
        parked.run_id,
        Unauthorized,
        lambda: app.runtime.approve(parked.pending[0], actor="U2", resume=True),
    )


async def test_expired_changes_nothing(
    runtime_factory: Any, snapshot: Any, store: Any, clock: Any
) -> None:
    app = Refunds(runtime_factory, deadline=timedelta(minutes=10))
    parked = await app.park()
    assert parked.pending[0].ticket.deadline == clock.now() + timedelta(minutes=10)
    clock.advance(minutes=10)
    await _assert_refused_changes_nothing(
        app,
        snapshot,
        store,
        parked.run_id,
        Expired,
        lambda: app.runtime.approve(parked.pending[0], actor="U1", resume=True),
    )


async def test_just_before_the_deadline_is_accepted(runtime_factory: Any, clock: Any) -> None:
    app = Refunds(runtime_factory, deadline=60)
    parked = await app.park()
    clock.advance(59)
    done = await app.runtime.approve(parked.pending[0], actor="U1", resume=True)
    assert done.status is RunStatus.DONE


async def test_stale_after_catalog_change_changes_nothing(
    runtime_factory: Any, snapshot: Any, store: Any
) -> None:
    app = Refunds(runtime_factory)
    parked = await app.park()

    @tool
    async def audit() -> str:
        return "audited"

    app.agent.add_tool(audit)
    await _assert_refused_changes_nothing(
        app,
        snapshot,
        store,
        parked.run_id,
        StaleTicket,
        lambda: app.runtime.approve(parked.pending[0], actor="U1", resume=True),
    )


async def test_stale_after_version_change_changes_nothing(
    runtime_factory: Any, snapshot: Any, store: Any
) -> None:
    app = Refunds(runtime_factory)
    parked = await app.park()
    # A redeploy: a fresh runtime on the same store with version 2 of the agent.
    newer = Agent("support", "Be helpful.", app.model, list(app.agent.tools.values()), version="2")
    fresh = runtime_factory(newer)
    await _assert_refused_changes_nothing(
        app,
        snapshot,
        store,
        parked.run_id,
        StaleTicket,
        lambda: fresh.approve(parked.pending[0].ticket_id, actor="U1", resume=True),
    )


async def test_agent_not_loaded_is_stale(runtime_factory: Any, snapshot: Any, store: Any) -> None:
    app = Refunds(runtime_factory)
    parked = await app.park()
    bare = runtime_factory()
    await _assert_refused_changes_nothing(
        app,
        snapshot,
        store,
        parked.run_id,
        StaleTicket,
        lambda: bare.approve(parked.pending[0].ticket_id, actor="U1"),
    )


async def test_second_decision_is_not_awaiting_and_changes_nothing(
    runtime_factory: Any, snapshot: Any, store: Any
) -> None:
    app = Refunds(runtime_factory)
    parked = await app.park()
    await app.runtime.decline(parked.pending[0], actor="U1", reason="no")
    before = await snapshot(parked.run_id)
    commits = store.commits
    for attempt in (
        lambda: app.runtime.approve(parked.pending[0], actor="U1", resume=True),
        lambda: app.runtime.decline(parked.pending[0], actor="U1"),
        lambda: app.runtime.approve(parked.pending[0].ticket_id, actor="U1"),
    ):
        with pytest.raises(NotAwaiting):
            await attempt()
    assert await snapshot(parked.run_id) == before
    assert store.commits == commits
    assert app.ran == []


async def test_resolve_on_an_approval_ticket_changes_nothing(
    runtime_factory: Any, snapshot: Any, store: Any
) -> None:
    app = Refunds(runtime_factory)
    parked = await app.park()
    entry = parked.pending[0]
    for kwargs in ({"result": "ok"}, {"retry": True}, {"abort": True}):
        await _assert_refused_changes_nothing(
            app,
            snapshot,
            store,
            parked.run_id,
            ResolutionError,
            lambda kw=kwargs: app.runtime.resolve_tool(entry, actor="U1", **kw),  # type: ignore[misc]
        )
    await _assert_refused_changes_nothing(
        app,
        snapshot,
        store,
        parked.run_id,
        ResolutionError,
        lambda: app.runtime.answer(entry, {"x": 1}, actor="U1"),
    )


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"result": 1, "retry": True},
        {"retry": True, "abort": True},
        {"result": None, "abort": True},
        {"result": 1, "retry": True, "abort": True},
    ],
)
async def test_resolve_tool_needs_exactly_one_choice(
    runtime_factory: Any, snapshot: Any, store: Any, kwargs: dict[str, Any]
) -> None:
    app = Refunds(runtime_factory)
    parked = await app.park()
    await _assert_refused_changes_nothing(
        app,
        snapshot,
        store,
        parked.run_id,
        ResolutionError,
        lambda: app.runtime.resolve_tool(parked.pending[0], actor="U1", **kwargs),
    )


async def test_forged_correlation_changes_nothing(
    runtime_factory: Any, snapshot: Any, store: Any
) -> None:
    app = Refunds(runtime_factory)
    parked = await app.park()
    ticket_id = parked.pending[0].ticket_id
    await _assert_refused_changes_nothing(
        app,
        snapshot,
        store,
        parked.run_id,
        NotAwaiting,
        lambda: app.runtime.decide(ticket_id, Allow(), Actor(id="U1"), correlation="forged"),
    )


async def test_forged_non_ascii_correlation_is_refused_not_crashed(
    runtime_factory: Any, snapshot: Any, store: Any
) -> None:
    app = Refunds(runtime_factory)
    parked = await app.park()
    ticket_id = parked.pending[0].ticket_id
    await _assert_refused_changes_nothing(
        app,
        snapshot,
        store,
        parked.run_id,
        NotAwaiting,
        lambda: app.runtime.decide(ticket_id, Allow(), Actor(id="U1"), correlation="t\u00f6k"),
    )


async def test_decide_with_the_right_correlation(runtime_factory: Any) -> None:
    app = Refunds(runtime_factory)
    parked = await app.park()
    ticket = parked.pending[0].ticket
    done = await app.runtime.decide(
        ticket.ticket_id,
        Allow(),
        Actor(id="U1", platform="slack"),
        correlation=ticket.correlation,
        resume=True,
    )
    assert done.status is RunStatus.DONE
    assert len(app.ran) == 1


async def test_decide_unknown_ticket_is_not_awaiting(runtime_factory: Any) -> None:
    app = Refunds(runtime_factory)
    await app.park()
    with pytest.raises(NotAwaiting):
        await app.runtime.decide("tk_nope", Allow(), Actor(id="U1"))


# --- who may decide ------------------------------------------------------------------------


async def test_four_eyes(runtime_factory: Any, snapshot: Any, store: Any) -> None:
    app = Refunds(runtime_factory, four_eyes=True, approvers=["U2"])
    parked = await app.park()
    entry = parked.pending[0]
    assert entry.ticket.four_eyes is True
    for who in ("U1", Actor(id="U1", operator=True)):
        await _assert_refused_changes_nothing(
            app,
            snapshot,
            store,
            parked.run_id,
            Unauthorized,
            lambda w=who: app.runtime.approve(entry, actor=w),  # type: ignore[misc]
        )
    done = await app.runtime.approve(entry, actor="U2", resume=True)
    assert done.status is RunStatus.DONE
    assert app.ran[0]["actor"].id == "U2"


async def test_four_eyes_from_the_agent_default(runtime_factory: Any) -> None:
    app = Refunds(runtime_factory)
    app.agent.four_eyes = True
    app.agent.approvers = ("U2",)
    parked = await app.park()
    with pytest.raises(Unauthorized):
        await app.runtime.approve(parked.pending[0], actor="U1")
    assert (await app.runtime.approve(parked.pending[0], actor="U2")).status is RunStatus.QUEUED


async def test_approvers_list(runtime_factory: Any) -> None:
    app = Refunds(runtime_factory, approvers=["U2", "U3"])
    parked = await app.park()
    entry = parked.pending[0]
    assert entry.ticket.approvers == ("U2", "U3")
    with pytest.raises(Unauthorized):
        await app.runtime.approve(entry, actor="U4")
    done = await app.runtime.approve(entry, actor="U3", resume=True)
    assert done.status is RunStatus.DONE
    assert app.ran[0]["actor"].id == "U3"


async def test_listed_approvers_replace_the_requester(runtime_factory: Any) -> None:
    app = Refunds(runtime_factory, approvers=["U2"])
    parked = await app.park()
    before = await app.runtime.get(parked.run_id)
    with pytest.raises(Unauthorized, match="who may: U2"):
        await app.runtime.approve(parked.pending[0], actor="U1")
    assert await app.runtime.get(parked.run_id) == before
    done = await app.runtime.approve(parked.pending[0], actor="U2", resume=True)
    assert done.status is RunStatus.DONE


async def test_a_requester_entry_keeps_the_requester_among_approvers(
    runtime_factory: Any,
) -> None:
    app = Refunds(runtime_factory, approvers=["requester", "U2"])
    parked = await app.park()
    done = await app.runtime.approve(parked.pending[0], actor="U1", resume=True)
    assert done.status is RunStatus.DONE


async def test_group_approvers(runtime_factory: Any) -> None:
    app = Refunds(runtime_factory, approvers=["group:finance"])
    parked = await app.park()
    entry = parked.pending[0]
    with pytest.raises(Unauthorized):
        await app.runtime.approve(entry, actor=Actor(id="U5", groups=frozenset({"sales"})))
    with pytest.raises(Unauthorized):
        await app.runtime.approve(entry, actor="U5")
    finance = Actor(id="U5", groups=frozenset({"finance"}), platform="slack")
    done = await app.runtime.approve(entry, actor=finance, resume=True)
    assert done.status is RunStatus.DONE
    assert app.ran[0]["actor"].id == "U5"
    assert app.ran[0]["actor"].platform == "slack"


async def test_default_actor_is_the_requester(runtime_factory: Any) -> None:
    app = Refunds(runtime_factory)
    parked = await app.park()
    done = await app.runtime.approve(parked.pending[0], resume=True)
    assert done.status is RunStatus.DONE
    assert app.ran[0]["actor"].id == "U1"
