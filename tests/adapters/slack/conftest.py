"""Fixtures of the Slack edge tests: the fake Slack and a running signoff Slack edge.

`slack` starts the fake Slack Web API (127.0.0.1, port 0) and `signoff serve`'s process
(`bot.bootstrap.build_service`) on a fresh SQLite file (migrated), with a `ManualClock`,
the Slack edge pointed at the fake and no pacing; its worker and outbox loop run in the
background, and an aiohttp test server serves its application (``POST /slack/events``).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer
from fake_slack import FakeSlack
from slackbed import SlackBed, build_agents, slack_config

from adapters.slack import ChannelLimiter
from bot.bootstrap import Parts, build_service
from bot.settings import Settings
from runtime import Agent, ManualClock
from runtime.services.delivery import RetryPolicy
from runtime.store.sql import SQLStore


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """No proxies (slack_sdk honours them even for 127.0.0.1) and no stray SLACK_* values."""
    for name in list(os.environ):
        upper = name.upper()
        if upper.startswith("SLACK_") or upper in (
            "HTTP_PROXY",
            "HTTPS_PROXY",
            "ALL_PROXY",
            "NO_PROXY",
        ):
            monkeypatch.delenv(name, raising=False)


@pytest.fixture
async def fake() -> AsyncIterator[FakeSlack]:
    slack = FakeSlack()
    await slack.start()
    try:
        yield slack
    finally:
        await slack.stop()


@pytest.fixture
def ledger() -> list[tuple[str, dict[str, Any]]]:
    """Every real tool execution of the test agents."""
    return []


@pytest.fixture
def slack_agents(ledger: list[tuple[str, dict[str, Any]]]) -> list[Agent]:
    """The agents of the test bed (a test module may override this fixture)."""
    return build_agents(ledger)


@pytest.fixture
def slack_options() -> dict[str, Any]:
    """`SlackConfig` values of the test bed (a test module may override this fixture)."""
    return {}


@pytest.fixture
async def slack(
    fake: FakeSlack,
    tmp_path: Path,
    ledger: list[tuple[str, dict[str, Any]]],
    slack_agents: list[Agent],
    slack_options: dict[str, Any],
) -> AsyncIterator[SlackBed]:
    db_path = tmp_path / "signoff.db"
    store = SQLStore.sqlite(db_path)
    await store.migrate()
    clock = ManualClock()
    agents = slack_agents
    settings = Settings(
        database_url=f"sqlite+aiosqlite:///{db_path}",
        operator_token="slack-operator-0123456789",
        cookie_secret="slack-cookie-secret-0123456789abcdef",
        poll_seconds=0.02,
    )
    built = await build_service(
        settings,
        agents=agents,
        store=store,
        clock=clock,
        slack_config=slack_config(fake, **slack_options),
        # No spacing, and a 429's hold follows the manual clock like the outbox does.
        slack_limiter=ChannelLimiter(interval=0.0, monotonic=lambda: clock.now().timestamp()),
        outbox_policy=RetryPolicy(base_delay=5.0),
        pacing={},
        parts=Parts(listen=False, deadlines=False, wake_ups=False),
    )
    assert built.slack is not None
    test_client = TestClient(TestServer(built.app, host="127.0.0.1", port=0))
    await test_client.start_server()
    await built.start()
    try:
        yield SlackBed(
            fake,
            built.runtime,
            store,
            clock,
            built.worker,
            built.slack.bolt,
            test_client,
            agents,
            db_path,
            ledger,
        )
    finally:
        await test_client.close()
        # Let bolt's background listener tasks finish before the store closes.
        await asyncio.sleep(0.05)
        await built.stop(grace_seconds=5)
        await store.close()
