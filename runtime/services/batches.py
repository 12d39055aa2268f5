"""Batch decisions: several open tickets decided in one action, each on its own.

Whoever decides a batch has seen every call in it; the batch is only a way to send many
decisions at once. Each ticket is still checked for who may see and decide it, validated
and applied in its own transaction by the one decision path, so one refusal (a ticket
decided meanwhile, one the actor may not decide, an edit that does not fit) never stops
the others, and the answer lists each outcome.

- `Batches.decide`: a list of ``(ticket id, answer)`` from the API, the console or the
  command line, applied at once (`Runtime.decide_batch`).
- Chat: when a model turn leaves two or more calls waiting for approval, `offer_batch`
  queues a ``batch_offered`` notification with the turn's tickets. Slack and Discord
  post it once every one of those cards is posted, with "Allow all N" and "Deny all N"
  buttons that carry the first ticket's id and a token derived from every ticket's
  one-use correlation token (`batch_token`), so a click proves it came from that message.
  `Batches.accept` finds the batch again (`Batches.members`) and stores one decision per
  ticket through the same durable accept path as a single click (`runtime.services.inbox`).
"""

from __future__ import annotations

import hmac
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from runtime.domain.accepting import Accepted, AcceptOutcome, ActorSource, Refused
from runtime.domain.errors import NotAwaiting, SignoffError, UnknownTicket
from runtime.domain.refusals import Refusal, RefusalReason, classify
from runtime.domain.tickets import Actor, Answer, ResumeTicket, ToolPermission
from runtime.engine.batching import batch_token, first_per_call, offer_batch
from runtime.engine.deps import Deps
from runtime.engine.results import RunResult
from runtime.engine.traces import click_span

if TYPE_CHECKING:
    from runtime.services.decisions import Decisions
    from runtime.services.inbox import Inbox
    from runtime.services.queries import Queries

MAX_BATCH = 100
"""Tickets one batch may decide."""


@dataclass(frozen=True, slots=True)
class BatchItem:
    """One decision of a batch.

    Attributes:
        ticket_id: The ticket.
        answer: The answer (``Allow`` with or without edits, ``Deny`` ...).
    """

    ticket_id: str
    answer: Answer


@dataclass(frozen=True, slots=True)
class BatchOutcome:
    """What became of one decision of a batch.

    Attributes:
        ticket_id: The ticket.
        answer: The answer that was given.
        refusal: Why it was refused (nothing changed for this ticket), or None.
        result: The run as it stands after the decision, when it was applied.
    """

    ticket_id: str
    answer: Answer
    refusal: Refusal | None = None
    result: RunResult | None = None

    @property
    def applied(self) -> bool:
        """Whether the decision was applied."""
        return self.refusal is None


@dataclass(frozen=True, slots=True)
class BatchAccepted:
    """What `Runtime.accept_batch` did with one click on "Allow all N" / "Deny all N".

    Attributes:
        outcomes: Each ticket of the batch with its own accept outcome (`Accepted`, or
            `Refused` with why), in the order of their calls.
    """

    outcomes: tuple[tuple[ResumeTicket, AcceptOutcome], ...]

    @property
    def stored(self) -> int:
        """How many decisions were stored by this click."""
        return sum(1 for _, outcome in self.outcomes if not isinstance(outcome, Refused))

    @property
    def refused(self) -> list[tuple[str, Refusal]]:
        """Each refused call: its tool's name (the ticket id for other asks) and why."""
        found = []
        for ticket, outcome in self.outcomes:
            if isinstance(outcome, Refused):
                target = ticket.target
                tool = target.tool if isinstance(target, ToolPermission) else ticket.ticket_id
                found.append((tool, outcome.refusal))
        return found


