"""One delivery round: what each notifier is told about the world.

The first item of each channel's lane is described in the claim's own transaction; the
items after it in that channel are described once those before them are delivered, so
an outcome claimed with its card edits the card posted a moment earlier in the same
round, and a later message finds the run's first message in the channel.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from runtime import Agent, MemoryStore, RunStatus, Runtime, ScriptedModel, Store, tool_call_reply
from runtime.domain.notifications import (
    ApprovalRequested,
    Delivery,
    Notification,
    RunFinished,
    TicketVoided,
)
from runtime.services.delivery import Claim, RoutingNotifier, deliver_due
from runtime.store.sql import SQLStore

CHANNEL = {"platform": "slack", "channel": "C1"}  # no thread: a run's first message is it


class Posts:
    """Posts each notification as a new message (an outcome with a card edits it)."""

    def __init__(self) -> None:
        self.seen: list[tuple[Notification, Delivery]] = []

    async def deliver(self, note: Notification, delivery: Delivery) -> dict[str, Any] | None:
        self.seen.append((note, delivery))
        if delivery.card is not None and delivery.card.ref:
            return dict(delivery.card.ref)
        return {"channel": "C1", "ts": f"{len(self.seen)}.0"}


@pytest.fixture(params=["memory", "sqlite"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    if request.param == "memory":
        yield MemoryStore()
        return
    sql = SQLStore.from_url(f"sqlite+aiosqlite:///{tmp_path / 'rounds.db'}")
    await sql.migrate()
    try:
        yield sql
    finally:
        await sql.close()


def payments() -> Agent:
    agent = Agent("payments", "Pay.", ScriptedModel([tool_call_reply(("pay", {"amount": 5}))]))

    @agent.tool(permission="ask")
    def pay(amount: int) -> str:
        """Pay."""
        return "ok"

    return agent


async def test_items_of_one_channel_in_one_round_see_those_delivered_before_them(
    store: Store,
) -> None:
    runtime = Runtime(store, [payments()])
    try:
        parked = await runtime.start("payments", "pay 5", requester="U1", origin=CHANNEL)
        # Cancelled before its card went out: the card, its outcome and the run's end
        # are all due in the same round, in one channel.
        await runtime.cancel(parked.run_id, actor="U1")
        assert (await runtime.get(parked.run_id)).status is RunStatus.CANCELLED
        notifier = Posts()
        assert await deliver_due(store, runtime.clock, notifier) == 3
    finally:
        await runtime.aclose()
    (card, card_at), (voided, voided_at), (finished, finished_at) = notifier.seen
    assert isinstance(card, ApprovalRequested)
    assert card_at.first_message is None and card_at.ticket is not None
    assert isinstance(voided, TicketVoided)
    assert voided_at.card is not None
    assert (voided_at.card.state, dict(voided_at.card.ref)) == (
        "delivered",
        {"channel": "C1", "ts": "1.0"},
    )
    assert isinstance(finished, RunFinished)
    assert finished_at.first_message == {"channel": "C1", "ts": "1.0"}


class EditsWithoutTicket(Posts):
    """Says it reads `Delivery.ticket` for everything but an outcome."""

    def needs_ticket(self, note: Notification) -> bool:
        return not isinstance(note, TicketVoided)


@pytest.mark.parametrize("says", [False, True])
async def test_the_ticket_is_read_only_for_a_notifier_that_reads_it(
    store: Store, says: bool
) -> None:
    runtime = Runtime(store, [payments()])
    try:
        parked = await runtime.start("payments", "pay 5", requester="U1", origin=CHANNEL)
        await runtime.cancel(parked.run_id, actor="U1")
        slack = EditsWithoutTicket() if says else Posts()
        assert await deliver_due(store, runtime.clock, RoutingNotifier({"slack": slack})) == 3
    finally:
        await runtime.aclose()
    (_, card_at), (_, voided_at), _ = slack.seen
    ticket_id = parked.pending[0].ticket.ticket_id
    assert card_at.ticket is not None and card_at.ticket.ticket_id == ticket_id
    if says:
        assert voided_at.ticket is None
    else:
        assert voided_at.ticket is not None and voided_at.ticket.ticket_id == ticket_id
    assert voided_at.card is not None and voided_at.card.state == "delivered"


@pytest.mark.parametrize("pacing", [{"slack": 0.0}, {"slack": -1.0}, {}])
async def test_a_platform_paced_at_zero_is_unpaced(store: Store, pacing: dict[str, float]) -> None:
    runtime = Runtime(store, [payments()])
    try:
        parked = await runtime.start("payments", "pay 5", requester="U1", origin=CHANNEL)
        await runtime.cancel(parked.run_id, actor="U1")
        notifier = Posts()
        # One round takes the channel's three items, as without pacing.
        assert await deliver_due(store, runtime.clock, notifier, claim=Claim(pacing=pacing)) == 3
    finally:
        await runtime.aclose()
    assert Claim(pacing={"slack": 0.0, "discord": 1.0}).pacing == {"discord": 1.0}
