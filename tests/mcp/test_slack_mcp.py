"""An MCP tool's approval from Slack: the real Slack edge (slack-bolt, slack_sdk) against
the fake Slack of the Slack tests, with the tool on a real stdio MCP server."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp.test_utils import TestClient, TestServer
from fake_slack import FakeSlack
from mcpbed import calls, stdio_server
from slackbed import SlackBed, buttons, slack_config, text_of
from testkit import echo_model

from adapters.mcp import Binding
from adapters.mcp.hub import McpHub
from adapters.slack import blocks
from bot.bootstrap import Parts, build_service
from bot.settings import Settings
from runtime import Agent, ManualClock, RunStatus
from runtime.store.sql import SQLStore

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
async def bed(tmp_path: Path, state: Path) -> AsyncIterator[SlackBed]:
    async with contextlib.AsyncExitStack() as stack:
        fake = FakeSlack()
        await fake.start()
        stack.push_async_callback(fake.stop)
        deploy = ("deploy", {"service": "api", "environment": "production"})
        ops = Agent("ops", "Operate.", echo_model(deploy))
        hub = McpHub([stdio_server(state)], [Binding(ops, ("infra",))])
        await hub.start()
        stack.push_async_callback(hub.stop)
        db_path = tmp_path / "signoff.db"
        store = SQLStore.sqlite(db_path)
        stack.push_async_callback(store.close)
        await store.migrate()
        clock = ManualClock()
        settings = Settings.model_validate(
            {
                "database_url": f"sqlite+aiosqlite:///{db_path}",
                "operator_token": "mcp-slack-operator-0123456789",
                "cookie_secret": "k" * 32,
                "poll_seconds": 0.02,
            }
        )
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

        async def stop_service() -> None:
            await asyncio.sleep(0.05)  # bolt's background listeners
            await service.stop(grace_seconds=5)

        stack.push_async_callback(stop_service)  # after the test client closes
        test_client = TestClient(TestServer(service.app, host="127.0.0.1", port=0))
        await test_client.start_server()
        stack.push_async_callback(test_client.close)
        await service.start()
        runtime, worker, bolt = service.runtime, service.worker, service.slack.bolt
        yield SlackBed(fake, runtime, store, clock, worker, bolt, test_client, [ops], tmp_path)


async def test_an_mcp_call_is_approved_with_a_slack_button(bed: SlackBed, state: Path) -> None:
    reply = await bed.command("ops deploy the api")
    assert reply.status == 200
    card = await bed.card("deploy")
    shown = text_of(card)
    assert "deploy" in shown and "production" in shown
    run = await bed.latest_run()
    [entry] = (await bed.runtime.get(run.run_id)).pending
    assert calls(state) == []

    reply = await bed.click(blocks.ACTION_ALLOW, buttons(card)[blocks.ACTION_ALLOW], card=card)
    assert reply.status == 200

    done = await bed.finished(run.run_id)
    assert done.status is RunStatus.DONE
    assert done.text == "Finished. deployed api to production"
    [call] = calls(state)
    assert call["meta"]["signoff/execution_key"] == entry.execution_key
    await bed.updated(card)
    assert "Approved by <@U1>" in text_of(card)
