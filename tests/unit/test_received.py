"""Chat decisions stored before they are acknowledged, applied later exactly once."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from runtime import (
    Accepted,
    Actor,
    Agent,
    Allow,
    Decidable,
    Deny,
    NotAwaiting,
    RefusalReason,
    Refused,
    RunStatus,
    Runtime,
    ScriptedModel,
    Store,
    final_reply,
    tool_call_reply,
)
from runtime.domain.tickets import ResumeTicket
from runtime.store.memory import MemoryStore, MemoryTransaction
from runtime.store.records import ReceivedRecord
from runtime.store.sql import SQLStore


@pytest.fixture(params=["memory", "sqlite"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    """The tests taking `runtime_factory` run on the memory store and on a SQLite file."""
    if request.param == "memory":
        yield MemoryStore()
        return
    sql = SQLStore.sqlite(tmp_path / "received.db")
    await sql.migrate()
    try:
        yield sql
    finally:
        await sql.close()


def agent(ran: list[int]) -> Agent:
    model = ScriptedModel([tool_call_reply(("pay", {"amount": 5})), final_reply("Paid.")])
    payments = Agent("payments", "Pay.", model)

    @payments.tool(permission="ask")
    def pay(amount: int) -> str:
        """Pay."""
        ran.append(amount)
        return "ok"

    return payments


async def parked(runtime_factory: Any, ran: list[int]) -> tuple[Any, Any]:
    rt = runtime_factory(agent(ran))
    result = await rt.start("payments", "pay 5", requester="U1")
    assert result.status is RunStatus.AWAITING
    return rt, result.pending[0].ticket


async def test_a_received_click_is_applied_once_by_another_process(
    runtime_factory: Any, snapshot: Any
) -> None:
    ran: list[int] = []
    first, ticket = await parked(runtime_factory, ran)
    stored = await first.accept(
        ticket.ticket_id,
        Allow(),
        Actor(id="U1", platform="slack"),
        correlation=ticket.correlation,
        source="slack",
        delivery_id="click-1",
        reply={"response_url": "http://127.0.0.1/r"},
    )
    assert stored == Accepted(ticket, stored=True)
    # Nothing is applied until someone applies it: the run is still parked.
    assert (await first.get(ticket.run_id)).status is RunStatus.AWAITING

    second = runtime_factory(agent(ran))  # a fresh process after a crash
    outcomes = await second.apply_received()
    assert [o.applied for o in outcomes] == [True]
    assert await second.apply_received() == []
    assert (await second.get(ticket.run_id)).status is RunStatus.QUEUED
    assert (await second.resume(ticket.run_id)).status is RunStatus.DONE
    assert ran == [5]


async def test_a_retried_delivery_is_stored_once(runtime_factory: Any) -> None:
    ran: list[int] = []
    rt, ticket = await parked(runtime_factory, ran)
    actor = Actor(id="U1", platform="slack")
    stored = [
        await rt.accept(
            ticket.ticket_id,
            Allow(),
            actor,
            correlation=ticket.correlation,
            source="slack",
            delivery_id="same",
        )
        for _ in range(3)
    ]
    assert stored == [Accepted(ticket, stored=True)] + [Accepted(ticket, stored=False)] * 2
    outcomes = await rt.apply_received()
    assert len(outcomes) == 1 and outcomes[0].applied


async def test_the_loser_of_two_clicks_is_refused_and_changes_nothing(
    runtime_factory: Any, snapshot: Any
) -> None:
    ran: list[int] = []
    rt, ticket = await parked(runtime_factory, ran)
    accepted = await asyncio.gather(
        *(
            rt.accept(
                ticket.ticket_id,
                answer,
                Actor(id="U1", platform="slack"),
                correlation=ticket.correlation,
                source="slack",
                delivery_id=f"click-{n}",
                reply={"response_url": f"http://127.0.0.1/r{n}"},
            )
            for n, answer in enumerate([Allow(), Deny(reason="no")])
        )
    )
    # Both pass the check: neither is applied before the other is stored.
    assert accepted == [Accepted(ticket, stored=True)] * 2
    outcomes = await rt.apply_received()
    assert [o.applied for o in outcomes] == [True, False]
    assert isinstance(outcomes[1].error, NotAwaiting)
    assert outcomes[1].command.state == "refused"
    assert outcomes[1].command.error_code == "not_awaiting"
    events = [e["kind"] for e in await rt.events(ticket.run_id)]
    assert events.count("ticket_decided") == 1
    # The loser is told, through the outbox, at the place its click came from.
    async with rt.store.transaction() as tx:
        refused = [
            o for o in await tx.outbox_for_run(ticket.run_id) if o.kind == "decision_refused"
        ]
    assert len(refused) == 1
    assert refused[0].destination == {"response_url": "http://127.0.0.1/r1", "platform": "slack"}
    assert refused[0].payload["error"] == "not_awaiting"


async def test_a_refused_click_is_not_stored_and_an_accepted_one_names_its_ticket(
    runtime_factory: Any, snapshot: Any
) -> None:
    ran: list[int] = []
    rt, ticket = await parked(runtime_factory, ran)
    before = await snapshot(ticket.run_id)

    async def accept(ticket_id: str, actor: str, correlation: str, n: int) -> Any:
        return await rt.accept(
            ticket_id,
            Allow(),
            Actor(id=actor),
            correlation=correlation,
            source="slack",
            delivery_id=f"click-{n}",
        )

    stranger = await accept(ticket.ticket_id, "U2", ticket.correlation, 1)
    assert isinstance(stranger, Refused)
    assert stranger.refusal.reason is RefusalReason.UNAUTHORIZED
    assert "who may: U1" in stranger.refusal.message
    forged = await accept(ticket.ticket_id, "U1", "forged", 2)
    assert isinstance(forged, Refused) and forged.refusal.reason is RefusalReason.MISMATCH
    unknown = await accept("tk_nope", "U1", ticket.correlation, 3)
    assert isinstance(unknown, Refused)
    assert unknown.refusal.reason is RefusalReason.UNKNOWN_TICKET
    assert await snapshot(ticket.run_id) == before
    assert await rt.apply_received() == []
    accepted = await accept(ticket.ticket_id, "U1", ticket.correlation, 4)
    assert isinstance(accepted, Accepted) and accepted.ticket is not None
    assert accepted.ticket.ticket_id == ticket.ticket_id
    assert await snapshot(ticket.run_id) == before  # stored, not applied


class CountingStore(MemoryStore):
    """The memory store, counting transactions and reads of tickets by id."""

    def __init__(self) -> None:
        super().__init__()
        self.transactions = 0
        self.ticket_reads = 0

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[MemoryTransaction]:
        async with super().transaction() as tx:
            self.transactions += 1
            read = tx.get_ticket

            async def get_ticket(ticket_id: str) -> ResumeTicket | None:
                self.ticket_reads += 1
                return await read(ticket_id)

            tx.get_ticket = get_ticket  # type: ignore[method-assign]
            yield tx

    def reset(self) -> None:
        self.transactions = self.ticket_reads = 0


async def test_a_click_reads_its_ticket_once_when_accepted_and_once_when_applied() -> None:
    store = CountingStore()
    rt = Runtime(store, [agent([])])
    ticket = (await rt.start("payments", "pay 5", requester="U1")).pending[0].ticket
    store.reset()
    accepted = await rt.accept(
        ticket.ticket_id,
        Allow(),
        Actor(id="U1", platform="slack"),
        correlation=ticket.correlation,
        source="slack",
        delivery_id="click-1",
    )
    assert isinstance(accepted, Accepted) and accepted.stored
    assert (store.transactions, store.ticket_reads) == (1, 1)
    store.reset()
    [outcome] = await rt.apply_received()
    assert outcome.applied
    # One transaction claims the stored click and applies it; nothing is read before
    # it, and nothing after it that no one asked for.
    assert (store.transactions, store.ticket_reads) == (1, 1)
    await rt.aclose()


async def test_a_form_button_reads_its_ticket_once_when_the_clicker_is_known_at_once() -> None:
    store = CountingStore()
    rt = Runtime(store, [agent([])])
    ticket = (await rt.start("payments", "pay 5", requester="U1")).pending[0].ticket
    seen: list[ResumeTicket | None] = []

    def known(found: ResumeTicket | None) -> Actor:
        seen.append(found)
        return Actor(id="U1", platform="slack")

    async def look_up() -> Actor:
        return Actor(id="U1", platform="slack")

    store.reset()
    opened = await rt.may_answer(ticket.ticket_id, "deny", known, correlation=ticket.correlation)
    assert opened == Decidable(ticket) and seen == [ticket]
    assert (store.transactions, store.ticket_reads) == (1, 1)
    # A look-up may take long: the ticket is read again after it.
    store.reset()
    opened = await rt.may_answer(
        ticket.ticket_id, "deny", lambda found: look_up(), correlation=ticket.correlation
    )
    assert opened == Decidable(ticket)
    assert (store.transactions, store.ticket_reads) == (2, 2)
    await rt.aclose()


async def test_a_refused_oldest_click_leaves_the_next_one_to_be_applied_in_the_same_round(
    runtime_factory: Any,
) -> None:
    ran: list[int] = []
    rt, first = await parked(runtime_factory, ran)
    second = (await rt.start("payments", "pay 5", requester="U1")).pending[0].ticket
    actor = Actor(id="U1", platform="slack")
    for n, ticket in enumerate([first, second]):
        stored = await rt.accept(
            ticket.ticket_id,
            Allow(),
            actor,
            correlation=ticket.correlation,
            source="slack",
            delivery_id=f"click-{n}",
            reply={"response_url": f"http://127.0.0.1/r{n}"},
        )
        assert stored == Accepted(ticket, stored=True)
    # Decided by other means after the click was stored: the stored click is refused
    # when applied, and its transaction (which claimed both clicks) rolls back.
    await rt.decline(first.ticket_id, actor="U1", reason="no")
    outcomes = await rt.apply_received()
    assert [(o.command.ticket_id, o.applied) for o in outcomes] == [
        (first.ticket_id, False),
        (second.ticket_id, True),
    ]
    assert isinstance(outcomes[0].error, NotAwaiting)
    assert [o.command.state for o in outcomes] == ["refused", "applied"]
    assert await rt.apply_received() == []
    assert (await rt.get(second.run_id)).status is RunStatus.QUEUED
    async with rt.store.transaction() as tx:
        told = [o for o in await tx.outbox_for_run(first.run_id) if o.kind == "decision_refused"]
    assert [o.destination["response_url"] for o in told] == ["http://127.0.0.1/r0"]


async def test_a_click_that_fails_to_apply_waits_for_its_lease_and_the_next_is_applied(
    runtime_factory: Any,
) -> None:
    ran: list[int] = []
    rt, ticket = await parked(runtime_factory, ran)
    broken = ReceivedRecord(
        command_id="rc_broken",
        source="slack",
        delivery_id="broken",
        ticket_id=ticket.ticket_id,
        correlation=ticket.correlation,
        answer={"kind": "no such answer"},
        actor={"id": "U1"},
        received_at=rt.clock.now() - timedelta(seconds=1),  # the oldest
    )
    async with rt.store.transaction() as tx:
        assert await tx.insert_received(broken)
    stored = await rt.accept(
        ticket.ticket_id,
        Allow(),
        Actor(id="U1", platform="slack"),
        correlation=ticket.correlation,
        source="slack",
        delivery_id="click-1",
    )
    assert stored == Accepted(ticket, stored=True)
    # Not a refusal: the failure goes to the caller, and the click that failed stays
    # claimed (not applied, not refused) until its lease runs out ...
    with pytest.raises(ValidationError):
        await rt.apply_received()
    async with rt.store.transaction() as tx:
        [waiting, _] = await tx.pending_received(10)
    assert (waiting.command_id, waiting.lease_owner) == ("rc_broken", rt.worker_id)
    # ... while the clicks after it are applied.
    [outcome] = await rt.apply_received()
    assert outcome.applied and outcome.command.delivery_id == "click-1"
