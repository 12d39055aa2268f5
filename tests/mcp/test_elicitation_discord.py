"""An MCP server's elicitation answered from Discord: the real discord.py bot against the
fake Discord of the Discord tests, with ``restart`` on the SDK's server over stdio asking
for a change ticket while its call waits."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from mcpbed import calls, stdio_server, until
from testkit import ROOT, echo_model

sys.path.insert(0, str(ROOT / "tests" / "adapters" / "discord"))

from discord_harness import ALICE, BOB, ROLES, Harness
from fake_discord import FakeDiscord

from adapters.discord import configure_endpoints
from adapters.mcp import Binding, ToolKnobs
from adapters.mcp.hub import McpHub
from runtime import Agent, ManualClock, Permission, RunStatus
from runtime.store.sql import SQLStore

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
async def harness(tmp_path: Path, state: Path) -> AsyncIterator[tuple[Harness, McpHub]]:
    fake = FakeDiscord(roles=ROLES)
    await fake.start()
    path = tmp_path / "signoff.db"
    store = SQLStore.sqlite(path)
    await store.migrate()
    previous = configure_endpoints(fake.api_base_url, fake.gateway_url)
    ops = Agent("ops", "Operate.", echo_model(("restart", {"service": "api"})))
    rule = ToolKnobs("infra.restart", where="rule", permission=Permission.ALLOW)
    server = stdio_server(state, env={"FAKE_MCP_INPUT": "1"}, elicitation=True)
    hub = McpHub([server], [Binding(ops, ("infra",), (rule,))])
    await hub.start()
    h = Harness(fake, store, path, ManualClock(), [], [ops])
    try:
        yield h, hub
    finally:
        for bot in reversed(h.bots):
            await bot.close()
        await hub.stop()
        configure_endpoints(*previous)
        await store.close()
        await fake.close()


def restarts(state: Path) -> list[dict[str, Any]]:
    return [c["args"] for c in calls(state) if c["tool"] == "restart"]


async def test_a_discord_modal_answers_the_server(
    harness: tuple[Harness, McpHub], state: Path
) -> None:
    h, hub = harness
    bot = await h.start_bot()
    hub.attach(bot.runtime)
    run_id, _ = await h.start_run(ALICE, "ops")

    async def input_run() -> str | None:
        runs = await bot.runtime.list_runs()
        return next((r.run_id for r in runs if r.agent == "ops.elicitation"), None)

    asked = await until(input_run, "the input run")
    card = await h.card_for(asked)
    assert card["embeds"][0]["title"] == "Input needed: restart"
    assert "Restarting api: which change ticket?" in card["embeds"][0]["description"]

    stranger = await h.click(BOB, card, "Answer")
    assert stranger.modal is None  # no form for someone who may not answer
    assert restarts(state) == []

    opened = await h.click(ALICE, card, "Answer")
    assert opened.modal is not None
    inputs = [c for row in opened.modal["components"] for c in row["components"]]
    assert sorted(i["custom_id"] for i in inputs) == ["note", "ticket"]
    invalid = await h.submit(ALICE, opened, {"ticket": "0"})
    assert "nothing was recorded" in invalid.text
    assert restarts(state) == []

    good = await h.submit(ALICE, opened, {"ticket": "42", "note": "after hours"})
    assert "Answer recorded" in good.text
    done = await h.finished(run_id)
    assert done.status is RunStatus.DONE
    assert "restarted api under change 42" in (done.text or "")
    assert restarts(state) == [
        {"service": "api", "action": "accept", "data": {"ticket": 42, "note": "after hours"}}
    ]


async def test_a_discord_deny_declines(harness: tuple[Harness, McpHub], state: Path) -> None:
    h, hub = harness
    bot = await h.start_bot()
    hub.attach(bot.runtime)
    run_id, _ = await h.start_run(ALICE, "ops")

    async def input_run() -> str | None:
        runs = await bot.runtime.list_runs()
        return next((r.run_id for r in runs if r.agent == "ops.elicitation"), None)

    card = await h.card_for(await until(input_run, "the input run"))
    await h.click(ALICE, card, "Deny")
    done = await h.finished(run_id)
    assert "did not restart api: decline" in (done.text or "")
    assert restarts(state) == [{"service": "api", "action": "decline"}]
