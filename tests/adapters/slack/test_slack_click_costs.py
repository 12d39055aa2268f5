"""What a Slack click costs the store: accepted, applied and its card edited by the Slack
notifier (talking to the fake Slack Web API), in at most 4 transactions and 2 reads of
its ticket."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from fake_slack import BOT_TOKEN, FakeSlack
from slack_sdk.web.async_client import AsyncWebClient
from store_trace import TracingStore

from adapters.slack import SlackNotifier
from runtime import Actor, Agent, Allow, ManualClock, Runtime, ScriptedModel, tool_call_reply
from runtime.services.delivery import deliver_due
from runtime.store.sql import SQLStore

ORIGIN = {"platform": "slack", "channel": "C1", "user": "U1"}


@pytest.fixture
async def fake() -> AsyncIterator[FakeSlack]:
    slack = FakeSlack()
    await slack.start()
    try:
        yield slack
    finally:
        await slack.stop()


def payments() -> Agent:
    agent = Agent("payments", "Pay.", ScriptedModel([tool_call_reply(("pay", {"amount": 5}))]))

    @agent.tool(permission="ask")
    def pay(amount: int) -> str:
        """Pay."""
        return "ok"

    return agent


async def test_a_slack_click_with_its_card_edit_takes_4_transactions_and_2_ticket_reads(
    fake: FakeSlack, tmp_path: Path
) -> None:
    clock = ManualClock()
    sql = SQLStore.from_url(f"sqlite+aiosqlite:///{tmp_path / 'click.db'}")
    await sql.migrate()
    store = TracingStore(sql, clock.now())
    runtime = Runtime(store, [payments()], clock=clock, worker_id="w1")
    notifier = SlackNotifier(AsyncWebClient(token=BOT_TOKEN, base_url=f"{fake.url}/api/"))
    try:
        parked = await runtime.start("payments", "pay 5", requester="U1", origin=ORIGIN)
        ticket = parked.pending[0].ticket
        assert await deliver_due(store, clock, notifier) == 1
        [card] = fake.cards()
        store.phase("click")
        await runtime.accept(
            ticket.ticket_id,
            Allow(),
            Actor(id="U1", platform="slack"),
            correlation=ticket.correlation,
            source="slack",
            delivery_id="d1",
            reply={"channel": "C1", "user": "U1"},
        )
        [applied] = await runtime.apply_received()
        assert applied.applied
        assert await deliver_due(store, clock, notifier) == 1
    finally:
        await runtime.aclose()
        await store.close()
    assert card.updates == 1  # the card was edited to show the outcome
    [click] = [phase for phase in store.phases if phase.name == "click"]
    reads = sum(block.ticket_reads[ticket.ticket_id] for block in click.blocks)
    assert (len(click.blocks), reads) == (4, 2)
