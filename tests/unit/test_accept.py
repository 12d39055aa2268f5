"""The one accept step of chat edges: a click is checked and stored in one transaction,
answered with a typed outcome; a refused click stores nothing; a form's button is checked
by the kind of answer it will send."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from runtime import (
    Accepted,
    Actor,
    Agent,
    Allow,
    Decidable,
    Deny,
    InputData,
    InputRequest,
    RefusalReason,
    Refused,
    RunStatus,
    ScriptedModel,
    final_reply,
    tool_call_reply,
)
from runtime.domain.tickets import ResumeTicket


def payments(ran: list[int], version: str = "1", **options: Any) -> Agent:
    model = ScriptedModel([tool_call_reply(("pay", {"amount": 5})), final_reply("Paid.")])
    agent = Agent("payments", "Pay.", model, version=version)

    @agent.tool(permission="ask", **options)
    def pay(amount: int) -> str:
        """Pay."""
        ran.append(amount)
        return "ok"

    return agent


def forms() -> Agent:
    model = ScriptedModel([tool_call_reply(("plan", {})), final_reply("Planned.")])
    agent = Agent("forms", "Ask.", model)

    @agent.tool(permission="allow")
    def plan() -> Any:
        """Ask for a number."""
        schema = {
            "type": "object",
            "properties": {"n": {"type": "integer", "minimum": 1}},
            "required": ["n"],
        }
        return InputRequest("How many?", schema)

    return agent


async def park(rt: Any, agent: str = "payments", requester: str = "U1") -> ResumeTicket:
    result = await rt.start(agent, "go", requester=requester)
    assert result.status is RunStatus.AWAITING
    ticket: ResumeTicket = result.pending[0].ticket
    return ticket


async def received_count(rt: Any) -> int:
    async with rt.store.transaction() as tx:
        return len(await tx.pending_received(100))


def click(ticket: ResumeTicket, n: int = 1, **changes: Any) -> dict[str, Any]:
    return {
        "correlation": ticket.correlation,
        "source": "slack",
        "delivery_id": f"d{n}",
        **changes,
    }


async def test_a_valid_click_is_stored_and_applied_later(runtime_factory: Any) -> None:
    ran: list[int] = []
    rt = runtime_factory(payments(ran))
    ticket = await park(rt)
    outcome = await rt.accept(ticket.ticket_id, Allow(), Actor(id="U1"), **click(ticket))
    assert outcome == Accepted(ticket, stored=True)
    assert await received_count(rt) == 1
    assert (await rt.get(ticket.run_id)).status is RunStatus.AWAITING
    [applied] = await rt.apply_received()
    assert applied.applied


async def test_a_repeated_delivery_is_stored_once_even_after_it_was_applied(
    runtime_factory: Any,
) -> None:
    rt = runtime_factory(payments([]))
    ticket = await park(rt)
    first = await rt.accept(ticket.ticket_id, Allow(), Actor(id="U1"), **click(ticket))
    assert isinstance(first, Accepted) and first.stored
    await rt.apply_received()
    # The platform delivers the same click again: recognised, not "already decided".
    again = await rt.accept(ticket.ticket_id, Allow(), Actor(id="U1"), **click(ticket))
    assert isinstance(again, Accepted) and not again.stored


async def test_the_actor_is_found_from_the_ticket(runtime_factory: Any) -> None:
    rt = runtime_factory(payments([], approvers=["group:finance"]))
    ticket = await park(rt)
    seen: list[ResumeTicket | None] = []

    async def who(found: ResumeTicket | None) -> Actor:
        seen.append(found)
        groups = {"finance"} if found is not None and "group:finance" in found.approvers else set()
        return Actor(id="U7", groups=frozenset(groups))

    outcome = await rt.accept(ticket.ticket_id, Allow(), who, **click(ticket))
    assert isinstance(outcome, Accepted)
    assert seen == [ticket]


async def test_an_actor_known_at_once_is_checked_in_the_storing_transaction(
    runtime_factory: Any,
) -> None:
    # The function answers with the Actor itself (no look-up): the ticket is read once,
    # and the click is checked like any other.
    rt = runtime_factory(payments([], approvers=["group:finance"]))
    ticket = await park(rt)
    seen: list[ResumeTicket | None] = []

    def who(user: str) -> Any:
        def find(found: ResumeTicket | None) -> Actor:
            seen.append(found)
            return Actor(id=user, groups=frozenset({"finance"} if user == "U7" else ()))

        return find

    refused = await rt.accept(ticket.ticket_id, Allow(), who("U8"), **click(ticket))
    assert isinstance(refused, Refused)
    assert refused.refusal.reason is RefusalReason.UNAUTHORIZED
    assert await received_count(rt) == 0
    outcome = await rt.accept(ticket.ticket_id, Allow(), who("U7"), **click(ticket, 2))
    assert outcome == Accepted(ticket, stored=True)
    assert seen == [ticket, ticket]
    assert await received_count(rt) == 1


@pytest.mark.parametrize(
    ("case", "reason"),
    [
        ("unknown", RefusalReason.UNKNOWN_TICKET),
        ("forged token", RefusalReason.MISMATCH),
        ("stranger", RefusalReason.UNAUTHORIZED),
        ("wrong kind", RefusalReason.DOES_NOT_FIT),
        ("past deadline", RefusalReason.EXPIRED),
        ("cancelled", RefusalReason.VOIDED),
        ("decided", RefusalReason.ALREADY_DECIDED),
        ("changed agent", RefusalReason.STALE),
    ],
)
async def test_a_refused_click_stores_nothing_and_says_why(
    runtime_factory: Any, snapshot: Any, case: str, reason: RefusalReason
) -> None:
    ran: list[int] = []
    rt = runtime_factory(payments(ran, deadline=timedelta(minutes=5)))
    ticket = await park(rt)
    ticket_id, actor, answer, options = ticket.ticket_id, Actor(id="U1"), Allow(), click(ticket)
    match case:
        case "unknown":
            ticket_id = "tk_nope"
        case "forged token":
            options["correlation"] = "guessed"
        case "stranger":
            actor = Actor(id="U9")
        case "wrong kind":
            answer = InputData(data={})  # type: ignore[assignment]
        case "past deadline":
            rt.clock.advance(6 * 60)
        case "cancelled":
            await rt.cancel(ticket.run_id)
        case "decided":
            await rt.approve(ticket.ticket_id, actor="U1")
        case "changed agent":
            rt = runtime_factory(payments(ran, version="2", deadline=timedelta(minutes=5)))
    before = await snapshot(ticket.run_id)
    outcome = await rt.accept(ticket_id, answer, actor, **options)
    assert isinstance(outcome, Refused), outcome
    assert outcome.refusal.reason is reason
    assert await snapshot(ticket.run_id) == before
    assert await received_count(rt) == 0


async def test_an_unauthorized_refusal_carries_who_may_decide(runtime_factory: Any) -> None:
    rt = runtime_factory(payments([], approvers=["U2", "group:finance"], four_eyes=True))
    ticket = await park(rt)
    outcome = await rt.accept(ticket.ticket_id, Allow(), Actor(id="U1"), **click(ticket))
    assert isinstance(outcome, Refused)
    assert outcome.refusal.deciders == ("U2", "group:finance")
    assert outcome.refusal.four_eyes


async def test_a_decided_refusal_names_who_decided(runtime_factory: Any) -> None:
    rt = runtime_factory(payments([], approvers=["*"]))
    ticket = await park(rt)
    await rt.approve(ticket.ticket_id, actor="U5")
    outcome = await rt.accept(ticket.ticket_id, Deny(), Actor(id="U6"), **click(ticket))
    assert isinstance(outcome, Refused)
    assert outcome.refusal.reason is RefusalReason.ALREADY_DECIDED
    assert outcome.refusal.decided_by == "U5"


async def test_typed_input_that_does_not_fit_is_refused_with_its_field_errors(
    runtime_factory: Any,
) -> None:
    rt = runtime_factory(forms())
    ticket = await park(rt, "forms")
    outcome = await rt.accept(
        ticket.ticket_id, InputData(data={"n": 0}), Actor(id="U1"), **click(ticket)
    )
    assert isinstance(outcome, Refused)
    assert outcome.refusal.reason is RefusalReason.INVALID_ANSWER
    assert [e["path"] for e in outcome.refusal.errors] == ["n"]
    assert await received_count(rt) == 0


async def test_a_form_may_open_only_for_someone_who_may_decide_it(runtime_factory: Any) -> None:
    rt = runtime_factory(forms())
    ticket = await park(rt, "forms")
    opened = await rt.may_answer(
        ticket.ticket_id, "input", Actor(id="U1"), correlation=ticket.correlation
    )
    assert opened == Decidable(ticket)
    stranger = await rt.may_answer(
        ticket.ticket_id, "input", Actor(id="U2"), correlation=ticket.correlation
    )
    assert isinstance(stranger, Refused)
    assert stranger.refusal.reason is RefusalReason.UNAUTHORIZED
    resolve = await rt.may_answer(
        ticket.ticket_id, "resolve", Actor(id="U1"), correlation=ticket.correlation
    )
    assert isinstance(resolve, Refused)
    assert resolve.refusal.reason is RefusalReason.DOES_NOT_FIT
    assert await received_count(rt) == 0


async def test_the_loser_of_two_stored_clicks_is_told_who_won(runtime_factory: Any) -> None:
    rt = runtime_factory(payments([], approvers=["*"]))
    ticket = await park(rt)
    for n, user in ((1, "U5"), (2, "U6")):
        outcome = await rt.accept(
            ticket.ticket_id, Allow(), Actor(id=user), **click(ticket, n, reply={"user": user})
        )
        assert isinstance(outcome, Accepted)  # both pass the check before either applies
    outcomes = await rt.apply_received()
    assert [o.applied for o in outcomes] == [True, False]
    async with rt.store.transaction() as tx:
        [notice] = [
            o for o in await tx.outbox_for_run(ticket.run_id) if o.kind == "decision_refused"
        ]
    assert notice.payload["reason"] == "already_decided"
    assert notice.payload["decided_by"] == "U5"
    assert notice.destination["user"] == "U6"
