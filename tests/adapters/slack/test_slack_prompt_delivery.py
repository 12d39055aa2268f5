"""Cards are posted and edited as soon as their notification is committed, not at the
next poll: `signoff serve` on SQLite wakes its outbox loop on its own commits.

The polls here are a minute apart, so only a wake-up can deliver in time.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from fake_slack import (
    BOT_TOKEN,
    SIGNING_SECRET,
    FakeSlack,
    Message,
    click_payload,
    command_body,
    interaction_body,
    signed_headers,
)
from slackbed import buttons, text_of

from adapters.slack import blocks
from bot.serve import Service, build_service
from bot.settings import load_settings
from runtime import RunStatus


@pytest.fixture(autouse=True)
def no_signoff_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.upper().startswith("SIGNOFF_"):
            monkeypatch.delenv(name)


@pytest.fixture
async def served(fake: FakeSlack, tmp_path: Path) -> AsyncIterator[Service]:
    settings = load_settings(
        overrides={
            "database_url": f"sqlite+aiosqlite:///{tmp_path / 'signoff.db'}",
            "port": 0,
            "operator_token": "operator-token-0123456789",
            "slack_bot_token": BOT_TOKEN,
            "slack_api_base_url": f"{fake.url}/api",
            "slack_mode": "http",
            "slack_signing_secret": SIGNING_SECRET,
            "poll_seconds": 60,
        }
    )
    service = await build_service(settings)
    await service.start()
    try:
        yield service
    finally:
        await service.stop(grace_seconds=2)


def refund_card(fake: FakeSlack) -> Message | None:
    for message in fake.messages.values():
        if any(b.get("type") == "header" and "refund" in b["text"]["text"] for b in message.blocks):
            return message
    return None


async def test_cards_are_posted_and_edited_without_waiting_for_a_poll(
    served: Service, fake: FakeSlack
) -> None:
    url = f"{served.url}/slack/events"
    async with aiohttp.ClientSession() as http:
        body = command_body("refunds Order A1001 was charged twice")
        async with http.post(url, data=body, headers=signed_headers(body)) as response:
            assert response.status == 200
        card = await fake.wait_for(lambda: refund_card(fake), "the refund card")
        value = buttons(card)[blocks.ACTION_ALLOW]
        message = {"ts": card.ts, "thread_ts": card.thread_ts}
        body = interaction_body(click_payload(blocks.ACTION_ALLOW, value, message=message))
        async with http.post(url, data=body, headers=signed_headers(body)) as response:
            assert response.status == 200
    await fake.wait_for(lambda: card.updates, "the card's edit")
    assert "Approved by <@U1>" in text_of(card)
    await fake.wait_for(
        lambda: any(
            m.thread_ts == card.thread_ts and "Refunded" in m.text for m in fake.messages.values()
        ),
        "the final answer in the thread",
    )
    [run] = await served.runtime.list_runs()
    assert (await served.runtime.get(run.run_id)).status is RunStatus.DONE
