"""Decisions by ticket id from two processes on one database: one wins, the rest are
refused exactly as a later decision is, however their reads and the winner's commit
interleave (the ticket is read before the run's row is locked)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from runtime import (
    Actor,
    Agent,
    Allow,
    Deny,
    NotAwaiting,
    RunStatus,
    Runtime,
    ScriptedModel,
    final_reply,
    tool_call_reply,
)
from runtime.store.sql import SQLStore

DECISIONS = 20


def build_agent(ran: list[str]) -> Agent:
    model = ScriptedModel([tool_call_reply(("refund", {"order": "A1"})), final_reply("Done.")])
    agent = Agent("shop", "Refund.", model, approvers=["*"])

    @agent.tool(permission="ask")
    async def refund(order: str) -> str:
        """Refund an order."""
        ran.append(order)
        return f"refunded {order}"

    return agent


@pytest.fixture
async def replicas(sql_url: str) -> AsyncIterator[tuple[Runtime, Runtime, list[str]]]:
    ran: list[str] = []
    stores = [SQLStore.from_url(sql_url), SQLStore.from_url(sql_url)]
    try:
        one, two = (Runtime(store, [build_agent(ran)]) for store in stores)
        yield one, two, ran
        await one.aclose()
        await two.aclose()
    finally:
        for store in stores:
            await store.close()


async def test_concurrent_decisions_by_id_have_one_winner_and_the_same_refusal(
    replicas: tuple[Runtime, Runtime, list[str]],
) -> None:
    one, two, ran = replicas
    parked = await one.start("shop", "refund A1", requester="U1")
    assert parked.status is RunStatus.AWAITING
    ticket = parked.pending[0].ticket

    async def decide(n: int) -> str | None:
        answer = Allow() if n % 2 else Deny(reason=f"no {n}")
        try:
            await (one, two)[n % 2].decide(
                ticket.ticket_id,
                answer,
                Actor(id=f"U{n}", platform="slack"),
                correlation=ticket.correlation,
            )
        except NotAwaiting as exc:
            return str(exc)
        return None

    outcomes = await asyncio.gather(*(decide(n) for n in range(DECISIONS)))
    refusals = [message for message in outcomes if message is not None]
    assert len(refusals) == DECISIONS - 1
    # A decision arriving once it is all over is refused with these words; so is every
    # loser of the race, whichever read of the ticket it made first.
    later = await decide(DECISIONS)
    assert later is not None
    assert set(refusals) == {later}
    assert ran == []  # decided, not resumed: nothing ran
    events = await one.events(ticket.run_id)
    assert [e["kind"] for e in events].count("ticket_decided") == 1
