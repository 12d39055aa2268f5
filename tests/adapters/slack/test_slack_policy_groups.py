"""A policy sees the groups of who started a run in Slack: the named approver groups
(``SIGNOFF_SLACK_APPROVER_GROUPS``) the fake Slack Web API says they are in, looked up
through the real slack_sdk when the run starts and recorded on it, on SQLite and
PostgreSQL. A Rego policy that asks only for a group decides."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer
from fake_slack import FakeSlack
from pgtest import fresh_database
from pydantic import SecretStr
from slackbed import SlackBed, slack_config
from testkit import echo_model

from adapters.policies import load_policy
from adapters.slack import ChannelLimiter
from bot.bootstrap import Parts, build_service
from bot.settings import Settings
from runtime import Agent, ManualClock, RunResult, RunStatus, tool
from runtime.services.delivery import RetryPolicy
from runtime.store.sql import SQLStore

REGO = """\
package signoff

import rego.v1

default decision := "ask"

decision := "allow" if "sre" in input.requester_groups
"""


def guarded_agent(tmp_path: Path, ledger: list[tuple[str, dict[str, Any]]]) -> Agent:
    path = tmp_path / "groups.rego"
    path.write_text(REGO, encoding="utf-8")
    policy = load_policy("rego", path, policy_id="groups", version="1")

    @tool(permission="allow")
    async def flush(cache: str) -> str:
        """Flush a cache."""
        ledger.append(("flush", {"cache": cache}))
        return f"flushed {cache}"

    return Agent(
        "guarded", "Flush.", echo_model(("flush", {"cache": "cdn"})), tools=[flush], policy=policy
    )


@pytest.fixture(params=["sqlite", "postgresql"])
async def database(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    if request.param == "sqlite":
        yield f"sqlite+aiosqlite:///{tmp_path / 'signoff.db'}"
    else:
        async with fresh_database() as url:
            yield url


@pytest.fixture
async def slack(
    fake: FakeSlack,
    tmp_path: Path,
    database: str,
    ledger: list[tuple[str, dict[str, Any]]],
) -> AsyncIterator[SlackBed]:
    store = SQLStore.from_url(database)
    await store.migrate()
    clock = ManualClock()
    agents = [guarded_agent(tmp_path, ledger)]
    settings = Settings(
        database_url=database,
        operator_token=SecretStr("slack-operator-0123456789"),
        cookie_secret=SecretStr("slack-cookie-secret-0123456789abcdef"),
        poll_seconds=0.02,
    )
    built = await build_service(
        settings,
        agents=agents,
        store=store,
        clock=clock,
        slack_config=slack_config(fake, approver_groups={"sre": ["S111", "C222"]}),
        slack_limiter=ChannelLimiter(interval=0.0, monotonic=lambda: clock.now().timestamp()),
        outbox_policy=RetryPolicy(base_delay=5.0),
        pacing={},
        parts=Parts(listen=False, deadlines=False, wake_ups=False),
    )
    assert built.slack is not None
    client = TestClient(TestServer(built.app, host="127.0.0.1", port=0))
    await client.start_server()
    await built.start()
    try:
        yield SlackBed(
            fake,
            built.runtime,
            store,
            clock,
            built.worker,
            built.slack.bolt,
            client,
            agents,
            tmp_path / "signoff.db",
            ledger,
        )
    finally:
        await client.close()
        await asyncio.sleep(0.05)  # bolt's background listener tasks
        await built.stop(grace_seconds=5)
        await store.close()


async def test_a_starters_slack_groups_reach_the_policy(slack: SlackBed) -> None:
    slack.fake.usergroups["S111"] = ["U1"]
    slack.fake.channel_members["C222"] = ["U3"]
    # U1 is in the user group, U3 in the channel "sre" also maps to, U2 in neither.
    await slack.command("guarded flush it", user="U1")
    member = await slack.finished((await slack.commanded_run()).run_id)
    assert member.status is RunStatus.DONE
    assert member.origin["requester_groups"] == ["sre"]
    assert slack.ledger == [("flush", {"cache": "cdn"})]

    await slack.command("guarded flush it", user="U2")
    stranger = await slack.commanded_run()
    stranger = await slack.wait_run(stranger.run_id, lambda r: r.status is RunStatus.AWAITING)
    assert "requester_groups" not in stranger.origin
    assert len(slack.ledger) == 1
    events = [
        e for e in await slack.runtime.events(stranger.run_id) if e["kind"] == "tool_proposed"
    ]
    assert events[0]["data"]["policy"]["answer"] == "ask"

    await slack.event(
        {
            "type": "message",
            "channel_type": "im",
            "channel": "D3",
            "user": "U3",
            "text": "guarded go",
            "ts": "1700000000.000100",
        },
        event_id="EvDM3",
    )
    started: RunResult = await slack.until(partial(_run_of, slack, "U3"), "the DM's run")
    dm = await slack.finished(started.run_id)
    assert dm.status is RunStatus.DONE and dm.origin["requester_groups"] == ["sre"]
    assert len(slack.ledger) == 2


async def _run_of(slack: SlackBed, user: str) -> RunResult | None:
    runs = [r for r in await slack.runtime.list_runs() if r.requester == user]
    return runs[0] if runs else None
