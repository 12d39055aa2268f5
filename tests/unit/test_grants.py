"""Standing grants: an allow that also covers later calls, and every refusal around it."""

from __future__ import annotations

from typing import Any

import pytest

from runtime import (
    Actor,
    Agent,
    Allow,
    ConfigurationError,
    GrantNotActive,
    GrantNotAllowed,
    GrantRequest,
    ManualClock,
    ModelRequest,
    RunResult,
    RunStatus,
    ScriptedModel,
    TicketStatus,
    UnknownGrant,
    current_tool_context,
    final_reply,
    tool,
    tool_call_reply,
)

Call = tuple[str, dict[str, Any]]


def turns_model(*turns: list[Call]) -> ScriptedModel:
    """Turn N of each run asks for the calls of ``turns[N]``; then it reports the results."""

    def reply(request: ModelRequest) -> dict[str, Any]:
        start = max(i for i, m in enumerate(request.messages) if m.get("role") == "user")
        done = sum(1 for m in request.messages[start:] if m.get("role") == "assistant")
        if done < len(turns):
            return tool_call_reply(*turns[done])
        results = [str(m["content"]) for m in request.messages[start:] if m.get("role") == "tool"]
        return final_reply(" | ".join(results))

    return ScriptedModel(reply)


class Shop:
    """A `shop` agent whose `refund` asks; every real refund is recorded in `ran`."""

    def __init__(self, runtime_factory: Any, *turns: list[Call], **options: Any) -> None:
        self.ran: list[dict[str, Any]] = []
        self.agent = Agent("shop", "Refund.", turns_model(*turns), version="1")
        tool_options = {"permission": "ask", **options}

        @self.agent.tool(**tool_options)
        async def refund(order: str, amount: float) -> str:
            actor = current_tool_context().actor
            self.ran.append({"order": order, "amount": amount, "by": actor.id if actor else None})
            return f"refunded {amount} on {order}"

        self.runtime = runtime_factory(self.agent)

    async def start(self, requester: str = "U1", thread_id: str | None = None) -> RunResult:
        return await self.runtime.start("shop", "refund", requester=requester, thread_id=thread_id)

    async def events(self, run_id: str, kind: str) -> list[dict[str, Any]]:
        return [e for e in await self.runtime.events(run_id) if e["kind"] == kind]


def refund(order: str, amount: float = 50.0) -> Call:
    return ("refund", {"order": order, "amount": amount})


ANA = Actor(id="U1", name="Ana", platform="slack")
OPS = Actor(id="ops:bo", operator=True, platform="cli")


# --- a run grant covers the rest of the run ---------------------------------------------


async def test_a_run_grant_lets_later_calls_run_without_asking(runtime_factory: Any) -> None:
    shop = Shop(runtime_factory, [refund("A1")], [refund("A2")], [refund("A3")])
    parked = await shop.start()
    assert parked.status is RunStatus.AWAITING
    assert parked.pending[0].grants == ("run",)

    done = await shop.runtime.approve(
        parked.pending[0], actor=ANA, resume=True, grant=GrantRequest(scope="run")
    )

    assert done.status is RunStatus.DONE
    assert [r["order"] for r in shop.ran] == ["A1", "A2", "A3"]
    assert [r["by"] for r in shop.ran] == ["U1", "U1", "U1"]  # who allowed each call
    [created] = await shop.events(done.run_id, "grant_created")
    grant_id = created["data"]["grant_id"]
    assert created["actor"] == "U1" and created["data"]["scope"] == "run"
    applied = await shop.events(done.run_id, "grant_applied")
    assert [a["data"]["grant_id"] for a in applied] == [grant_id, grant_id]
    assert [a["data"]["tool"] for a in applied] == ["refund", "refund"]
    # Only the first call was asked for.
    assert len(await shop.events(done.run_id, "ticket_opened")) == 1
    [decided] = await shop.events(done.run_id, "ticket_decided")
    assert decided["data"]["grant"]["grant_id"] == grant_id
    assert await shop.runtime.grants() == []  # a run grant ends with its run
    [grant] = await shop.runtime.grants(active=False)
    assert grant.grant_id == grant_id and grant.state == "ended"
    assert grant.covers == "refund for the rest of this run"
    assert grant.expires_at is None and grant.ticket_id == parked.pending[0].ticket_id


