"""Fixtures of the Slack edge tests: the fake Slack and a running signoff Slack edge.

`slack` starts: the fake Slack Web API (127.0.0.1, port 0), a `SQLStore` on a fresh SQLite
file (migrated), a `Runtime` with a `ManualClock`, a real `Worker` and the real outbox
loop (`RoutingNotifier` -> `SlackNotifier`) in the background, and the bolt app mounted at
``POST /slack/events`` on an aiohttp test server.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from fake_slack import FakeSlack
from slackbed import SlackBed, build_agents, slack_config

from adapters.slack import (
    ChannelLimiter,
    SlackNotifier,
    add_slack_routes,
    build_client,
    build_slack_app,
)
from runtime import Agent, ManualClock, Runtime
from runtime.outbox import RetryPolicy, RoutingNotifier
from runtime.store.sql import SQLStore
from runtime.worker import Worker, outbox_loop


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
    runtime = Runtime(store, agents, clock=clock)
    worker = Worker(runtime, poll_seconds=0.05)
    config = slack_config(fake, **slack_options)
    client = build_client(config)
    bolt = build_slack_app(runtime, config, worker.wake, client=client)
    notifier = RoutingNotifier(
        {
            "slack": SlackNotifier(
                client,
                groups=config.approver_groups,
                # No spacing, and a 429's hold follows the manual clock like the outbox does.
                limiter=ChannelLimiter(interval=0.0, monotonic=lambda: clock.now().timestamp()),
            )
        }
    )
    stop = asyncio.Event()
    loops = [
        asyncio.create_task(worker.run(stop)),
        asyncio.create_task(
            outbox_loop(runtime, notifier, stop, seconds=0.02, policy=RetryPolicy(base_delay=5.0))
        ),
    ]
    app = web.Application()
    add_slack_routes(app, bolt, signing_secret=config.signing_secret)
    test_client = TestClient(TestServer(app, host="127.0.0.1", port=0))
    await test_client.start_server()
    try:
        yield SlackBed(
            fake, runtime, store, clock, worker, bolt, test_client, agents, db_path, ledger
        )
    finally:
        await test_client.close()
        stop.set()
        for task in loops:
            await task
        await worker.drain(5)
        # Let bolt's background listener tasks finish before the store closes.
        await asyncio.sleep(0.05)
        await store.close()
