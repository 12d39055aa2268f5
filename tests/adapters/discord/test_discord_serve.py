"""`signoff serve` with SIGNOFF_DISCORD_* settings: the bot starts, cards go out, clicks land."""

from __future__ import annotations

import asyncio
from pathlib import Path

import aiohttp
import pytest
from discord_harness import ALICE
from fake_discord import FakeDiscord

from bot.serve import build_service
from bot.settings import load_settings
from runtime import RunStatus

pytestmark = pytest.mark.timeout(60)


async def test_serve_wires_discord_from_settings(
    tmp_path: Path, fake: FakeDiscord, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SIGNOFF_TEST_LEDGER", str(tmp_path / "ledger.jsonl"))
    settings = load_settings(
        overrides={
            "database_url": f"sqlite+aiosqlite:///{tmp_path / 'serve.db'}",
            "app": "tests.e2e.serve_app:agents",
            "port": 0,
            "operator_token": "discord-serve-token-0123456789",
            "discord_bot_token": "fake-bot-token",
            "discord_api_base_url": fake.api_base_url,
            "discord_gateway_url": fake.gateway_url,
            "discord_guild_ready_timeout": 0.1,
        }
    )
    service = await build_service(settings)
    await service.start()
    try:
        assert fake.connected == 1
        command = fake.slash(ALICE, "run", agent="payments", prompt="pay ACC-1")
        started = await fake.interact(command)
        await fake.answered(started)
        [run] = await service.runtime.list_runs()

        def card() -> dict | None:
            cards = fake.cards()
            return cards[-1] if cards else None

        posted = await fake.wait_for(card, what="the approval card")
        answer = await fake.interact(fake.click(ALICE, posted, "Allow"))
        await fake.answered(answer)
        for _ in range(200):
            if (await service.runtime.get(run.run_id)).status is RunStatus.DONE:
                break
            await asyncio.sleep(0.05)
        assert (await service.runtime.get(run.run_id)).status is RunStatus.DONE
        assert len((tmp_path / "ledger.jsonl").read_text().splitlines()) == 1
    finally:
        await service.stop(grace_seconds=1)
    assert fake.connected == 0


async def test_serve_goes_on_serving_while_the_gateway_cannot_be_reached(
    tmp_path: Path, fake: FakeDiscord
) -> None:
    fake.refuse_gateway = 1_000  # every handshake answered 503, for now
    settings = load_settings(
        overrides={
            "database_url": f"sqlite+aiosqlite:///{tmp_path / 'serve.db'}",
            "app": "tests.e2e.serve_app:agents",
            "port": 0,
            "operator_token": "discord-serve-token-0123456789",
            "discord_bot_token": "fake-bot-token",
            "discord_api_base_url": fake.api_base_url,
            "discord_gateway_url": fake.gateway_url,
            "discord_ready_timeout": 0.5,
        }
    )
    service = await build_service(settings)
    await service.start()
    try:
        async with aiohttp.ClientSession() as http, http.get(service.url + "/healthz") as r:
            assert r.status == 200
        assert fake.refused_handshakes >= 1 and fake.connected == 0
        fake.refuse_gateway = 0  # Discord is back: the bot connects without a restart
        await fake.wait_for(lambda: fake.connected == 1, seconds=30, what="the gateway")
    finally:
        await service.stop(grace_seconds=1)
    assert fake.connected == 0
