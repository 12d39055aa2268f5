"""Standing grants across processes: two runtimes, each with its own store, one database.

A grant given through one process covers calls another one proposes, and a revocation
through either stops it at once for both: grants are read from the database when a call's
permission is evaluated, never cached.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from runtime import (
    Actor,
    Agent,
    GrantRequest,
    ModelRequest,
    RunStatus,
    Runtime,
    ScriptedModel,
    final_reply,
    tool,
    tool_call_reply,
)
from runtime.store.sql import SQLStore


def build_agent(ran: list[str]) -> Agent:
    def reply(request: ModelRequest) -> dict[str, Any]:
        if request.messages[-1].get("role") == "tool":
            return final_reply(str(request.messages[-1]["content"]))
        return tool_call_reply(("refund", {"order": "A1", "amount": 20.0}))

    @tool(permission="ask", grants=["run", "thread"])
    async def refund(order: str, amount: float) -> str:
        ran.append(order)
        return f"refunded {order}"

    return Agent("shop", "Refund.", ScriptedModel(reply), [refund])


@pytest.fixture
async def replicas(sql_url: str) -> AsyncIterator[tuple[Runtime, Runtime, list[str]]]:
    ran: list[str] = []
    stores = [SQLStore.from_url(sql_url), SQLStore.from_url(sql_url)]
    try:
        one, two = (Runtime(store, [build_agent(ran)]) for store in stores)
        yield one, two, ran
    finally:
        for store in stores:
            await store.close()


async def test_a_grant_given_on_one_replica_covers_and_stops_on_the_other(
    replicas: tuple[Runtime, Runtime, list[str]],
) -> None:
    one, two, ran = replicas
    first = await one.start("shop", "refund", requester="U1", thread_id="t1")
    assert first.status is RunStatus.AWAITING
    await two.approve(
        first.pending[0], actor=Actor(id="U1"), grant=GrantRequest(scope="thread", hours=1)
    )

    covered = await one.start("shop", "refund", requester="U1", thread_id="t1")
    assert covered.status is RunStatus.DONE
    [applied] = [e for e in await one.events(covered.run_id) if e["kind"] == "grant_applied"]
    [grant] = await one.grants()
    assert applied["data"]["grant_id"] == grant.grant_id

    await two.revoke_grant(grant.grant_id, actor=Actor(id="U1"))
    asked = await one.start("shop", "refund", requester="U1", thread_id="t1")
    assert asked.status is RunStatus.AWAITING
    assert ran == ["A1"]
    assert [g.state for g in await one.grants(active=False)] == ["revoked"]