async def test_a_run_grant_covers_no_other_run(runtime_factory: Any) -> None:
    shop = Shop(runtime_factory, [refund("A1")], [refund("A2")])
    first = await shop.start(thread_id="t1")
    await shop.runtime.approve(first.pending[0], actor=ANA, grant=GrantRequest(scope="run"))
    second = await shop.start(thread_id="t1")
    assert second.status is RunStatus.AWAITING
    assert await shop.events(second.run_id, "grant_applied") == []


async def test_a_run_grant_with_hours_expires(runtime_factory: Any, clock: ManualClock) -> None:
    shop = Shop(runtime_factory, [refund("A1")], [refund("A2")], [refund("A3")])
    parked = await shop.start()
    granted = await shop.runtime.approve(
        parked.pending[0], actor=ANA, grant=GrantRequest(scope="run", hours=1)
    )
    assert granted.status is RunStatus.QUEUED
    clock.advance(hours=1)  # expired the moment the second call is proposed
    resumed = await shop.runtime.resume(parked.run_id)
    assert resumed.status is RunStatus.AWAITING
    assert [r["order"] for r in shop.ran] == ["A1"]
    [grant] = await shop.runtime.grants(active=False)
    assert grant.state == "expired"
    assert await shop.runtime.grants() == []


# --- thread grants -------------------------------------------------------------------------


async def test_a_thread_grant_covers_the_requesters_later_runs_until_it_expires(
    runtime_factory: Any, clock: ManualClock
) -> None:
    shop = Shop(runtime_factory, [refund("A1")], grants=("run", "thread"))
    first = await shop.start(thread_id="t1")
    assert first.pending[0].grants == ("run", "thread")
    await shop.runtime.approve(
        first.pending[0], actor=ANA, resume=True, grant=GrantRequest(scope="thread", hours=2)
    )
    [grant] = await shop.runtime.grants()
    assert grant.scope == "thread" and grant.expires_at == clock.now() + _hours(2)

    later = await shop.start(thread_id="t1")
    assert later.status is RunStatus.DONE
    [applied] = await shop.events(later.run_id, "grant_applied")
    assert applied["data"]["grant_id"] == grant.grant_id
    assert applied["data"]["granted_in"] == first.run_id

    # Another person's run in the same thread, and a run in another thread, still ask.
    assert (await shop.start(requester="U2", thread_id="t1")).status is RunStatus.AWAITING
    assert (await shop.start(thread_id="t2")).status is RunStatus.AWAITING

    clock.advance(hours=2)
    assert (await shop.start(thread_id="t1")).status is RunStatus.AWAITING
    assert len(shop.ran) == 2


async def test_a_thread_grant_lasts_eight_hours_unless_told(
    runtime_factory: Any, clock: ManualClock
) -> None:
    shop = Shop(runtime_factory, [refund("A1")], grants=("run", "thread"))
    first = await shop.start(thread_id="t1")
    await shop.runtime.approve(first.pending[0], actor=ANA, grant=GrantRequest(scope="thread"))
    [grant] = await shop.runtime.grants()
    assert grant.expires_at == clock.now() + _hours(8)


async def test_a_grant_covers_nothing_once_the_agent_changed(
    runtime_factory: Any, clock: ManualClock
) -> None:
    shop = Shop(runtime_factory, [refund("A1")], grants=("thread",))
    first = await shop.start(thread_id="t1")
    await shop.runtime.approve(first.pending[0], actor=ANA, grant=GrantRequest(scope="thread"))
    newer = Shop(runtime_factory, [refund("A1")], grants=("thread",))
    newer.agent.version = "2"
    assert (await newer.start(thread_id="t1")).status is RunStatus.AWAITING
    assert newer.ran == []


# --- which arguments ------------------------------------------------------------------------


async def test_a_grant_for_the_same_arguments_covers_only_identical_calls(
    runtime_factory: Any,
) -> None:
    shop = Shop(runtime_factory, [refund("A1", 20)], [refund("A1", 20)], [refund("A1", 21)])
    parked = await shop.start()
    result = await shop.runtime.approve(
        parked.pending[0], actor=ANA, resume=True, grant=GrantRequest(args="same")
    )
    assert result.status is RunStatus.AWAITING  # the third call differs
    assert [r["amount"] for r in shop.ran] == [20, 20]
    assert result.pending[0].call.arguments == {"order": "A1", "amount": 21}
    [grant] = await shop.runtime.grants()
    assert grant.constraint == {
        "order": {"eq": "A1"},
        "amount": {"eq": 20},
        "": {"only": ["amount", "order"]},
    }
    assert grant.covers == (
        "refund for the rest of this run (order == 'A1', amount == 20.0, no other arguments)"
    )


