"""Batch decisions: several tickets decided in one action, each validated and applied on
its own; the chat offer of one model turn ("Allow all N") and its durable accept path."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from runtime import (
    Accepted,
    Actor,
    Agent,
    Allow,
    BatchAccepted,
    BatchItem,
    Deny,
    Escalate,
    RefusalReason,
    Refused,
    RunStatus,
    ScriptedModel,
    TicketStatus,
    final_reply,
    tool_call_reply,
)
from runtime.services.batches import MAX_BATCH, batch_token

CALLS = [
    ("restart", {"service": "api"}),
    ("restart", {"service": "db"}),
    ("deploy", {"service": "web"}),
    ("look", {"service": "cache"}),
]


class Ops:
    """One turn asks for two restarts and a deploy (ask) and a look (allow)."""

    def __init__(self, runtime_factory: Any, calls: list[Any] | None = None, **deploy: Any):
        self.ran: list[tuple[str, str]] = []
        self.model = ScriptedModel([tool_call_reply(*(calls or CALLS)), final_reply("done")])
        self.agent = Agent("ops", "Operate.", self.model)

        @self.agent.tool(permission="ask")
        async def restart(service: str) -> str:
            self.ran.append(("restart", service))
            return f"restarted {service}"

        @self.agent.tool(permission="ask", **deploy)
        async def deploy(service: str) -> str:
            self.ran.append(("deploy", service))
            return f"deployed {service}"

        @self.agent.tool(permission="allow")
        async def look(service: str) -> str:
            self.ran.append(("look", service))
            return f"{service} is fine"

        self.runtime = runtime_factory(self.agent)

    async def park(self) -> Any:
        parked = await self.runtime.start("ops", "fix it", requester="U1", origin={"ch": "C1"})
        assert parked.status is RunStatus.AWAITING
        return parked


async def _state(store: Any, run_id: str) -> tuple[Any, ...]:
    async with store.transaction() as tx:
        return (
            await tx.get_run(run_id),
            await tx.calls_for_run(run_id),
            await tx.tickets_for_run(run_id),
            await tx.events(run_id),
            await tx.outbox_for_run(run_id),
            await tx.pending_received(100),
        )


def by_tool(parked: Any) -> dict[str, Any]:
    return {f"{p.call.name}:{p.call.arguments['service']}": p for p in parked.pending}


# -- decide_batch ---------------------------------------------------------------------


async def test_a_batch_applies_each_decision_and_the_run_continues_once(
    runtime_factory: Any,
) -> None:
    app = Ops(runtime_factory)
    parked = await app.park()
    assert app.ran == [("look", "cache")]
    entries = by_tool(parked)
    items = [
        BatchItem(entries["restart:api"].ticket_id, Allow()),
        BatchItem(entries["restart:db"].ticket_id, Deny(reason="db is busy")),
        BatchItem(entries["deploy:web"].ticket_id, Allow()),
    ]
    outcomes = await app.runtime.decide_batch(items, Actor(id="U1"), resume=True)
    assert [(o.ticket_id, o.applied) for o in outcomes] == [(i.ticket_id, True) for i in items]
    assert [o.answer.kind for o in outcomes] == ["allow", "deny", "allow"]
    assert outcomes[0].result is not None and outcomes[0].result.status is RunStatus.AWAITING
    last = outcomes[-1].result
    assert last is not None and last.status is RunStatus.DONE
    assert app.ran == [("look", "cache"), ("restart", "api"), ("deploy", "web")]
    tools = [m for m in app.model.calls[-1].messages if m["role"] == "tool"]
    assert "Permission denied: db is busy" in [m["content"] for m in tools]
    assert len(app.model.calls) == 2  # the model was asked again exactly once


async def test_one_refusal_does_not_block_the_others(runtime_factory: Any, store: Any) -> None:
    app = Ops(runtime_factory)
    parked = await app.park()
    entries = by_tool(parked)
    await app.runtime.decline(entries["restart:db"], actor="U1", reason="earlier")
    items = [
        BatchItem(entries["restart:api"].ticket_id, Allow()),
        BatchItem(entries["restart:db"].ticket_id, Allow()),  # decided already
        BatchItem("tk_nope", Allow()),
        BatchItem(entries["deploy:web"].ticket_id, Allow(args={"service": 7})),  # bad edit
    ]
    outcomes = await app.runtime.decide_batch(items, Actor(id="U1"))
    reasons = [o.refusal.reason if o.refusal else None for o in outcomes]
    assert reasons == [
        None,
        RefusalReason.ALREADY_DECIDED,
        RefusalReason.UNKNOWN_TICKET,
        RefusalReason.INVALID_EDIT,
    ]
    assert outcomes[1].refusal is not None and outcomes[1].refusal.decided_by == "U1"
    async with store.transaction() as tx:
        tickets = {t.ticket_id: t for t in await tx.tickets_for_run(parked.run_id)}
    assert tickets[entries["restart:api"].ticket_id].status is TicketStatus.DECIDED
    assert tickets[entries["deploy:web"].ticket_id].status is TicketStatus.OPEN
    assert app.ran == [("look", "cache")]  # nothing ran: the deploy is still open


async def test_a_stranger_gets_every_ticket_refused_and_nothing_changes(
    runtime_factory: Any, store: Any
) -> None:
    app = Ops(runtime_factory)
    parked = await app.park()
    before = await _state(store, parked.run_id)
    items = [BatchItem(p.ticket_id, Allow()) for p in parked.pending]
    outcomes = await app.runtime.decide_batch(items, Actor(id="U9"), resume=True)
    assert {o.refusal.reason for o in outcomes if o.refusal} == {RefusalReason.UNKNOWN_TICKET}
    assert all(o.refusal is not None and o.refusal.ticket is None for o in outcomes)
    assert await _state(store, parked.run_id) == before


async def test_someone_who_sees_the_run_but_may_not_decide_a_call_is_refused_that_call(
    runtime_factory: Any, store: Any
) -> None:
    app = Ops(runtime_factory, four_eyes=True)  # the requester may not approve the deploy
    parked = await app.park()
    entries = by_tool(parked)
    items = [BatchItem(p.ticket_id, Allow()) for p in parked.pending]
    outcomes = await app.runtime.decide_batch(items, Actor(id="U1"))
    refused = {o.ticket_id: o.refusal.reason for o in outcomes if o.refusal}
    assert refused == {entries["deploy:web"].ticket_id: RefusalReason.UNAUTHORIZED}
    result = await app.runtime.get(parked.run_id)
    assert [p.ticket_id for p in result.pending] == [entries["deploy:web"].ticket_id]


async def test_an_operator_may_decide_a_selection_across_runs(runtime_factory: Any) -> None:
    app = Ops(runtime_factory, calls=[("restart", {"service": "api"})])
    first = await app.park()
    second = await app.park()
    items = [
        BatchItem(first.pending[0].ticket_id, Allow()),
        BatchItem(second.pending[0].ticket_id, Allow()),
    ]
    outcomes = await app.runtime.decide_batch(items, Actor(id="ops", operator=True), resume=True)
    assert all(o.applied for o in outcomes)
    assert [o.result.status for o in outcomes if o.result] == [RunStatus.DONE, RunStatus.DONE]
    assert MAX_BATCH == 100


# -- the chat offer ------------------------------------------------------------------------


async def test_a_turn_with_several_approvals_offers_them_as_one_batch(
    runtime_factory: Any, store: Any
) -> None:
    app = Ops(runtime_factory)
    parked = await app.park()
    async with store.transaction() as tx:
        outbox = await tx.outbox_for_run(parked.run_id)
        calls = await tx.calls_for_run(parked.run_id)
    [offer] = [o for o in outbox if o.kind == "batch_offered"]
    seq = {c.call_id: c.seq for c in calls}
    ordered = sorted(parked.pending, key=lambda p: seq[p.call.call_id])
    assert offer.payload["ticket_ids"] == [p.ticket_id for p in ordered]
    assert offer.ticket_id == ordered[0].ticket_id
    assert offer.payload["token"] == batch_token([p.ticket for p in ordered])
    assert [c["tool"] for c in offer.payload["calls"]] == ["restart", "restart", "deploy"]
    assert offer.destination == {"ch": "C1"}
    # Queued after every card of the turn, so a channel's lane posts the cards first.
    kinds = [o.kind for o in outbox]
    assert kinds.index("batch_offered") > max(
        i for i, k in enumerate(kinds) if k == "approval_requested"
    )


async def test_a_single_approval_offers_no_batch(runtime_factory: Any, store: Any) -> None:
    app = Ops(runtime_factory, calls=[("restart", {"service": "api"}), ("look", {"service": "x"})])
    parked = await app.park()
    async with store.transaction() as tx:
        kinds = [o.kind for o in await tx.outbox_for_run(parked.run_id)]
    assert "batch_offered" not in kinds


async def _offer(store: Any, run_id: str) -> Any:
    async with store.transaction() as tx:
        [offer] = [o for o in await tx.outbox_for_run(run_id) if o.kind == "batch_offered"]
    return offer


async def test_allow_all_stores_one_decision_per_ticket_then_applies_each(
    runtime_factory: Any,
) -> None:
    app = Ops(runtime_factory)
    parked = await app.park()
    offer = await _offer(app.runtime.store, parked.run_id)
    accepted = await app.runtime.accept_batch(
        offer.ticket_id,
        offer.payload["token"],
        Allow(),
        Actor(id="U1", platform="slack"),
        source="slack",
        delivery_id="trigger-1",
        reply={"channel": "C1"},
    )
    assert isinstance(accepted, BatchAccepted) and accepted.stored == 3
    assert [t.ticket_id for t, _ in accepted.outcomes] == offer.payload["ticket_ids"]
    assert all(isinstance(o, Accepted) and o.stored for _, o in accepted.outcomes)
    # A redelivery of the same click stores nothing more.
    again = await app.runtime.accept_batch(
        offer.ticket_id,
        offer.payload["token"],
        Allow(),
        Actor(id="U1", platform="slack"),
        source="slack",
        delivery_id="trigger-1",
    )
    assert isinstance(again, BatchAccepted) and again.stored == 3
    assert all(isinstance(o, Accepted) and not o.stored for _, o in again.outcomes)
    applied = await app.runtime.apply_received()
    assert [o.applied for o in applied] == [True, True, True]
    result = await app.runtime.resume(parked.run_id)
    assert result.status is RunStatus.DONE
    assert sorted(app.ran) == sorted(
        [("look", "cache"), ("restart", "api"), ("restart", "db"), ("deploy", "web")]
    )


@pytest.mark.parametrize("wrong", ["token", "anchor", "unknown"])
async def test_a_forged_batch_click_stores_nothing(
    runtime_factory: Any, store: Any, wrong: str
) -> None:
    app = Ops(runtime_factory)
    parked = await app.park()
    offer = await _offer(store, parked.run_id)
    before = await _state(store, parked.run_id)
    ticket_id, token = offer.ticket_id, offer.payload["token"]
    if wrong == "token":
        token = batch_token([p.ticket for p in parked.pending[:2]])
    elif wrong == "anchor":
        ticket_id = offer.payload["ticket_ids"][1]
    else:
        ticket_id = "tk_nope"
    refused = await app.runtime.accept_batch(
        ticket_id, token, Allow(), Actor(id="U1"), source="slack", delivery_id="t1"
    )
    assert isinstance(refused, Refused)
    expected = RefusalReason.UNKNOWN_TICKET if wrong == "unknown" else RefusalReason.MISMATCH
    assert refused.refusal.reason is expected
    assert await _state(store, parked.run_id) == before


async def test_a_stranger_clicking_allow_all_stores_nothing(
    runtime_factory: Any, store: Any
) -> None:
    app = Ops(runtime_factory)
    parked = await app.park()
    offer = await _offer(store, parked.run_id)
    before = await _state(store, parked.run_id)
    accepted = await app.runtime.accept_batch(
        offer.ticket_id,
        offer.payload["token"],
        Allow(),
        Actor(id="U9"),
        source="slack",
        delivery_id="t1",
    )
    assert isinstance(accepted, BatchAccepted) and accepted.stored == 0
    reasons = {o.refusal.reason for _, o in accepted.outcomes if isinstance(o, Refused)}
    assert reasons == {RefusalReason.UNAUTHORIZED}
    assert await _state(store, parked.run_id) == before


async def test_allow_all_after_one_was_decided_stores_the_rest(runtime_factory: Any) -> None:
    app = Ops(runtime_factory)
    parked = await app.park()
    offer = await _offer(app.runtime.store, parked.run_id)
    first = offer.payload["ticket_ids"][0]
    await app.runtime.decline(first, actor="U1", reason="not now")
    accepted = await app.runtime.accept_batch(
        offer.ticket_id,
        offer.payload["token"],
        Deny(reason="all of them"),
        Actor(id="U1"),
        source="discord",
        delivery_id="i1",
    )
    assert isinstance(accepted, BatchAccepted) and accepted.stored == 2
    [(ticket, outcome), *_] = accepted.outcomes
    assert ticket.ticket_id == first
    assert isinstance(outcome, Refused) and outcome.refusal.reason is RefusalReason.ALREADY_DECIDED


async def test_the_batch_of_a_turn_is_found_again_after_an_escalation(
    runtime_factory: Any, clock: Any
) -> None:
    app = Ops(
        runtime_factory,
        deadline=timedelta(minutes=5),
        on_expiry=Escalate(approvers=("U-lead",)),
    )
    parked = await app.park()
    offer = await _offer(app.runtime.store, parked.run_id)
    clock.advance(600)
    assert len(await app.runtime.expire_overdue()) == 1  # the deploy's ticket escalated
    accepted = await app.runtime.accept_batch(
        offer.ticket_id,
        offer.payload["token"],
        Allow(),
        Actor(id="U1"),
        source="slack",
        delivery_id="t1",
    )
    assert isinstance(accepted, BatchAccepted)
    reasons = [o.refusal.reason if isinstance(o, Refused) else None for _, o in accepted.outcomes]
    assert reasons == [None, None, RefusalReason.EXPIRED]  # the seen deploy ticket expired
