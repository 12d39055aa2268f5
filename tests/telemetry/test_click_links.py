"""Chat clicks are stored before they are acknowledged and applied later by the worker:
their waits (and the stretch each resumes) still link to the span the click arrived in.

Real `signoff serve` services in this process, tracing as the ``OTEL_*`` variables say to
a collector on loopback: Slack over HTTP (real slack-bolt, the fake Slack) and Discord
(the fake gateway). Socket Mode acknowledgements are timed in ``/metrics``.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
import urllib.parse
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

sys.path[:0] = [
    str(Path(__file__).resolve().parents[1] / "adapters" / name) for name in ("slack", "discord")
]

from discord_harness import ALICE, ROLES  # noqa: E402
from fake_discord import FakeDiscord  # noqa: E402
from fake_slack import (  # noqa: E402
    FakeSlack,
    click_payload,
    command_body,
    interaction_body,
    signed_headers,
)
from metrics_kit import total  # noqa: E402
from slackbed import buttons  # noqa: E402

from adapters.slack import blocks  # noqa: E402
from bot.serve import Service, build_service  # noqa: E402
from bot.settings import load_settings  # noqa: E402
from runtime import RunStatus  # noqa: E402
from tests.telemetry.test_serve_traces import Collector, Exported  # noqa: E402

pytestmark = pytest.mark.timeout(90)

BOT_TOKEN = "xoxb-test-bot-token"
APP_TOKEN = "xapp-test-app-token"
SIGNING_SECRET = "test-signing-secret-0123456789"
SERVER = 2  # SPAN_KIND_SERVER in OTLP


@pytest.fixture(autouse=True)
def environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        upper = name.upper()
        if upper.startswith(("SIGNOFF_", "OTEL_", "SLACK_")) or upper.endswith("_PROXY"):
            monkeypatch.delenv(name)


@pytest.fixture
async def collector(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Collector]:
    """A loopback OTLP collector the services of the test trace to."""
    found = Collector()
    app = web.Application()
    app.router.add_post("/v1/traces", found.receive)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"http://127.0.0.1:{runner.addresses[0][1]}")
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "50")
    try:
        yield found
    finally:
        await runner.cleanup()


@pytest.fixture
async def slack() -> AsyncIterator[FakeSlack]:
    fake = FakeSlack()
    await fake.start()
    try:
        yield fake
    finally:
        await fake.stop()


@pytest.fixture
async def discord() -> AsyncIterator[FakeDiscord]:
    fake = FakeDiscord(roles=ROLES)
    await fake.start()
    try:
        yield fake
    finally:
        await fake.close()


async def until(check: Callable[[], Awaitable[object] | object], what: str) -> Any:
    deadline = time.monotonic() + 20
    while True:
        value = check()
        if isinstance(value, Awaitable):
            value = await value
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


async def done(service: Service) -> None:
    [run] = await service.runtime.list_runs()

    async def finished() -> bool:
        return (await service.runtime.get(run.run_id)).status is RunStatus.DONE

    await until(finished, "the run to finish")


async def acks(exposition: Awaitable[str], count: int = 1) -> bool:
    found = total(await exposition, "signoff_click_ack_seconds_count", edge="slack_socket")
    return bool(found >= count)


def linked(span: Exported, to: Exported) -> bool:
    return (to.trace_id, to.span_id) in span.links


def slack_settings(fake: FakeSlack, tmp_path: Path, **mode: Any) -> Any:
    return load_settings(
        overrides={
            "database_url": f"sqlite+aiosqlite:///{tmp_path / 'signoff.db'}",
            "port": 0,
            "operator_token": "operator-token-0123456789",
            "slack_bot_token": BOT_TOKEN,
            "slack_api_base_url": f"{fake.url}/api",
            **mode,
        }
    )


async def test_a_slack_click_over_http_links_its_wait_to_its_request(
    collector: Collector, slack: FakeSlack, tmp_path: Path
) -> None:
    settings = slack_settings(
        slack, tmp_path, slack_mode="http", slack_signing_secret=SIGNING_SECRET
    )
    service = await build_service(settings)
    await service.start()
    try:
        url = f"{service.url}/slack/events"
        async with aiohttp.ClientSession() as http:
            body = command_body("refunds Order A1001 was charged twice")
            async with http.post(url, data=body, headers=signed_headers(body)) as response:
                assert response.status == 200
            [card] = await until(slack.cards, "the refund card")
            value = buttons(card)[blocks.ACTION_ALLOW]
            message = {"ts": card.ts, "thread_ts": card.thread_ts}
            body = interaction_body(click_payload(blocks.ACTION_ALLOW, value, message=message))
            async with http.post(url, data=body, headers=signed_headers(body)) as response:
                assert response.status == 200
        await done(service)
    finally:
        await service.stop(grace_seconds=2)  # sends the buffered spans
    await collector.until("await_decision refund", "POST /slack/events")
    [wait] = collector.named("await_decision refund")
    assert wait.attributes["signoff.edge"] == "slack"
    requests = collector.named("POST /slack/events")
    assert all(r.kind == SERVER for r in requests) and len(requests) == 2
    [click] = [r for r in requests if linked(wait, r)]
    # The click's request is not the one that started the run (the slash command).
    [start] = collector.named("start_run refunds")
    assert start.parent != click.span_id and start.trace_id == wait.trace_id
    # The stretch the click resumed (the first one links to the slash command's request).
    [resumed] = [s for s in collector.named("invoke_agent refunds") if linked(s, click)]
    assert resumed.attributes["signoff.run.status"] == "done"


async def test_a_discord_click_links_its_wait_to_its_server_span(
    collector: Collector, discord: FakeDiscord, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SIGNOFF_TEST_LEDGER", str(tmp_path / "ledger.jsonl"))
    settings = load_settings(
        overrides={
            "database_url": f"sqlite+aiosqlite:///{tmp_path / 'serve.db'}",
            "app": "tests.e2e.serve_app:agents",
            "port": 0,
            "operator_token": "discord-trace-token-0123456789",
            "discord_bot_token": "fake-bot-token",
            "discord_api_base_url": discord.api_base_url,
            "discord_gateway_url": discord.gateway_url,
            "discord_guild_ready_timeout": 0.1,
        }
    )
    service = await build_service(settings)
    await service.start()
    try:
        started = await discord.interact(
            discord.slash(ALICE, "run", agent="payments", prompt="pay")
        )
        await discord.answered(started)
        posted = await discord.wait_for(lambda: (discord.cards() or [None])[-1], what="the card")
        await discord.answered(await discord.interact(discord.click(ALICE, posted, "Allow")))
        await done(service)
    finally:
        await service.stop(grace_seconds=2)
    await collector.until("await_decision transfer", "click discord")
    [wait] = collector.named("await_decision transfer")
    assert wait.attributes["signoff.edge"] == "discord"
    [click] = collector.named("click discord")
    assert click.kind == SERVER and click.parent == ""
    assert click.attributes["signoff.click.stored"] is True
    assert linked(wait, click)
    [resumed] = [s for s in collector.named("invoke_agent payments") if linked(s, click)]
    assert resumed.attributes["signoff.run.status"] == "done"


async def test_socket_mode_acknowledgements_are_timed(slack: FakeSlack, tmp_path: Path) -> None:
    settings = slack_settings(slack, tmp_path, slack_mode="socket", slack_app_token=APP_TOKEN)
    service = await build_service(settings)
    await service.start()

    async def scraped() -> str:
        async with aiohttp.ClientSession() as http, http.get(f"{service.url}/metrics") as got:
            return await got.text()

    try:
        await slack.wait_connected()
        command = {
            key: urllib.parse.unquote_plus(value)
            for key, value in (
                item.split("=", 1) for item in command_body("refunds A1001 twice").split("&")
            )
        }
        assert "envelope_id" in await slack.envelope("slash_commands", command)
        [card] = await until(slack.cards, "the refund card")
        await until(lambda: acks(scraped()), "the command's acknowledgement timed")
        assert total(await scraped(), "signoff_click_ack_seconds_count", edge="slack_socket") == 1
        value = buttons(card)[blocks.ACTION_ALLOW]
        click = click_payload(blocks.ACTION_ALLOW, value, message={"ts": card.ts})
        assert (await slack.envelope("interactive", click))["envelope_id"]
        await done(service)
        await until(lambda: acks(scraped(), 2), "the click's acknowledgement timed")
        exposition = await scraped()
    finally:
        await service.stop(grace_seconds=2)
    # The slash command and the click, each acknowledged on the websocket.
    assert total(exposition, "signoff_click_ack_seconds_count", edge="slack_socket") == 2
    assert total(exposition, "signoff_click_ack_seconds_count", edge="slack") == 0
