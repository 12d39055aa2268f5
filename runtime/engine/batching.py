"""Offering a model turn's permission tickets as one batch, from inside the turn.

When a model turn leaves two or more calls waiting for approval, `offer_batch` queues a
``batch_offered`` notification with the turn's tickets, carrying a token derived from
every ticket's one-use correlation token (`batch_token`). Deciding a batch is the
`runtime.services.batches` service.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Sequence
from datetime import timedelta

from runtime.domain.notifications import BatchCall, BatchOffered
from runtime.domain.states import CallState, TicketStatus
from runtime.domain.tickets import ResumeTicket, ToolPermission
from runtime.engine.deps import Deps
from runtime.engine.journal import display_args, notify
from runtime.store.base import Transaction
from runtime.store.records import CallRecord, RunRecord


def batch_token(tickets: Sequence[ResumeTicket]) -> str:
    """The token of a batch: unguessable without every ticket's correlation token.

    43 URL-safe characters, so it fits a Slack button value and a Discord custom id.
    """
    material = "\x00".join(f"{t.ticket_id}\x01{t.correlation}" for t in tickets)
    digest = hashlib.sha256(("signoff-batch\x00" + material).encode()).digest()
    return base64.urlsafe_b64encode(digest).decode().rstrip("=")


def first_per_call(
    tickets: Sequence[ResumeTicket], calls: dict[str, CallRecord]
) -> list[ResumeTicket]:
    """The first permission ticket of each call (an escalation opens a later one)."""
    first: dict[str, ResumeTicket] = {}
    for ticket in sorted(tickets, key=lambda t: (t.created_at, t.ticket_id)):
        call_id = ticket.call_id
        if isinstance(ticket.target, ToolPermission) and call_id in calls:
            first.setdefault(call_id, ticket)
    return sorted(first.values(), key=lambda t: calls[t.call_id or ""].seq)


async def offer_batch(
    deps: Deps, tx: Transaction, run: RunRecord, calls: Sequence[CallRecord]
) -> None:
    """Queue a ``batch_offered`` notification when `calls` (one model turn) left two or
    more permission tickets open; inside the transaction that opened them."""
    if sum(1 for c in calls if c.state is CallState.AWAITING_DECISION) < 2:
        return  # the common case costs no read
    by_id = {c.call_id: c for c in calls}
    opened = [
        t
        for t in await tx.tickets_for_run(run.run_id, status=TicketStatus.OPEN)
        if isinstance(t.target, ToolPermission) and t.call_id in by_id
    ]
    members = first_per_call(opened, by_id)
    if len(members) < 2:
        return
    agent = deps.agents.get(run.agent)
    shown: list[BatchCall] = []
    for ticket in members:
        target = ticket.target
        assert isinstance(target, ToolPermission)
        args = display_args(agent, target.tool, target.args)
        shown.append(BatchCall(ticket_id=ticket.ticket_id, tool=target.tool, args=args))
    offered = BatchOffered(
        run_id=run.run_id,
        agent=run.agent,
        ticket_ids=[t.ticket_id for t in members],
        token=batch_token(members),
        calls=shown,
    )
    # Queued a moment after the turn's cards (same transaction, maybe the same clock
    # reading): a channel's items are delivered in order, cards first.
    await notify(deps, tx, run, offered, behind=timedelta(microseconds=1))