class Batches:
    """Decides several tickets in one action, each on its own (see the module)."""

    def __init__(self, deps: Deps, queries: Queries, decisions: Decisions, inbox: Inbox) -> None:
        self._deps = deps
        self._queries = queries
        self._decisions = decisions
        self._inbox = inbox

    async def decide(
        self, items: Sequence[BatchItem], actor: Actor, *, resume: bool = False
    ) -> list[BatchOutcome]:
        """Validate and apply each decision on its own (see `Runtime.decide_batch`)."""
        outcomes = []
        for item in items:
            try:
                # A ticket the actor may not see does not exist for them (UnknownTicket).
                await self._queries.ticket(item.ticket_id, actor)
                result = await self._decisions.decide(
                    item.ticket_id, item.answer, actor, None, resume=resume
                )
            except SignoffError as exc:
                now = await self._visible(item.ticket_id, actor)
                outcomes.append(BatchOutcome(item.ticket_id, item.answer, classify(exc, now)))
            else:
                outcomes.append(BatchOutcome(item.ticket_id, item.answer, result=result))
        return outcomes

    async def _visible(self, ticket_id: str, actor: Actor) -> ResumeTicket | None:
        """The ticket as committed now, if `actor` may see it (to word a refusal)."""
        try:
            return await self._queries.ticket(ticket_id, actor)
        except SignoffError:
            return None

    async def members(self, ticket_id: str, token: str) -> tuple[ResumeTicket, ...]:
        """The tickets of the batch whose first ticket is `ticket_id`, checked against the
        batch's `token` (as committed now: open or not).

        Raises:
            UnknownTicket: No such ticket, or it is no permission request.
            NotAwaiting: The token does not match that batch.
        """
        async with self._deps.store.transaction() as tx:
            anchor = await tx.get_ticket(ticket_id)
            call = await tx.get_call(anchor.call_id or "") if anchor is not None else None
            if anchor is None or call is None or not isinstance(anchor.target, ToolPermission):
                raise UnknownTicket(f"no batch of ticket {ticket_id!r} exists")
            calls = {c.call_id: c for c in await tx.calls_for_run(anchor.run_id, batch=call.batch)}
            members = first_per_call(await tx.tickets_for_run(anchor.run_id), calls)
        if (
            len(members) < 2
            or members[0].ticket_id != ticket_id
            or not hmac.compare_digest(
                batch_token(members).encode(), token.encode("utf-8", "surrogatepass")
            )
        ):
            raise NotAwaiting(f"ticket {ticket_id}: this batch button does not match its calls")
        return tuple(members)

    async def accept(
        self,
        ticket_id: str,
        token: str,
        answer: Answer,
        actor: ActorSource,
        *,
        source: str,
        delivery_id: str,
        reply: dict[str, Any] | None,
    ) -> BatchAccepted | Refused:
        """Check and store one decision per ticket of a batch (see `Runtime.accept_batch`)."""
        try:
            members = await self.members(ticket_id, token)
        except UnknownTicket as exc:
            return Refused(classify(exc, None))
        except NotAwaiting as exc:
            return Refused(Refusal(RefusalReason.MISMATCH, str(exc)))
        except SignoffError as exc:
            return Refused(classify(exc, None))
        outcomes = []
        with click_span(self._deps, source, ticket_id) as span:  # one for the batch
            for ticket in members:
                outcome = await self._inbox.accept(
                    ticket.ticket_id,
                    answer,
                    actor,
                    # The batch token proved the click came from the batch message, which was
                    # posted only once every one of these cards was: each ticket's own token.
                    correlation=ticket.correlation,
                    source=source,
                    delivery_id=f"{delivery_id}:{ticket.ticket_id}",
                    reply=reply,
                )
                outcomes.append((ticket, outcome))
            if span is not None:
                stored = any(isinstance(o, Accepted) and o.stored for _, o in outcomes)
                span.set("signoff.click.stored", stored)
        return BatchAccepted(tuple(outcomes))


__all__ = [
    "MAX_BATCH",
    "BatchAccepted",
    "BatchItem",
    "BatchOutcome",
    "Batches",
    "batch_token",
    "offer_batch",
]
