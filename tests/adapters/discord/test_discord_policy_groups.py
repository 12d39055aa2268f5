"""A policy sees the groups of who started a run in Discord: the roles the ``/agent run``
interaction carries (``role:<id>``, and each SIGNOFF_DISCORD_APPROVER_ROLES group whose
roles they hold), recorded on the run when it starts, on SQLite and PostgreSQL, through
the real discord.py against the fake Discord. A Cedar policy that asks only for a group
decides."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from discord_harness import ALICE, DAVE, ROLE_FINANCE, Harness
from pgtest import fresh_database
from testkit import echo_model

from adapters.policies import load_policy
from runtime import Agent, RunStatus, tool
from runtime.store.sql import SQLStore

CEDAR = """\
permit(principal in Group::"finance", action == Action::"call", resource);
"""


def guarded_agent(tmp_path: Path, ledger: list[tuple[str, dict[str, Any]]]) -> Agent:
    path = tmp_path / "groups.cedar"
    path.write_text(CEDAR, encoding="utf-8")
    policy = load_policy("cedar", path, policy_id="groups", version="1")

    @tool(permission="allow")
    async def refund(order: str) -> str:
        """Refund an order."""
        ledger.append(("refund", {"order": order}))
        return f"refunded {order}"

    return Agent(
        "guarded",
        "Refund.",
        echo_model(("refund", {"order": "A-1"})),
        tools=[refund],
        policy=policy,
    )


@pytest.fixture(params=["sqlite", "postgresql"])
async def store(request: pytest.FixtureRequest, harness: Harness) -> AsyncIterator[SQLStore]:
    if request.param == "sqlite":
        yield harness.store
        return
    async with fresh_database() as url:
        store = SQLStore.from_url(url)
        try:
            yield store
        finally:
            await store.close()


async def test_a_starters_discord_roles_reach_the_policy(
    harness: Harness, store: SQLStore, tmp_path: Path
) -> None:
    bot = await harness.start_bot(store=store, agents=[guarded_agent(tmp_path, harness.ledger)])
    # Dave holds the finance role (SIGNOFF_DISCORD_APPROVER_ROLES finance = that role).
    run_id, _ = await harness.start_run(DAVE, "guarded")
    member = await harness.finished(run_id)
    assert member.status is RunStatus.DONE
    groups = member.origin["requester_groups"]
    assert groups == sorted(groups) and {"finance", f"role:{ROLE_FINANCE}"} <= set(groups)
    assert harness.ledger == [("refund", {"order": "A-1"})]
    [proposed] = [e for e in await bot.runtime.events(run_id) if e["kind"] == "tool_proposed"]
    assert proposed["data"]["policy"]["answer"] == "allow"

    # Alice holds no finance role: the policy does not permit, so the call asks.
    run_id, _ = await harness.start_run(ALICE, "guarded")
    stranger = await harness.wait(run_id, lambda r: r.status is RunStatus.AWAITING)
    assert "finance" not in stranger.origin.get("requester_groups", [])
    assert len(harness.ledger) == 1
