"""Store transactions and ticket reads per chat click, API decision and webhook start.

Usage::

    python bench/decision_costs.py

Runs each path once on a fresh SQLite file, the way `signoff serve` takes it, and
prints for each step the transactions it opened (by the function that opened them, the
first one outside ``runtime/store``, and whether they wrote), how many times it read the
decided ticket by id (``get_ticket``) and how many times it validated a decision:

* ``click``: a Slack click on a posted card: ``accept`` (the edge, before its ack), the
  worker's ``apply_received``, and the outbox editing the card (``deliver_due``).
* ``api decision``: ``POST /api/tickets/{id}/decision``'s calls: the ticket as its viewer
  may see it, then ``submit``; then the same card edit.
* ``webhook start``: ``Runtime.start`` as a hook calls it (not waiting, keyed).

Transactions are counted as `bench/profile_serve.py` counts them (its
`count_transactions`); reads and validations by wrapping `SQLTransaction.get_ticket` and
`Decisions.validate` (bench only).
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from profile_serve import count_transactions  # noqa: E402

from adapters.slack import SlackNotifier  # noqa: E402
from runtime import (  # noqa: E402
    Actor,
    Agent,
    Allow,
    ResumeCommand,
    Runtime,
    ScriptedModel,
    final_reply,
    tool_call_reply,
)
from runtime.domain.notifications import Delivery, Notification  # noqa: E402
from runtime.services.decisions import Decisions  # noqa: E402
from runtime.services.delivery import deliver_due  # noqa: E402
from runtime.store.sql import SQLStore, SQLTransaction  # noqa: E402

ORIGIN = {"platform": "slack", "channel": "C1", "thread_ts": "1700000000.000001", "user": "U1"}


class Counts:
    """What one step cost."""

    def __init__(self) -> None:
        self.transactions: Counter[str] = Counter()
        self.ticket_reads = 0
        self.validations = 0

    def line(self, step: str) -> str:
        total = sum(self.transactions.values())
        opened = ", ".join(f"{where} x{n}" for where, n in sorted(self.transactions.items()))
        return (
            f"  {step:<16} {total} tx, {self.ticket_reads} ticket reads, "
            f"{self.validations} validations   [{opened}]"
        )


class Meter:
    """Counts transactions, reads of one ticket and validations while `counts` is set."""

    def __init__(self) -> None:
        self.counts: Counts | None = None
        self.ticket_id: str | None = None
        self.transactions: Counter[str] = Counter()

    def install(self) -> None:
        meter = self
        count_transactions(self.transactions)

        get_ticket = SQLTransaction.get_ticket

        async def counted_get(self: SQLTransaction, ticket_id: str) -> Any:
            if meter.counts is not None and ticket_id == meter.ticket_id:
                meter.counts.ticket_reads += 1
            return await get_ticket(self, ticket_id)

        validate = Decisions.validate

        def counted_validate(self: Decisions, *args: Any) -> Any:
            if meter.counts is not None:
                meter.counts.validations += 1
            return validate(self, *args)

        SQLTransaction.get_ticket = counted_get  # type: ignore[method-assign,assignment]
        Decisions.validate = counted_validate  # type: ignore[method-assign,assignment]

    async def step(self, name: str, action: Callable[[], Awaitable[Any]]) -> Counts:
        self.counts = counts = Counts()
        self.transactions.clear()  # those of the setup before this step
        try:
            await action()
        finally:
            self.counts = None
            counts.transactions.update(self.transactions)
        print(counts.line(name))
        return counts


class PostsCards:
    """A notifier that posts every card at one place (as Slack answers a post) and reads
    the ticket when Slack's notifier does."""

    needs_ticket = staticmethod(SlackNotifier.needs_ticket)

    async def deliver(self, note: Notification, delivery: Delivery) -> dict[str, Any] | None:
        return {"channel": "C1", "ts": "1700000000.000002"}


def payments() -> Agent:
    model = ScriptedModel([tool_call_reply(("pay", {"amount": 5})), final_reply("Paid.")])
    agent = Agent("payments", "Pay.", model)

    @agent.tool(permission="ask")
    def pay(amount: int) -> str:
        """Pay."""
        return "ok"

    return agent


def total(*steps: Counts) -> Counts:
    summed = Counts()
    for counts in steps:
        summed.transactions.update(counts.transactions)
        summed.ticket_reads += counts.ticket_reads
        summed.validations += counts.validations
    return summed


async def parked(rt: Runtime, store: SQLStore, meter: Meter) -> Any:
    result = await rt.start("payments", "pay 5", requester="U1", origin=ORIGIN)
    ticket = result.pending[0].ticket
    await deliver_due(store, rt.clock, PostsCards())  # the card is posted
    meter.ticket_id = ticket.ticket_id
    return ticket


async def main() -> None:
    meter = Meter()
    meter.install()
    with tempfile.TemporaryDirectory() as folder:
        store = SQLStore.from_url(f"sqlite+aiosqlite:///{Path(folder) / 'costs.db'}")
        await store.migrate()
        rt = Runtime(store, [payments()])
        notifier = PostsCards()
        actor = Actor(id="U1", platform="slack")

        print("click")
        ticket = await parked(rt, store, meter)
        steps = [
            await meter.step(
                "accept",
                lambda: rt.accept(
                    ticket.ticket_id,
                    Allow(),
                    actor,
                    correlation=ticket.correlation,
                    source="slack",
                    delivery_id="d1",
                    reply={"channel": "C1", "user": "U1"},
                ),
            ),
            await meter.step("apply_received", lambda: rt.apply_received()),
        ]
        print(total(*steps).line("accept + apply"))
        card = await meter.step("card edit", lambda: deliver_due(store, rt.clock, notifier))
        print(total(*steps, card).line("with card edit"))

        print("api decision")
        ticket = await parked(rt, store, meter)

        async def decide() -> None:
            seen = await rt.ticket(ticket.ticket_id, viewer=actor)
            await rt.submit(ResumeCommand.from_ticket(seen, Allow(), actor, rt.clock.now()))

        steps = [await meter.step("decide", decide)]
        card = await meter.step("card edit", lambda: deliver_due(store, rt.clock, notifier))
        print(total(*steps, card).line("with card edit"))

        print("webhook start")
        await meter.step(
            "start",
            lambda: rt.start(
                "payments",
                "pay 5",
                requester="hook",
                origin=ORIGIN,
                wait=False,
                idempotency=[("hook:sig", "t.digest", "digest"), ("hook", "key-1", "digest")],
            ),
        )
        await rt.aclose()
        await store.close()


if __name__ == "__main__":
    asyncio.run(main())
