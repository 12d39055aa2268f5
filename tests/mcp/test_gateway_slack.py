"""Gateway calls decided on their Slack card: the official `mcp` SDK client calls
``/mcp/ops`` of a served signoff (`gatewaybed`) whose gateway cards go to the fake Slack;
the clicks and modals come back signed the way Slack signs them, through the real
slack-bolt, and the MCP client gets what became of its call."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import aiohttp
import httpx2
import pytest
from external_bed import External
from fake_slack import FakeSlack, selected, text_input
from gatewaybed import CALLER, COOKIE_SECRET, OPERATOR, ServedGateway, serve_gateway, text
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcpbed import FAKE, calls
from pydantic import SecretStr
from slackbed import buttons, slack_config, text_of

from adapters.slack import blocks
from bot.bootstrap import Parts, build_service
from bot.settings import ApiTokenSetting, Settings
from runtime import Actor, ConfigurationError, ManualClock

pytestmark = pytest.mark.timeout(120)

CHANNEL = "CGATEWAY"
APPROVER = "U1"
PRODUCTION = {"service": "api", "environment": "production"}


@pytest.fixture
async def fake() -> AsyncIterator[FakeSlack]:
    slack = FakeSlack()
    await slack.start()
    try:
        yield slack
    finally:
        await slack.stop()


@pytest.fixture
async def served(fake: FakeSlack, tmp_path: Path, state: Path) -> AsyncIterator[ServedGateway]:
    async with serve_gateway(
        tmp_path,
        state,
        approver=APPROVER,
        approvals={"platform": "slack", "channel": CHANNEL},
        slack_config=slack_config(fake),
    ) as found:
        yield found


@pytest.fixture
def slack(fake: FakeSlack, served: ServedGateway) -> External:
    return External(fake, served.service, served.clock, served.url, served.database, served.http)


async def test_allow_on_the_slack_card_returns_the_servers_result(
    served: ServedGateway, slack: External, state: Path
) -> None:
    async with served.client() as client:
        asking = asyncio.ensure_future(client.call_tool("deploy", PRODUCTION))
        card = await slack.card("deploy")
        shown = text_of(card)
        assert card.channel == CHANNEL
        assert "External agent · `ops.mcp`" in shown
        assert "production" in shown and f"<@{APPROVER}>" in shown
        assert calls(state) == []

        assert await slack.click(blocks.ACTION_ALLOW, card) == 200
        result = await asyncio.wait_for(asking, 60)

    assert not result.is_error, text(result)
    assert text(result) == "deployed api to production"
    assert [c["args"] for c in calls(state)] == [PRODUCTION]
    await slack.updated(card)
    assert buttons(card) == {}
    assert f"Approved by <@{APPROVER}>" in text_of(card)
    assert len(slack.cards("deploy")) == 1


async def test_deny_with_a_reason_on_the_slack_card_is_a_tool_error_with_it(
    served: ServedGateway, slack: External, state: Path
) -> None:
    async with served.client() as client:
        asking = asyncio.ensure_future(client.call_tool("deploy", PRODUCTION))
        card = await slack.card("deploy")
        before = len(slack.fake.called("views.open"))
        assert await slack.click(blocks.ACTION_DENY_REASON, card) == 200
        view = await slack.opened_view(before)
        status, answered = await slack.submit(view, {"reason": text_input("release freeze")})
        assert (status, answered) == (200, "")
        result = await asyncio.wait_for(asking, 60)

    assert result.is_error
    assert text(result) == "Not allowed: release freeze"
    assert calls(state) == []
    await slack.updated(card)
    assert "release freeze" in text_of(card)


async def test_an_edit_on_the_slack_card_runs_the_edited_arguments(
    served: ServedGateway, slack: External, state: Path
) -> None:
    async with served.client() as client:
        asking = asyncio.ensure_future(client.call_tool("deploy", PRODUCTION))
        card = await slack.card("deploy")
        before = len(slack.fake.called("views.open"))
        assert await slack.click(blocks.ACTION_EDIT, card) == 200
        view = await slack.opened_view(before)
        inputs = {b["label"]["text"]: b for b in view["blocks"] if b["type"] == "input"}
        assert set(inputs) == {"Environment"}  # only what the rule lets change
        block = inputs["Environment"]
        value = (
            selected("staging")
            if block["element"]["type"] == "static_select"
            else text_input("staging")
        )
        status, answered = await slack.submit(view, {block["block_id"]: value})
        assert (status, answered) == (200, "")
        result = await asyncio.wait_for(asking, 60)

    assert not result.is_error, text(result)
    assert text(result) == "deployed api to staging"
    assert [c["args"] for c in calls(state)] == [{"service": "api", "environment": "staging"}]
    [approval] = (await served.service.runtime.approval_page(viewer=Actor(id="svc-ci"))).items
    assert approval.arguments == {"service": "api", "environment": "staging"}
    assert approval.requested_arguments == PRODUCTION


async def test_a_session_grant_from_slack_runs_the_next_call_of_the_session_without_a_card(
    served: ServedGateway, slack: External, state: Path
) -> None:
    async with served.client(session="release-1") as client:
        asking = asyncio.ensure_future(client.call_tool("deploy", PRODUCTION))
        card = await slack.card("deploy")
        assert "Allow for the rest of this session" in text_of(card)
        assert await slack.click(blocks.ACTION_ALLOW_RUN, card) == 200
        first = await asyncio.wait_for(asking, 60)
        assert text(first) == "deployed api to production"

        # Another call of the tool in the same session: at once, no card.
        second = await asyncio.wait_for(
            client.call_tool("deploy", {"service": "db", "environment": "production"}), 60
        )
        assert not second.is_error, text(second)
        assert text(second) == "deployed db to production"
    assert [c["args"]["service"] for c in calls(state)] == ["api", "db"]
    await slack.settled()
    assert len(slack.cards("deploy")) == 1

    # Another session is not covered: it asks.
    async with served.client(session="release-2") as other:
        elsewhere = asyncio.ensure_future(
            other.call_tool("deploy", {"service": "web", "environment": "production"})
        )
        await slack.fake.wait_for(lambda: len(slack.cards("deploy")) == 2, "a second card")
        assert not elsewhere.done()
        elsewhere.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await elsewhere
    assert len(calls(state)) == 2
    [grant] = await served.service.runtime.grants(active=False)
    assert (grant.scope, grant.granted_by, grant.platform) == ("run", APPROVER, "slack")


AGENTS_FILE = """
[servers.infra]
command = "${{SIGNOFF_PYTHON}}"
args = [{fake}, "stdio"]
env = {{ FAKE_MCP_STATE = {state} }}

