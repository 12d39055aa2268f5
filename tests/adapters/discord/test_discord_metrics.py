"""`/metrics` of `signoff serve` with Discord: a click over the gateway is timed to its
acknowledgement, and the cards' deliveries are counted."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from discord_harness import ALICE, BOB, Harness
from fake_discord import CHANNEL_ID, FakeDiscord
from metrics_kit import total
from prometheus_client import generate_latest

from bot.serve import build_service
from bot.settings import load_settings
from runtime import RunStatus

pytestmark = pytest.mark.timeout(60)


async def test_a_discord_click_is_timed_to_its_acknowledgement(
    tmp_path: Path, fake: FakeDiscord, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SIGNOFF_TEST_LEDGER", str(tmp_path / "ledger.jsonl"))
    settings = load_settings(
        overrides={
            "database_url": f"sqlite+aiosqlite:///{tmp_path / 'serve.db'}",
            "app": "tests.e2e.serve_app:agents",
            "port": 0,
            "operator_token": "discord-metrics-token-0123456789",
            "discord_bot_token": "fake-bot-token",
            "discord_api_base_url": fake.api_base_url,
            "discord_gateway_url": fake.gateway_url,
            "discord_guild_ready_timeout": 0.1,
        }
    )
    service = await build_service(settings)
    await service.start()
    try:
        started = await fake.interact(fake.slash(ALICE, "run", agent="payments", prompt="pay"))
        await fake.answered(started)
        [run] = await service.runtime.list_runs()
        posted = await fake.wait_for(lambda: (fake.cards() or [None])[-1], what="the card")
        assert total(await _scrape(service.url), "signoff_click_ack_seconds_count") == 0
        answer = await fake.interact(fake.click(ALICE, posted, "Allow"))
        await fake.answered(answer)
        for _ in range(400):
            if (await service.runtime.get(run.run_id)).status is RunStatus.DONE:
                break
            await asyncio.sleep(0.025)
        exposition = await _scrape(service.url)
    finally:
        await service.stop(grace_seconds=1)
    # The slash command that started the run is not a decision: only the click counts.
    assert total(exposition, "signoff_click_ack_seconds_count", edge="discord") == 1
    assert total(exposition, "signoff_click_ack_seconds_count") == 1
    assert total(exposition, "signoff_decisions_total", edge="discord", decision="allow") == 1
    assert total(exposition, "signoff_notifications_total", platform="discord") >= 1
    assert total(exposition, "signoff_notifications_total", outcome="failed") == 0


async def _scrape(url: str) -> str:
    async with aiohttp.ClientSession() as http, http.get(f"{url}/metrics") as answer:
        assert answer.status == 200
        return await answer.text()


async def test_a_batch_click_is_timed_and_a_strangers_refused_click_too(harness: Harness) -> None:
    bot = await harness.start_bot()
    run_id, _ = await harness.start_run(ALICE, "tidy")

    def batch() -> dict[str, Any] | None:
        for message in reversed(harness.fake.channel_messages(CHANNEL_ID)):
            embeds = message.get("embeds") or []
            if embeds and "2 calls wait for a decision" in str(embeds[0].get("title", "")):
                return message
        return None

    offered = await harness.fake.wait_for(batch, what="the batch message")
    refused = await harness.click(BOB, offered, "Allow all 2")
    assert "Allow recorded" not in refused.text
    answer = await harness.click(ALICE, offered, "Allow all 2")
    assert "Allow recorded for 2 of 2 calls" in answer.text
    await harness.finished(run_id)
    exposition = generate_latest(bot.service.metrics.registry).decode()
    assert total(exposition, "signoff_click_ack_seconds_count", edge="discord") == 2
    assert total(exposition, "signoff_decisions_total", edge="discord", decision="allow") == 2
