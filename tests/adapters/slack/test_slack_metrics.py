"""`/metrics` of `signoff serve` with Slack in HTTP mode: acknowledgements of Slack's
requests, and each delivery's outcome when Slack rate limits, fails and refuses."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable
from pathlib import Path

import aiohttp
import pytest
from fake_slack import (
    BOT_TOKEN,
    SIGNING_SECRET,
    FakeSlack,
    click_payload,
    command_body,
    interaction_body,
    signed_headers,
)
from metrics_kit import total
from slackbed import buttons

from adapters.slack import blocks
from bot.serve import build_service
from bot.settings import load_settings

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(autouse=True)
def no_signoff_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.upper().startswith("SIGNOFF_"):
            monkeypatch.delenv(name)


async def until(check: Callable[[], object], what: str) -> None:
    deadline = time.monotonic() + 20
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


async def test_slack_acknowledgements_and_delivery_outcomes(
    fake: FakeSlack, tmp_path: Path
) -> None:
    settings = load_settings(
        overrides={
            "database_url": f"sqlite+aiosqlite:///{tmp_path / 'signoff.db'}",
            "port": 0,
            "operator_token": "operator-token-0123456789",
            "slack_bot_token": BOT_TOKEN,
            "slack_api_base_url": f"{fake.url}/api",
            "slack_mode": "http",
            "slack_signing_secret": SIGNING_SECRET,
        }
    )
    service = await build_service(settings)
    await service.start()
    exposition = ""

    async def scraped() -> str:
        async with aiohttp.ClientSession() as http, http.get(f"{service.url}/metrics") as got:
            return await got.text()

    try:
        url = f"{service.url}/slack/events"
        async with aiohttp.ClientSession() as http:
            body = command_body("refunds Order A1001 was charged twice")
            async with http.post(url, data=body, headers=signed_headers(body)) as response:
                assert response.status == 200
            await until(fake.cards, "the refund card")
            [card] = fake.cards()
            # The card's outcome is rate limited once, then edited in; the run's answer
            # fails once (retried), then Slack refuses it for good.
            fake.fail("chat.update", status=429, retry_after=1)
            fake.fail("chat.postMessage", status=500)
            fake.fail("chat.postMessage", error="channel_not_found")
            value = buttons(card)[blocks.ACTION_ALLOW]
            message = {"ts": card.ts, "thread_ts": card.thread_ts}
            body = interaction_body(click_payload(blocks.ACTION_ALLOW, value, message=message))
            async with http.post(url, data=body, headers=signed_headers(body)) as response:
                assert response.status == 200
        for _ in range(1000):
            exposition = await scraped()
            if total(exposition, "signoff_notifications_total", outcome="failed"):
                break
            await asyncio.sleep(0.02)
    finally:
        await service.stop(grace_seconds=2)

    slack = {"platform": "slack"}
    assert total(exposition, "signoff_notifications_total", outcome="rate_limited", **slack) == 1
    assert total(exposition, "signoff_notifications_total", outcome="retried", **slack) == 1
    assert total(exposition, "signoff_notifications_total", outcome="failed", **slack) == 1
    assert total(exposition, "signoff_notifications_total", outcome="delivered", **slack) >= 1
    # The slash command and the click, each acknowledged.
    assert total(exposition, "signoff_click_ack_seconds_count", edge="slack") == 2
    assert total(exposition, "signoff_decisions_total", edge="slack", decision="allow") == 1