[agents.ops]
instructions = "Operate."
model = "examples.mcp:infra_model"
servers = ["infra"]

[agents.ops.rules."infra.deploy"]
permission = "ask"

[agents."ops.mcp"]
external = true
approvers = ["{approver}"]
approvals = {{ platform = "slack", channel = "{channel}" }}
"""


async def test_the_agents_file_sends_the_gateways_cards_to_slack(
    fake: FakeSlack, tmp_path: Path, state: Path
) -> None:
    agents = tmp_path / "agents.toml"
    agents.write_text(
        AGENTS_FILE.format(
            fake=json.dumps(str(FAKE)),
            state=json.dumps(str(state)),
            approver=APPROVER,
            channel=CHANNEL,
        ),
        encoding="utf-8",
    )
    database = tmp_path / "signoff.db"
    settings = Settings(
        database_url=f"sqlite+aiosqlite:///{database}",
        agents=agents,
        operator_token=SecretStr(OPERATOR),
        cookie_secret=SecretStr(COOKIE_SECRET),
        api_tokens=[ApiTokenSetting(token=SecretStr(CALLER), actor="svc-ci")],
        bind_host="127.0.0.1",
        port=0,
        poll_seconds=0.02,
    )
    clock = ManualClock(datetime.now(UTC))
    service = await build_service(
        settings,
        clock=clock,
        slack_config=slack_config(fake),
        pacing={},
        parts=Parts(deadlines=False, wake_ups=False, discord=False),
    )
    url = await service.start()
    try:
        async with aiohttp.ClientSession() as http:
            slack = External(fake, service, clock, url, database, http)
            headers = {"Authorization": f"Bearer {CALLER}", "Signoff-Session": "file-1"}
            async with (
                httpx2.AsyncClient(headers=headers, timeout=30.0, trust_env=False) as client_http,
                Client(streamable_http_client(url + "/mcp/ops", http_client=client_http)) as client,
            ):
                asking = asyncio.ensure_future(client.call_tool("deploy", PRODUCTION))
                card = await slack.card("deploy")
                assert card.channel == CHANNEL
                assert "External agent · `ops.mcp`" in text_of(card)
                assert await slack.click(blocks.ACTION_ALLOW, card) == 200
                result = await asyncio.wait_for(asking, 60)
            assert text(result) == "deployed api to production"
            assert [c["args"] for c in calls(state)] == [PRODUCTION]
    finally:
        await service.stop(grace_seconds=5)


async def test_a_gateway_agent_declared_with_rules_of_its_own_is_refused(
    tmp_path: Path, state: Path
) -> None:
    agents = tmp_path / "agents.toml"
    text_of_file = AGENTS_FILE.format(
        fake=json.dumps(str(FAKE)), state=json.dumps(str(state)), approver=APPROVER, channel="C1"
    )
    agents.write_text(
        text_of_file + '\n[agents."ops.mcp".rules.deploy]\npermission = "allow"\n',
        encoding="utf-8",
    )
    settings = Settings(
        database_url=f"sqlite+aiosqlite:///{tmp_path / 'signoff.db'}",
        agents=agents,
        operator_token=SecretStr(OPERATOR),
        cookie_secret=SecretStr(COOKIE_SECRET),
    )
    with pytest.raises(ConfigurationError, match="takes the rules of its source agent"):
        await build_service(settings, parts=Parts(listen=False))
