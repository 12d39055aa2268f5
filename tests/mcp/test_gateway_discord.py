"""Gateway calls decided on their Discord card: the official `mcp` SDK client calls
``/mcp/ops`` of a served signoff (`gatewaybed`) whose gateway cards go to the fake
Discord, where the real discord.py bot takes the clicks and modals; the MCP client gets
what became of its call."""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from gatewaybed import ServedGateway, serve_gateway, text
from mcpbed import calls
from testkit import ROOT

sys.path.insert(0, str(ROOT / "tests" / "adapters" / "discord"))

from discord_harness import ALICE, ROLES
from external_harness import field_of, labels
from fake_discord import CHANNEL_ID, GUILD_ID, TOKEN, FakeDiscord

from adapters.discord import configure_endpoints

pytestmark = pytest.mark.timeout(120)

PRODUCTION = {"service": "api", "environment": "production"}
RUN_GRANT = "Allow for the rest of this session"


@pytest.fixture
async def fake() -> AsyncIterator[FakeDiscord]:
    server = FakeDiscord(roles=ROLES)
    await server.start()
    try:
        yield server
    finally:
        await server.close()


@pytest.fixture
async def served(fake: FakeDiscord, tmp_path: Path, state: Path) -> AsyncIterator[ServedGateway]:
    # discord.py's endpoints are process-wide: put back what other tests expect.
    previous = configure_endpoints(fake.api_base_url, fake.gateway_url)
    try:
        async with serve_gateway(
            tmp_path,
            state,
            approver=str(ALICE.id),
            approvals={"platform": "discord", "channel": str(CHANNEL_ID)},
            settings={
                "discord_bot_token": TOKEN,
                "discord_api_base_url": fake.api_base_url,
                "discord_gateway_url": fake.gateway_url,
                "discord_sync": "guild",
                "discord_guild_id": GUILD_ID,
                "discord_guild_ready_timeout": 0.01,
                "discord_ready_timeout": 10,
            },
        ) as found:
            yield found
    finally:
        configure_endpoints(*previous)


async def card(fake: FakeDiscord, number: int = 1) -> dict[str, Any]:
    """The `number`th card posted to the channel, once posted."""
    await fake.wait_for(lambda: len(fake.cards()) >= number, seconds=30, what=f"card {number}")
    return fake.cards()[number - 1]


async def outcome(fake: FakeDiscord, posted: dict[str, Any]) -> str:
    """The card's outcome, once it was edited to show it."""

    def edited() -> str | None:
        fields = fake.messages[posted["id"]]["embeds"][0].get("fields", [])
        return next((str(f["value"]) for f in fields if f["name"] == "Outcome"), None)

    found: str = await fake.wait_for(edited, seconds=30, what="the card's outcome")
    return found


async def click(fake: FakeDiscord, posted: dict[str, Any], label: str) -> Any:
    record = await fake.interact(fake.click(ALICE, posted, label))
    await fake.answered(record)
    return record


async def test_allow_on_the_discord_card_returns_the_servers_result(
    served: ServedGateway, fake: FakeDiscord, state: Path
) -> None:
    async with served.client() as client:
        asking = asyncio.ensure_future(client.call_tool("deploy", PRODUCTION))
        posted = await card(fake)
        assert field_of(posted, "Agent") == "External agent · ops.mcp"
        assert calls(state) == []
        await click(fake, posted, "Allow")
        result = await asyncio.wait_for(asking, 60)

    assert not result.is_error, text(result)
    assert text(result) == "deployed api to production"
    assert [c["args"] for c in calls(state)] == [PRODUCTION]
    assert (await outcome(fake, posted)).startswith(f"✅ Allowed by <@{ALICE.id}>")
    assert len(fake.cards()) == 1


async def test_deny_with_a_reason_on_the_discord_card_is_a_tool_error_with_it(
    served: ServedGateway, fake: FakeDiscord, state: Path
) -> None:
    async with served.client() as client:
        asking = asyncio.ensure_future(client.call_tool("deploy", PRODUCTION))
        posted = await card(fake)
        opened = await click(fake, posted, "Deny with reason")
        assert opened.modal is not None
        answer = await fake.interact(fake.submit(ALICE, opened.modal, {"reason": "on call is out"}))
        await fake.answered(answer)
        result = await asyncio.wait_for(asking, 60)

    assert result.is_error
    assert text(result) == "Not allowed: on call is out"
    assert calls(state) == []
    assert "Reason: on call is out" in await outcome(fake, posted)


async def test_an_edit_on_the_discord_card_runs_the_edited_arguments(
    served: ServedGateway, fake: FakeDiscord, state: Path
) -> None:
    async with served.client() as client:
        asking = asyncio.ensure_future(client.call_tool("deploy", PRODUCTION))
        posted = await card(fake)
        opened = await click(fake, posted, "Allow with changes")
        assert opened.modal is not None
        shown = [c["custom_id"] for row in opened.modal["components"] for c in row["components"]]
        assert shown == ["environment"]  # only what the rule lets change
        answer = await fake.interact(fake.submit(ALICE, opened.modal, {"environment": "staging"}))
        await fake.answered(answer)
        result = await asyncio.wait_for(asking, 60)

    assert not result.is_error, text(result)
    assert text(result) == "deployed api to staging"
    assert [c["args"] for c in calls(state)] == [{"service": "api", "environment": "staging"}]
    assert 'Changed: environment "production" → "staging"' in await outcome(fake, posted)


async def test_a_session_grant_from_discord_runs_the_next_call_of_the_session_at_once(
    served: ServedGateway, fake: FakeDiscord, state: Path
) -> None:
    async with served.client(session="release-9") as client:
        asking = asyncio.ensure_future(client.call_tool("deploy", PRODUCTION))
        posted = await card(fake)
        assert RUN_GRANT in labels(posted)
        await click(fake, posted, RUN_GRANT)
        assert text(await asyncio.wait_for(asking, 60)) == "deployed api to production"

        second = await asyncio.wait_for(
            client.call_tool("deploy", {"service": "db", "environment": "production"}), 60
        )
        assert not second.is_error, text(second)
        assert text(second) == "deployed db to production"
    assert [c["args"]["service"] for c in calls(state)] == ["api", "db"]
    assert len(fake.cards()) == 1  # no second card

    async with served.client(session="release-10") as other:
        elsewhere = asyncio.ensure_future(
            other.call_tool("deploy", {"service": "web", "environment": "production"})
        )
        await card(fake, 2)  # another session asks
        elsewhere.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await elsewhere
    assert len(calls(state)) == 2
