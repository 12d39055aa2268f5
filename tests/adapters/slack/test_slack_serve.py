"""`signoff serve` with Slack: HTTP mode at ``/slack/events``, Socket Mode, and settings.

These build the real service (`bot.serve.build_service`) on a SQLite file with the bundled
example agents, pointed at the fake Slack.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from fake_slack import (
    APP_TOKEN,
    BOT_TOKEN,
    SIGNING_SECRET,
    FakeSlack,
    Message,
    click_payload,
    command_body,
    interaction_body,
    signed_headers,
)
from slackbed import buttons, slack_config, text_of

from adapters.slack import blocks, build_slack_app
from bot.serve import Service, build_service
from bot.settings import load_settings
from runtime import ConfigurationError, RunStatus, Runtime
from runtime.store.memory import MemoryStore


@pytest.fixture(autouse=True)
def no_signoff_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.upper().startswith("SIGNOFF_"):
            monkeypatch.delenv(name)


def settings_for(fake: FakeSlack, tmp_path: Path, **slack: Any) -> Any:
    return load_settings(
        overrides={
            "database_url": f"sqlite+aiosqlite:///{tmp_path / 'signoff.db'}",
            "port": 0,
            "operator_token": "operator-token-0123456789",
            "slack_bot_token": BOT_TOKEN,
            "slack_api_base_url": f"{fake.url}/api",
            **slack,
        }
    )


@pytest.fixture
async def served(
    fake: FakeSlack, tmp_path: Path, request: pytest.FixtureRequest
) -> AsyncIterator[Service]:
    mode = request.param
    extra = (
        {"slack_mode": "http", "slack_signing_secret": SIGNING_SECRET}
        if mode == "http"
        else {"slack_mode": "socket", "slack_app_token": APP_TOKEN}
    )
    service = await build_service(settings_for(fake, tmp_path, **extra))
    await service.start()
    try:
        yield service
    finally:
        await service.stop(grace_seconds=2)


async def until(produce: Any, what: str) -> Any:
    deadline = time.monotonic() + 10.0
    while True:
        value = produce()
        if asyncio.iscoroutine(value):
            value = await value
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


def card_of(fake: FakeSlack, tool_name: str) -> Message | None:
    for message in fake.messages.values():
        if any(
            b.get("type") == "header" and tool_name in b["text"]["text"] for b in message.blocks
        ):
            return message
    return None


@pytest.mark.parametrize("served", ["http"], indirect=True)
async def test_serve_in_http_mode(served: Service, fake: FakeSlack) -> None:
    assert served.slack is not None and "slack" in served.notifiers
    url = f"{served.url}/slack/events"
    async with aiohttp.ClientSession() as http:
        body = command_body("refunds Order A1001 was charged twice")
        async with http.post(url, data=body, headers=signed_headers(body)) as response:
            assert response.status == 200
        card = await until(lambda: card_of(fake, "refund"), "the refund card")
        assert "A1001" in text_of(card) and "249.0" in text_of(card)
        value = buttons(card)[blocks.ACTION_ALLOW]
        message = {"ts": card.ts, "thread_ts": card.thread_ts}
        body = interaction_body(click_payload(blocks.ACTION_ALLOW, value, message=message))
        async with http.post(url, data=body, headers=signed_headers(body)) as response:
            assert response.status == 200
        forged = interaction_body(click_payload(blocks.ACTION_DENY, value, message=message))
        headers = signed_headers(forged, secret="wrong")
        async with http.post(url, data=forged, headers=headers) as response:
            assert response.status == 401
    await until(lambda: card.updates, "the card update")
    assert "Approved by <@U1>" in text_of(card)
    [run] = await served.runtime.list_runs()
    done = await until(lambda: _finished(served.runtime, run.run_id), "the run to finish")
    assert done.status is RunStatus.DONE
    await until(
        lambda: any(
            m.thread_ts == card.thread_ts and "Refunded" in m.text for m in fake.messages.values()
        ),
        "the final answer in the thread",
    )


async def _finished(runtime: Runtime, run_id: str) -> Any:
    result = await runtime.get(run_id)
    return result if result.status.finished else None


@pytest.mark.parametrize("served", ["socket"], indirect=True)
async def test_serve_in_socket_mode(served: Service, fake: FakeSlack) -> None:
    await fake.wait_connected()
    [opened] = fake.called("apps.connections.open")
    assert opened.token == APP_TOKEN
    command = dict(item.split("=", 1) for item in command_body("refunds A1001 twice").split("&"))
    import urllib.parse

    command = {k: urllib.parse.unquote_plus(v) for k, v in command.items()}
    ack = await fake.envelope("slash_commands", command)
    assert "envelope_id" in ack
    card = await until(lambda: card_of(fake, "refund"), "the refund card")
    value = buttons(card)[blocks.ACTION_ALLOW]

    # The wrong user first: refused ephemerally, nothing changes.
    wrong = click_payload(blocks.ACTION_ALLOW, value, user="U2", message={"ts": card.ts})
    await fake.envelope("interactive", wrong)
    await until(lambda: fake.called("chat.postEphemeral"), "the refusal")
    [run] = await served.runtime.list_runs()
    assert (await served.runtime.get(run.run_id)).status is RunStatus.AWAITING

    click = click_payload(blocks.ACTION_ALLOW, value, message={"ts": card.ts})
    ack = await fake.envelope("interactive", click)
    assert ack["envelope_id"]
    done = await until(lambda: _finished(served.runtime, run.run_id), "the run to finish")
    assert done.status is RunStatus.DONE
    await until(lambda: card.updates, "the card update")
    assert "Approved by <@U1>" in text_of(card)


async def test_socket_mode_with_a_bad_app_token_fails_at_start(
    fake: FakeSlack, tmp_path: Path
) -> None:
    settings = settings_for(fake, tmp_path, slack_mode="socket", slack_app_token="xapp-wrong")
    service = await build_service(settings)
    with pytest.raises(ConfigurationError, match="SIGNOFF_SLACK_APP_TOKEN"):
        await service.start()
    await service.store.close()  # nothing else was started


def test_slack_settings_are_validated(fake: FakeSlack, tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="SIGNOFF_SLACK_SIGNING_SECRET"):
        settings_for(fake, tmp_path, slack_mode="http")
    with pytest.raises(ConfigurationError, match="SIGNOFF_SLACK_APP_TOKEN"):
        settings_for(fake, tmp_path, slack_mode="socket")
    with pytest.raises(ConfigurationError, match="SIGNOFF_SLACK_COMMAND"):
        settings_for(fake, tmp_path, slack_command="signoff")
    settings = settings_for(fake, tmp_path, slack_mode="HTTP", slack_signing_secret=SIGNING_SECRET)
    assert settings.slack_mode == "http"
    assert settings.slack_api_base_url == f"{fake.url}/api/"
    assert BOT_TOKEN not in repr(settings)  # secrets stay secret


async def test_unknown_default_agent_is_a_configuration_error(
    fake: FakeSlack, tmp_path: Path
) -> None:
    settings = settings_for(
        fake,
        tmp_path,
        slack_mode="http",
        slack_signing_secret=SIGNING_SECRET,
        slack_default_agent="nope",
    )
    with pytest.raises(ConfigurationError, match="SIGNOFF_SLACK_DEFAULT_AGENT"):
        await build_service(settings)


def test_bolt_never_reads_slack_environment_variables(
    fake: FakeSlack, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SLACK_CLIENT_ID", "111.222")
    monkeypatch.setenv("SLACK_CLIENT_SECRET", "stray-secret")
    monkeypatch.setenv("SLACK_SIGNING_SECRET", "stray-signing-secret")
    monkeypatch.setenv("SLACK_BOT_TOKEN", "xoxb-stray")
    runtime = Runtime(MemoryStore(), [])
    app = build_slack_app(runtime, slack_config(fake), lambda: None)
    assert app.oauth_flow is None  # OAuth was not turned on
    assert app.client.token == BOT_TOKEN
    assert app.client.base_url == f"{fake.url}/api/"
    assert os.environ["SLACK_CLIENT_ID"] == "111.222"  # put back afterwards
