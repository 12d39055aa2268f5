"""An MCP server's elicitation answered from Slack: the real Slack edge (slack-bolt,
slack_sdk) against the fake Slack of the Slack tests, with ``restart`` on the SDK's server
over stdio asking for a change ticket while its call waits."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer
from fake_slack import FakeSlack, text_input
from mcpbed import calls, stdio_server
from slackbed import SlackBed, buttons, slack_config, text_of
from testkit import echo_model

from adapters.mcp import Binding, ToolKnobs
from adapters.mcp.hub import McpHub
from adapters.slack import blocks
from bot.bootstrap import Parts, build_service
from bot.settings import Settings
from runtime import Agent, ManualClock, Permission, RunStatus
from runtime.store.sql import SQLStore

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
async def bed(tmp_path: Path, state: Path) -> AsyncIterator[SlackBed]:
    async with contextlib.AsyncExitStack() as stack:
        fake = FakeSlack()
        await fake.start()
        stack.push_async_callback(fake.stop)
        ops = Agent("ops", "Operate.", echo_model(("restart", {"service": "api"})))
        rule = ToolKnobs("infra.restart", where="rule", permission=Permission.ALLOW)
        server = stdio_server(state, env={"FAKE_MCP_INPUT": "1"}, elicitation=True)
        hub = McpHub([server], [Binding(ops, ("infra",), (rule,))])
        await hub.start()
        stack.push_async_callback(hub.stop)
        db_path = tmp_path / "signoff.db"
        store = SQLStore.sqlite(db_path)
        stack.push_async_callback(store.close)
        await store.migrate()
        settings = Settings.model_validate(
            {
                "database_url": f"sqlite+aiosqlite:///{db_path}",
                "operator_token": "mcp-slack-operator-0123456789",
                "cookie_secret": "k" * 32,
                "poll_seconds": 0.02,
            }
        )
        clock = ManualClock()
        service = await build_service(
            settings,
            agents=[ops],
            store=store,
            clock=clock,
            slack_config=slack_config(fake),
            pacing={},
            parts=Parts(listen=False, deadlines=False, wake_ups=False),
        )
        assert service.slack is not None
        hub.attach(service.runtime)

        async def stop_service() -> None:
            await asyncio.sleep(0.05)  # bolt's background listeners
            await service.stop(grace_seconds=5)

        stack.push_async_callback(stop_service)
        test_client = TestClient(TestServer(service.app, host="127.0.0.1", port=0))
        await test_client.start_server()
        stack.push_async_callback(test_client.close)
        await service.start()
        runtime, worker, bolt = service.runtime, service.worker, service.slack.bolt
        yield SlackBed(fake, runtime, store, clock, worker, bolt, test_client, [ops], tmp_path)


def restarts(state: Path) -> list[dict[str, Any]]:
    return [c["args"] for c in calls(state) if c["tool"] == "restart"]


def input_ids(view: dict[str, Any]) -> dict[str, str]:
    return {b["label"]["text"]: b["block_id"] for b in view["blocks"] if b.get("type") == "input"}


async def test_a_slack_modal_answers_the_server(bed: SlackBed, state: Path) -> None:
    await bed.command("ops restart the api")
    card = await bed.card("restart")
    assert "Restarting api: which change ticket?" in text_of(card)
    values = buttons(card)
    assert blocks.ACTION_ANSWER in values and blocks.ACTION_DENY in values

    # A stranger gets no form.
    await bed.click(blocks.ACTION_ANSWER, values[blocks.ACTION_ANSWER], card=card, user="U9")
    await bed.ephemeral("U9")
    assert bed.fake.called("views.open") == []

    await bed.click(blocks.ACTION_ANSWER, values[blocks.ACTION_ANSWER], card=card)
    [opened] = await bed.until(lambda: bed.fake.called("views.open"), "views.open")
    view = opened.args["view"]
    ids = input_ids(view)
    assert set(ids) == {"Ticket", "Note"}

    reply = await bed.submit(view, {ids["Ticket"]: text_input("0")})
    body = reply.json()
    assert body["response_action"] == "errors" and list(body["errors"]) == [ids["Ticket"]]
    assert restarts(state) == []  # nothing went to the server

    reply = await bed.submit(view, {ids["Ticket"]: text_input("42")}, user="U9")
    assert "Not recorded" in json.dumps(reply.json())
    assert restarts(state) == []

    reply = await bed.submit(view, {ids["Ticket"]: text_input("42"), ids["Note"]: text_input("")})
    assert reply.status == 200
    run = next(r for r in await bed.runtime.list_runs() if r.agent == "ops")
    done = await bed.finished(run.run_id)
    assert done.status is RunStatus.DONE
    assert "restarted api under change 42" in (done.text or "")
    assert restarts(state)[0]["action"] == "accept"
    assert restarts(state)[0]["data"]["ticket"] == 42


async def test_a_slack_deny_declines(bed: SlackBed, state: Path) -> None:
    await bed.command("ops restart the api")
    card = await bed.card("restart")
    await bed.click(blocks.ACTION_DENY, buttons(card)[blocks.ACTION_DENY], card=card)
    run = next(r for r in await bed.runtime.list_runs() if r.agent == "ops")
    done = await bed.finished(run.run_id)
    assert "did not restart api: decline" in (done.text or "")
    assert restarts(state) == [{"service": "api", "action": "decline"}]