async def test_a_same_arguments_grant_given_with_edits_covers_the_edited_arguments(
    runtime_factory: Any,
) -> None:
    # The person approved the call as changed: that is the call the grant repeats.
    shop = Shop(runtime_factory, [refund("A1", 249)], [refund("A1", 200)], [refund("A1", 249)])
    parked = await shop.start()
    result = await shop.runtime.approve(
        parked.pending[0],
        actor=ANA,
        resume=True,
        grant=GrantRequest(args="same"),
        args={"amount": 200},
    )
    assert [r["amount"] for r in shop.ran] == [200, 200]  # the edit, then the granted call
    assert result.status is RunStatus.AWAITING  # the original arguments still ask
    assert result.pending[0].call.arguments == {"order": "A1", "amount": 249}
    [grant] = await shop.runtime.grants()
    assert grant.constraint == {
        "order": {"eq": "A1"},
        "amount": {"eq": 200},
        "": {"only": ["amount", "order"]},
    }


async def test_a_grant_with_a_constraint_covers_the_calls_that_meet_it(
    runtime_factory: Any,
) -> None:
    shop = Shop(
        runtime_factory,
        [refund("A1", 500)],
        [refund("B2", 80)],
        [refund("B3", 100)],
        [refund("B4", 101)],
    )
    parked = await shop.start()
    request = GrantRequest(args={"amount": {"le": 100}, "order": {"glob": "B*"}})
    result = await shop.runtime.approve(parked.pending[0], actor=ANA, resume=True, grant=request)
    assert [r["order"] for r in shop.ran] == ["A1", "B2", "B3"]
    assert result.status is RunStatus.AWAITING
    assert result.pending[0].call.arguments["order"] == "B4"
    [grant] = await shop.runtime.grants()
    assert grant.covers == "refund for the rest of this run (amount <= 100, order matches 'B*')"


def test_a_constraint_that_is_not_one_is_refused_when_the_answer_is_built() -> None:
    for bad in ({"amount": {"lte": 3}}, {"amount": {"gt": "x"}}, {}, "all", {"a": {"in": 3}}):
        with pytest.raises(ValueError):
            GrantRequest(args=bad)
    for hours in (0, -1, 721, float("inf")):
        with pytest.raises(ValueError):
            GrantRequest(hours=hours)


async def test_secret_arguments_are_masked_in_a_grants_constraint(runtime_factory: Any) -> None:
    ran: list[str] = []
    agent = Agent("vault", "Pay.", turns_model([("pay", {"to": "acme", "key": "s3cret"})]))

    @agent.tool(permission="ask", secret=["key"])
    async def pay(to: str, key: str) -> str:
        ran.append(to)
        return "paid"

    runtime = runtime_factory(agent)
    parked = await runtime.start("vault", "pay", requester="U1")
    await runtime.approve(parked.pending[0], actor=ANA, grant=GrantRequest(args="same"))
    [grant] = await runtime.grants()
    assert grant.constraint == {
        "to": {"eq": "acme"},
        "key": {"eq": "••••••"},
        "": {"only": ["key", "to"]},
    }
    events = await runtime.export_events(parked.run_id)
    assert "s3cret" not in events


# --- open tickets the new grant covers ----------------------------------------------------


async def test_open_tickets_of_the_run_that_the_grant_covers_are_allowed_with_it(
    runtime_factory: Any,
) -> None:
    shop = Shop(runtime_factory, [refund("A1"), refund("A2"), refund("A3", 900)])
    parked = await shop.start()
    assert len(parked.pending) == 3
    request = GrantRequest(args={"amount": {"lt": 100}})
    result = await shop.runtime.approve(parked.pending[0], actor=ANA, grant=request)

    assert [p.call.arguments["order"] for p in result.pending] == ["A3"]
    async with shop.runtime.store.transaction() as tx:
        tickets = await tx.tickets_for_run(parked.run_id)
    assert [t.status for t in tickets] == [
        TicketStatus.DECIDED,
        TicketStatus.DECIDED,
        TicketStatus.OPEN,
    ]
    assert tickets[1].decision == Allow() and tickets[1].decided_by == "U1"
    decided = await shop.events(parked.run_id, "ticket_decided")
    assert [d["data"].get("by_grant", False) for d in decided] == [False, True]

    done = await shop.runtime.decline(result.pending[0], actor=ANA, resume=True)
    assert done.status is RunStatus.DONE
    assert [r["order"] for r in shop.ran] == ["A1", "A2"]


