"""Gateway calls decided on their Slack card: the official `mcp` SDK client calls
``/mcp/ops`` of a served signoff (`gatewaybed`) whose gateway cards go to the fake Slack;
the clicks and modals come back signed the way Slack signs them, through the real
slack-bolt, and the MCP client gets what became of its call."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from external_bed import External
from fake_slack import FakeSlack, selected, text_input
from gatewaybed import ServedGateway, serve_gateway, text
from mcpbed import calls
from slackbed import buttons, slack_config, text_of

from adapters.slack import blocks
from runtime import Actor

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
