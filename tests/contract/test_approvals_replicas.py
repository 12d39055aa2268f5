"""External approvals from two processes on one database: a request sent to both with one
idempotency key makes one approval and one ticket; decisions and outcome reports sent to
both settle it once."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from runtime import (
    Actor,
    Allow,
    ApprovalRequest,
    ExternalAgent,
    NotAwaiting,
    OutcomeConflict,
    Runtime,
    TicketStatus,
)
from runtime.store.sql import SQLStore

SENDERS = 12
BOT = Actor(id="svc:agent")


@pytest.fixture
async def replicas(sql_url: str) -> AsyncIterator[tuple[Runtime, Runtime]]:
    stores = [SQLStore.from_url(sql_url), SQLStore.from_url(sql_url)]
    try:
        one, two = (Runtime(store, [ExternalAgent("billing")]) for store in stores)
        yield one, two
        await one.aclose()
        await two.aclose()
    finally:
        for store in stores:
            await store.close()


def refund(amount: int = 50) -> ApprovalRequest:
    return ApprovalRequest("billing", "refund", {"order": "A1", "amount": amount}, session_id="c1")


async def test_one_key_sent_to_two_replicas_makes_one_approval_and_one_ticket(
    replicas: tuple[Runtime, Runtime],
) -> None:
    one, two = replicas

    answers = await asyncio.gather(
        *(
            (one, two)[n % 2].request_approval(refund(), actor=BOT, idempotency_key="k-1")
            for n in range(SENDERS)
        )
    )

    assert {a.approval_id for a in answers} == {answers[0].approval_id}
    assert {a.ticket_id for a in answers} == {answers[0].ticket_id}
    assert sorted(a.replayed for a in answers) == [False] + [True] * (SENDERS - 1)
    async with one.store.transaction() as tx:
        tickets = await tx.tickets_for_run(answers[0].approval_id)
    assert [t.status for t in tickets] == [TicketStatus.OPEN]
    page = await two.approval_page(viewer=BOT)
    assert [a.approval_id for a in page.items] == [answers[0].approval_id]


async def test_decisions_and_outcomes_sent_to_both_settle_it_once(
    replicas: tuple[Runtime, Runtime],
) -> None:
    one, two = replicas
    asked = await one.request_approval(refund(), actor=BOT, idempotency_key="k-2")
    assert asked.status == "pending" and asked.ticket_id is not None

    async def decide(n: int) -> str | None:
        try:
            await (one, two)[n % 2].decide(asked.ticket_id or "", Allow(), BOT, resume=True)
        except NotAwaiting:
            return "refused"
        return "decided"

    outcomes = await asyncio.gather(*(decide(n) for n in range(SENDERS)))
    assert sorted(outcomes).count("decided") == 1
    seen = [await r.approval(asked.approval_id, viewer=BOT) for r in (one, two)]
    assert len({(a.status, a.decided_by, a.reason) for a in seen}) == 1
    assert seen[0].status == "allowed"

    async def report(n: int) -> str:
        summary = "refunded" if n % 3 else f"refunded by {n}"
        try:
            await (one, two)[n % 2].report_outcome(
                asked.approval_id, "succeeded", summary, actor=BOT
            )
        except OutcomeConflict:
            return "conflict"
        return "ok"

    reports = await asyncio.gather(*(report(n) for n in range(SENDERS)))
    final = await two.approval(asked.approval_id, viewer=BOT)
    assert final.outcome is not None
    # The one recorded report wins; the same report again is fine, another conflicts.
    same = [
        n
        for n in range(SENDERS)
        if (("refunded" if n % 3 else f"refunded by {n}") == final.outcome.summary)
    ]
    assert [reports[n] for n in same] == ["ok"] * len(same)
    assert reports.count("conflict") == SENDERS - len(same)
    events = [e for e in await one.events(asked.approval_id) if e["kind"] == "approval_outcome"]
    assert len(events) == 1