# --- refusals: nothing changes ----------------------------------------------------------


async def _refused(shop: Shop, request: GrantRequest, message: str) -> None:
    parked = await shop.start()
    before = await shop.runtime.events(parked.run_id)
    with pytest.raises(GrantNotAllowed, match=message):
        await shop.runtime.approve(parked.pending[0], actor=ANA, grant=request)
    assert await shop.runtime.events(parked.run_id) == before
    assert (await shop.runtime.get(parked.run_id)).pending == parked.pending
    assert await shop.runtime.grants(active=False) == []
    assert shop.ran == []


async def test_a_grant_beyond_the_tools_scopes_is_refused(runtime_factory: Any) -> None:
    shop = Shop(runtime_factory, [refund("A1")])
    await _refused(
        shop,
        GrantRequest(scope="thread", hours=1),
        "refund cannot be allowed for this thread; it allows grants for the rest of this run",
    )


async def test_a_tool_without_grants_refuses_every_grant(runtime_factory: Any) -> None:
    shop = Shop(runtime_factory, [refund("A1")], grants=())
    await _refused(shop, GrantRequest(scope="run"), "allows no standing grants")


async def test_a_four_eyes_tool_refuses_every_grant(runtime_factory: Any) -> None:
    shop = Shop(runtime_factory, [refund("A1")], four_eyes=True, approvers=["U2"])
    parked = await shop.start()
    assert parked.pending[0].grants == ()
    with pytest.raises(GrantNotAllowed, match="four-eyes"):
        await shop.runtime.approve(
            parked.pending[0], actor=Actor(id="U2"), grant=GrantRequest(scope="run")
        )
    assert await shop.runtime.grants(active=False) == []
    assert (await shop.runtime.get(parked.run_id)).status is RunStatus.AWAITING


async def test_an_agents_four_eyes_rule_refuses_grants_too(runtime_factory: Any) -> None:
    shop = Shop(runtime_factory, [refund("A1")], approvers=["U2"])
    shop.agent.four_eyes = True
    await shop.runtime.start("shop", "refund", requester="U1")
    [entry] = await shop.runtime.open_tickets()
    assert entry.grants == ()
    with pytest.raises(GrantNotAllowed, match="four-eyes"):
        await shop.runtime.approve(entry, actor=Actor(id="U2"), grant=GrantRequest())


async def test_a_constraint_on_an_unknown_argument_is_refused(runtime_factory: Any) -> None:
    shop = Shop(runtime_factory, [refund("A1")])
    await _refused(
        shop,
        GrantRequest(args={"currency": "EUR"}),
        r"refund has no argument currency \(its arguments: amount, order\)",
    )


async def test_a_grant_never_overrides_a_deny(runtime_factory: Any) -> None:
    def rule(args: dict[str, Any]) -> str:
        return "deny" if args["amount"] > 1000 else "ask"

    shop = Shop(runtime_factory, [refund("A1")], [refund("A2", 5000)], permission=rule)
    parked = await shop.start()
    done = await shop.runtime.approve(
        parked.pending[0], actor=ANA, resume=True, grant=GrantRequest()
    )
    assert done.status is RunStatus.DONE
    assert [r["order"] for r in shop.ran] == ["A1"]
    assert "Permission denied" in (done.text or "")


# --- revoking --------------------------------------------------------------------------------


async def _granted(shop: Shop) -> tuple[RunResult, str]:
    parked = await shop.start()
    await shop.runtime.approve(parked.pending[0], actor=ANA, grant=GrantRequest())
    [grant] = await shop.runtime.grants()
    return parked, grant.grant_id


async def test_a_revoked_grant_stops_applying_at_once(runtime_factory: Any) -> None:
    shop = Shop(runtime_factory, [refund("A1")], [refund("A2")])
    parked, grant_id = await _granted(shop)
    revoked = await shop.runtime.revoke_grant(grant_id, actor=OPS)
    assert revoked.state == "revoked" and revoked.revoked_by == "ops:bo"

    result = await shop.runtime.resume(parked.run_id)
    assert result.status is RunStatus.AWAITING  # the second call asks again
    assert [r["order"] for r in shop.ran] == ["A1"]
    assert await shop.events(parked.run_id, "grant_applied") == []
    [event] = await shop.events(parked.run_id, "grant_revoked")
    assert event["actor"] == "ops:bo" and event["data"]["grant_id"] == grant_id
    assert await shop.runtime.grants() == []
    assert [g.state for g in await shop.runtime.grants(active=False)] == ["revoked"]


