"""Fixtures of the Discord tests: the fake Discord and a harness around one SQLite store."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from discord_harness import ROLES, Harness, build_agents
from fake_discord import FakeDiscord

from adapters.discord import configure_endpoints
from runtime import ManualClock
from runtime.store.sql import SQLStore


@pytest.fixture(autouse=True)
def _no_proxies(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "ALL_PROXY",
        "http_proxy",
        "https_proxy",
        "all_proxy",
    ):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
async def fake() -> AsyncIterator[FakeDiscord]:
    server = FakeDiscord(roles=ROLES)
    await server.start()
    try:
        yield server
    finally:
        await server.close()


@pytest.fixture
async def harness(tmp_path: Path, fake: FakeDiscord) -> AsyncIterator[Harness]:
    path = tmp_path / "signoff.db"
    store = SQLStore.sqlite(path)
    await store.migrate()
    ledger: list[tuple[str, dict[str, Any]]] = []
    previous = configure_endpoints(fake.api_base_url, fake.gateway_url)
    h = Harness(fake, store, path, ManualClock(), ledger, build_agents(ledger))
    try:
        yield h
    finally:
        for bot in reversed(h.bots):
            await bot.close()
        configure_endpoints(*previous)
        for extra in h.extra_stores:
            await extra.close()
        await store.close()
