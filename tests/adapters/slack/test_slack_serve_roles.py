"""Slack Socket Mode with the roles split: a web service and a worker service (the real
`bot.serve.build_service`, each listening) on one SQLite file, against the fake Slack.

The web service holds the Socket Mode connection and stores the slash command's start
and the clicks; the worker service drives the run, posts the card and applies the click.
"""

from __future__ import annotations

import asyncio
import os
import urllib.parse
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from fake_slack import APP_TOKEN, BOT_TOKEN, FakeSlack, Message, click_payload, command_body
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


def settings_for(fake: FakeSlack, tmp_path: Path, role: str) -> Any:
    return load_settings(
        overrides={
            "database_url": f"sqlite+aiosqlite:///{tmp_path / 'signoff.db'}",
            "port": 0,
            "operator_token": "operator-token-0123456789",
            "cookie_secret": "roles-cookie-secret-0123456789abcdef0123",
            "slack_bot_token": BOT_TOKEN,
            "slack_api_base_url": f"{fake.url}/api",
            "slack_mode": "socket",
            "slack_app_token": APP_TOKEN,
            "poll_seconds": 0.05,  # SQLite: the worker finds the web's commits by polling
            "role": role,
        }
    )


@pytest.fixture
async def web_and_worker(fake: FakeSlack, tmp_path: Path) -> AsyncIterator[tuple[Service, Service]]:
    web = await build_service(settings_for(fake, tmp_path, "web"), worker_id="web-1")
    await web.start()
    try:
        worker = await build_service(settings_for(fake, tmp_path, "worker"), worker_id="worker-1")
        await worker.start()
        try:
            yield web, worker
        finally:
            await worker.stop(grace_seconds=2)
    finally:
        await web.stop(grace_seconds=2)


async def until(check: Callable[[], Awaitable[Any]], what: str) -> Any:
    """Read until `check` gives something (a commit of the worker is the signal)."""
    deadline = asyncio.get_running_loop().time() + 20
    while not (found := await check()):
        assert asyncio.get_running_loop().time() < deadline, f"never saw {what}"
        await asyncio.sleep(0.02)
    return found


def card_of(fake: FakeSlack, tool_name: str) -> Message | None:
    for message in fake.messages.values():
        if any(
            b.get("type") == "header" and tool_name in b["text"]["text"] for b in message.blocks
        ):
            return message
    return None


async def test_socket_mode_connects_on_the_web_role_and_the_worker_delivers(
    web_and_worker: tuple[Service, Service], fake: FakeSlack
) -> None:
    web, worker = web_and_worker
    await fake.wait_connected()
    # One connection: the web service's. The worker's own edge only posts.
    [opened] = fake.called("apps.connections.open")
    assert opened.token == APP_TOKEN
    async with aiohttp.ClientSession() as http:
        async with http.get(f"{worker.url}/readyz") as answer:
            assert (await answer.json())["role"] == "worker"
        async with http.get(f"{worker.url}/slack/events") as answer:
            assert answer.status == 404

    command = {
        k: urllib.parse.unquote_plus(v)
        for k, v in (item.split("=", 1) for item in command_body("refunds A1001").split("&"))
    }
    ack = await fake.envelope("slash_commands", command)
    assert "envelope_id" in ack
    card = await fake.wait_for(lambda: card_of(fake, "refund"), "the refund card")
    [run] = await web.runtime.list_runs()
    claimed = [e for e in await web.runtime.events(run.run_id) if e["kind"] == "run_claimed"]
    assert [e["data"]["worker"] for e in claimed] == ["worker-1"]

    value = buttons(card)[blocks.ACTION_ALLOW]
    click = click_payload(blocks.ACTION_ALLOW, value, message={"ts": card.ts})
    ack = await fake.envelope("interactive", click)
    assert ack["envelope_id"]

    async def finished() -> Any:
        found = await worker.runtime.get(run.run_id)
        return found if found.status.finished else None

    done = await until(finished, "the run to finish")
    assert done.status is RunStatus.DONE
    await fake.wait_for(lambda: card.updates or None, "the card update")
    assert "Approved by <@U1>" in text_of(card)
    claimed = [e for e in await web.runtime.events(run.run_id) if e["kind"] == "run_claimed"]
    assert [e["data"]["worker"] for e in claimed] == ["worker-1", "worker-1"]
