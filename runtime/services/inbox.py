"""Stored clicks: accept a chat click durably before the ack, apply it later once.

See `runtime.domain.accepting` for the outcomes an edge gets back.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Awaitable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from runtime.domain.accepting import (
    Accepted,
    AcceptOutcome,
    ActorSource,
    Decidable,
    FormOutcome,
    Refused,
)
from runtime.domain.errors import (
    ResumeError,
    RunNotFound,
    SignoffError,
    StorageError,
    UnknownTicket,
)
from runtime.domain.notifications import DecisionRefused
from runtime.domain.refusals import Refusal, classify
from runtime.domain.tickets import (
    ANSWER,
    Actor,
    Answer,
    AnswerKind,
    ResumeCommand,
    ResumeTicket,
    check_decidable,
)
from runtime.engine.deps import Deps
from runtime.engine.journal import notify
from runtime.engine.people import as_person
from runtime.engine.traces import CLICK_TRACE, click_span
from runtime.services.decisions import Decisions
from runtime.store.base import DuplicateKey, Transaction
from runtime.store.records import ReceivedRecord


class _Refusing(Exception):
    """Internal: leave a transaction (rolling it back) with this refusal."""

    def __init__(self, refusal: Refusal) -> None:
        super().__init__(refusal.message)
        self.refusal = refusal


@dataclass(frozen=True, slots=True)
class _Click:
    """What an edge hands `Inbox.accept`, besides who clicked."""

    ticket_id: str
    answer: Answer
    correlation: str
    source: str
    delivery_id: str
    reply: dict[str, Any] | None


@dataclass(frozen=True, slots=True)
class ReceivedOutcome:
    """What `Runtime.apply_received` did with one stored decision."""

    command: ReceivedRecord
    error: SignoffError | None

    @property
    def applied(self) -> bool:
        """Whether the decision was applied."""
        return self.error is None


class Inbox:
    """Checks and stores clicks (`accept`), and applies stored ones (`apply_received`)."""

    def __init__(self, deps: Deps, decisions: Decisions) -> None:
        self._deps = deps
        self._decisions = decisions

    def _received(
        self,
        ticket_id: str,
        answer: Answer,
        actor: Actor,
        correlation: str,
        source: str,
        delivery_id: str,
        reply: dict[str, Any] | None,
        at: datetime,
    ) -> ReceivedRecord:
        trace = self._deps.tracer.carrier()
        if trace is not None and reply is not None:
            # Kept with the click: the worker that applies it links its spans to this one.
            reply = {**reply, CLICK_TRACE: trace}
        return ReceivedRecord(
            command_id=self._deps.ids.new_id("rc"),
            source=source,
            delivery_id=delivery_id,
            ticket_id=ticket_id,
            correlation=correlation,
            answer=ANSWER.dump_python(answer, mode="json"),
            actor=actor.model_dump(mode="json"),
            received_at=at,
            reply=reply,
        )

    async def accept(
        self,
        ticket_id: str,
        answer: Answer,
        actor: ActorSource,
        *,
        correlation: str,
        source: str,
        delivery_id: str,
        reply: dict[str, Any] | None,
    ) -> AcceptOutcome:
        """Check a click and store it, in one transaction (see `Runtime.accept`).

        When the clicker is known without a look-up (an `Actor`, or an `ActorSource`
        answering at once), the ticket is read once, in the transaction that stores the
        click; otherwise it is read first for the look-up, outside any transaction.
        """
        click = _Click(ticket_id, answer, correlation, source, delivery_id, reply)
        # The worker applying the click links to the span it arrived in (this one, when
        # no request's span is current).
        with click_span(self._deps, source, ticket_id) as span:
            outcome = await self._accept(click, actor)
            if span is not None:
                span.set("signoff.click.stored", isinstance(outcome, Accepted) and outcome.stored)
            return outcome

    async def _accept(self, click: _Click, actor: ActorSource) -> AcceptOutcome:
        deps = self._deps
        ticket_id = click.ticket_id
        who, find = (actor, None) if isinstance(actor, Actor) else (None, actor)
        lookup: Awaitable[Actor] | None = None
        try:
            try:
                async with deps.store.transaction() as tx:
                    ticket = await tx.get_ticket(ticket_id)
                    if find is not None:
                        found = find(ticket)
                        who, lookup = (found, None) if isinstance(found, Actor) else (None, found)
                    if who is not None:
                        return await self._store(tx, ticket, click, who)
                assert lookup is not None
                # The look-up may wait on the platform: no transaction is held meanwhile.
                who = await lookup
                async with deps.store.transaction() as tx:
                    return await self._store(tx, await tx.get_ticket(ticket_id), click, who)
            except DuplicateKey:
                return Accepted(None, stored=False)  # a concurrent delivery won the insert
        except _Refusing as refusing:
            return Refused(refusing.refusal)
        except StorageError as exc:
            return Refused(classify(exc, None))
        finally:
            if inspect.iscoroutine(lookup):
                lookup.close()  # not awaited if the transaction failed first; else a no-op

    async def _store(
        self, tx: Transaction, ticket: ResumeTicket | None, click: _Click, who: Actor
    ) -> Accepted:
        """Inside `accept`'s transaction: store the click if it passes the check.

        Raises:
            _Refusing: It does not (leaving the transaction rolls the insert back).
        """
        now = self._deps.clock.now()
        item = self._received(
            click.ticket_id,
            click.answer,
            who,
            click.correlation,
            click.source,
            click.delivery_id,
            click.reply,
            now,
        )
        # A retry of a stored delivery is recognised before the check: the ticket may be
        # decided by now, by this very click.
        if not await tx.insert_received(item):
            return Accepted(ticket, stored=False)
        try:
            person = await as_person(tx, who, self._deps.identity)
            self._check_click(ticket, click.ticket_id, click.answer, person, click.correlation, now)
        except ResumeError as exc:
            raise _Refusing(classify(exc, ticket)) from exc
        return Accepted(ticket, stored=True)

    def _check_click(
        self,
        ticket: ResumeTicket | None,
        ticket_id: str,
        answer: Answer,
        actor: Actor,
        correlation: str,
        at: datetime,
    ) -> None:
        if ticket is None:
            raise UnknownTicket(f"no ticket {ticket_id!r} exists")
        command = ResumeCommand.from_ticket(ticket, answer, actor, at)
        self._decisions.validate(command.model_copy(update={"correlation": correlation}), ticket)

    async def may_answer(
        self, ticket_id: str, kind: AnswerKind, actor: ActorSource, *, correlation: str
    ) -> FormOutcome:
        """Whether `actor` may answer the ticket with `kind` now (see `Runtime.may_answer`).

        As in `accept`, the ticket is read once when the clicker is known without a
        look-up, and read again after a look-up otherwise.
        """
        deps = self._deps
        ticket: ResumeTicket | None = None
        try:
            async with deps.store.transaction() as tx:
                ticket = await tx.get_ticket(ticket_id)
                found = actor if isinstance(actor, Actor) else actor(ticket)
                if isinstance(found, Actor):
                    who = await as_person(tx, found, deps.identity)
            if not isinstance(found, Actor):
                # The look-up may wait on the platform: no transaction is held meanwhile.
                looked_up = await found
                async with deps.store.transaction() as tx:
                    ticket = await tx.get_ticket(ticket_id)
                    who = await as_person(tx, looked_up, deps.identity)
        except StorageError as exc:
            return Refused(classify(exc, None))
        except ResumeError as exc:
            return Refused(classify(exc, ticket))
        agent = deps.agents.get(ticket.agent) if ticket is not None else None
        try:
            if ticket is None:
                raise UnknownTicket(f"no ticket {ticket_id!r} exists")
            check_decidable(
                ticket,
                ticket_id=ticket_id,
                correlation=correlation,
                actor=who,
                at=deps.clock.now(),
                kind=kind,
                agent_version=agent.version if agent is not None else None,
                catalog_fingerprint=agent.catalog_fingerprint if agent is not None else None,
            )
        except ResumeError as exc:
            return Refused(classify(exc, ticket))
        return Decidable(ticket)

    async def apply_received(self, limit: int) -> list[ReceivedOutcome]:
        """Apply stored decisions, oldest first, each exactly once.

        The oldest is claimed and applied in one transaction, and those claimed with it
        are applied one transaction each. A refused click's transaction rolls back with
        its claim: its refusal is recorded on its own, and the others are claimed again.
        """
        outcomes: list[ReceivedOutcome] = []
        while len(outcomes) < limit:
            claimed = await self._claim_and_apply(limit - len(outcomes))
            if claimed is None:
                break
            first, error, rest = claimed
            if error is not None:
                if await self._refuse(first, error):
                    outcomes.append(ReceivedOutcome(first, error))
                continue
            outcomes.append(ReceivedOutcome(first, None))
            for item in rest:
                error = await self._applied(self._decisions.apply_received(item))
                if error is None or await self._refuse(item, error):
                    outcomes.append(ReceivedOutcome(item, error))
            break
        return outcomes

    async def _claim_and_apply(
        self, limit: int
    ) -> tuple[ReceivedRecord, SignoffError | None, list[ReceivedRecord]] | None:
        """Claim up to `limit` stored clicks and apply the oldest in the same transaction.

        Returns:
            The oldest, why it was refused (None: applied) and the others, which stay
            claimed by this process only when the oldest was applied; None: none is pending.
        """
        claimed: list[ReceivedRecord] = []

        async def claim(tx: Transaction) -> ReceivedRecord | None:
            claimed[:] = await self._claim(tx, limit)
            return claimed[0] if claimed else None

        try:
            error = await self._applied(self._decisions.claim_and_apply(claim))
        except Exception:
            if claimed:
                # Not a refusal: something failed, and the click's claim rolled back with
                # it. Claimed on its own, it waits for its lease to run out (as when its
                # process dies) while the clicks after it are applied.
                with contextlib.suppress(Exception):
                    async with self._deps.store.transaction() as tx:
                        await self._claim(tx, 1)
            raise
        if not claimed:
            return None
        return claimed[0], error, claimed[1:]

    async def _claim(self, tx: Transaction, limit: int) -> list[ReceivedRecord]:
        """Claim up to `limit` stored clicks, oldest first, so that of several processes
        only one applies (or refuses) each."""
        deps = self._deps
        now = deps.clock.now()
        until = now + timedelta(seconds=deps.lease_seconds)
        return await tx.claim_received(now, limit, owner=deps.worker_id, until=until)

    @staticmethod
    async def _applied(applying: Awaitable[None]) -> SignoffError | None:
        """Why a stored click was refused when it was applied (None: it was applied)."""
        try:
            # The ticket is read once, in the transaction that applies the click.
            await applying
        except (ResumeError, RunNotFound) as exc:
            return exc
        return None

    async def _refuse(self, item: ReceivedRecord, error: SignoffError) -> bool:
        """Record that a stored click was refused, and tell the clicker; False when another
        process applied or refused it meanwhile (its claim expired, or was never held)."""
        item.applied_at = self._deps.clock.now()
        item.state = "refused"
        item.error_code = getattr(error, "code", type(error).__name__)
        item.error = str(error)
        async with self._deps.store.transaction() as tx:
            if not await tx.update_received(item, only_pending=True):
                return False
            if item.reply is not None:
                await self._tell_refused(tx, item, error)
        return True

    async def _tell_refused(
        self, tx: Transaction, item: ReceivedRecord, error: SignoffError
    ) -> None:
        """Queue word to the clicker that their stored decision was refused.

        The click was acknowledged as recorded; this is how the edge learns otherwise.
        A ticket that never existed has no run to attach the notice to.
        """
        ticket = await tx.get_ticket(item.ticket_id)
        run = await tx.get_run(ticket.run_id) if ticket is not None else None
        if run is None:
            return
        refusal = classify(error, ticket)
        at = item.applied_at or self._deps.clock.now()
        refused = DecisionRefused(
            run_id=run.run_id,
            agent=run.agent,
            ticket_id=item.ticket_id,
            error=item.error_code,
            reason=refusal.reason.value,
            decided_by=refusal.decided_by,
            message=item.error,
            actor=item.actor.get("id"),
        )
        to = {**(item.reply or {}), "platform": item.source}
        to.pop(CLICK_TRACE, None)
        await notify(self._deps, tx, run, refused, to=to, at=at)