@pytest.mark.parametrize("who", ["U1", "U9"])
async def test_the_granter_and_the_requester_may_revoke(runtime_factory: Any, who: str) -> None:
    shop = Shop(runtime_factory, [refund("A1")], approvers=["U1"])
    parked = await shop.runtime.start("shop", "refund", requester="U9")
    await shop.runtime.approve(parked.pending[0], actor=ANA, grant=GrantRequest())
    [grant] = await shop.runtime.grants(viewer=Actor(id=who))
    assert (await shop.runtime.revoke_grant(grant.grant_id, actor=who)).state == "revoked"


async def test_a_stranger_can_neither_see_nor_revoke_a_grant(runtime_factory: Any) -> None:
    shop = Shop(runtime_factory, [refund("A1")], [refund("A2")])
    parked, grant_id = await _granted(shop)
    stranger = Actor(id="U7")
    before = await shop.runtime.events(parked.run_id)
    with pytest.raises(UnknownGrant):
        await shop.runtime.revoke_grant(grant_id, actor=stranger)
    with pytest.raises(UnknownGrant):
        await shop.runtime.grant(grant_id, viewer=stranger)
    assert await shop.runtime.grants(viewer=stranger) == []
    assert await shop.runtime.events(parked.run_id) == before
    assert (await shop.runtime.grant(grant_id)).state == "active"
    with pytest.raises(UnknownGrant):
        await shop.runtime.revoke_grant("gr_nope", actor=OPS)


async def test_revoking_twice_or_after_expiry_is_refused(
    runtime_factory: Any, clock: ManualClock
) -> None:
    shop = Shop(runtime_factory, [refund("A1")], grants=("run", "thread"))
    _parked, grant_id = await _granted(shop)
    await shop.runtime.revoke_grant(grant_id, actor=ANA)
    with pytest.raises(GrantNotActive, match="already revoked by U1"):
        await shop.runtime.revoke_grant(grant_id, actor=ANA)

    other = await shop.start(thread_id="t9")
    await shop.runtime.approve(other.pending[0], actor=ANA, grant=GrantRequest(scope="thread"))
    [active] = await shop.runtime.grants()
    clock.advance(hours=9)
    with pytest.raises(GrantNotActive, match="already expired"):
        await shop.runtime.revoke_grant(active.grant_id, actor=ANA)
    assert (await shop.runtime.grant(active.grant_id)).revoked_at is None


async def test_grants_of_a_run_include_its_threads_grants_for_its_requester(
    runtime_factory: Any,
) -> None:
    shop = Shop(runtime_factory, [refund("A1")], grants=("run", "thread"))
    first = await shop.start(thread_id="t1")
    await shop.runtime.approve(first.pending[0], actor=ANA, grant=GrantRequest(scope="thread"))
    second = await shop.start(thread_id="t1")
    own = await shop.start(thread_id="t1")  # covered: runs at once
    assert own.status is RunStatus.DONE
    stranger_run = await shop.start(requester="U5", thread_id="t1")
    assert [g.scope for g in await shop.runtime.grants_of_run(second.run_id)] == ["thread"]
    assert await shop.runtime.grants_of_run(stranger_run.run_id) == []


# --- declaring grants -----------------------------------------------------------------------


def test_grant_options_are_checked_when_the_tool_is_declared() -> None:
    async def act(x: int) -> int:
        return x

    with pytest.raises(ConfigurationError, match="unknown grant scope 'forever'"):
        tool(grants=["forever"])(act)
    with pytest.raises(ConfigurationError, match="given twice"):
        tool(grants=["run", "run"])(act)
    with pytest.raises(ConfigurationError, match="list of scopes"):
        tool(grants="run")(act)
    with pytest.raises(ConfigurationError, match="four-eyes tool cannot take standing grants"):
        tool(four_eyes=True, grants=["run"])(act)
    assert tool(four_eyes=True, grants=[])(act).grants == ()
    assert tool(act).grants is None
    assert Agent("a", "b", ScriptedModel([]), tools=[tool(act)]).grants_for(tool(act)) == ("run",)


def _hours(count: float) -> Any:
    from datetime import timedelta

    return timedelta(hours=count)
