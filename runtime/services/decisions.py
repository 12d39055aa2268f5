"""Deciding tickets: the single ingress every decision passes, and what each answer does."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypedDict, assert_never

from runtime.domain.edits import Edit, args_digest, check_edit
from runtime.domain.errors import NotAwaiting, ResolutionError, UnknownExecutionKey, UnknownTicket
from runtime.domain.notifications import Decided
from runtime.domain.states import CallState, RunStatus, TicketStatus
from runtime.domain.tickets import (
    ANSWER,
    Abort,
    Actor,
    Allow,
    Answer,
    ChildDecision,
    Continue,
    Deny,
    Fitted,
    InputData,
    InputDecision,
    Pause,
    PauseDecision,
    PermissionDecision,
    Resolve,
    ResumeCommand,
    ResumeTicket,
    Retry,
    ToolPermission,
    UncertainDecision,
    actor_id,
    fit,
    validate_resume,
)
from runtime.engine import delegation, grants
from runtime.engine.deps import Deps
from runtime.engine.handoff import Slot
from runtime.engine.journal import display_args, notify, record, record_claim, to_jsonable
from runtime.engine.moves import move, move_run
from runtime.engine.people import as_person
from runtime.engine.results import PendingEntry, RunResult
from runtime.engine.traces import click_trace, decided_in, record_wait
from runtime.engine.turns import blocked_text
from runtime.services.driving import Driving
from runtime.services.queries import Queries
from runtime.store.base import Transaction
from runtime.store.records import CallRecord, GrantRecord, ReceivedRecord, RunRecord

TicketRef = PendingEntry | ResumeTicket | str
"""A pending entry, a ticket, a ticket id or an execution key."""

MISSING: Any = object()
"""`Decisions.resolve_tool`'s "no result given"."""


def _actor(actor: Actor | str | None, ticket: ResumeTicket) -> Actor:
    if isinstance(actor, Actor):
        return actor
    if isinstance(actor, str):
        return Actor(id=actor)
    return Actor(id=ticket.requester or "system", platform="api")


@dataclass(frozen=True, slots=True)
class _Named:
    """A decision that names its ticket by id: its command is built from the ticket as
    read in the transaction that applies it, so the ticket is read once.

    Attributes:
        ref: The ticket id (or, with ``by_key``, an execution key).
        answer: The typed answer.
        actor: Who decides (None: the run's requester, for trusted host code).
        at: When the decision was made.
        correlation: The token the click carried (None: the ticket's own).
        by_key: Whether `ref` may be an execution key (`Runtime.approve` and friends).
    """

    ref: str
    answer: Answer
    actor: Actor | str | None
    at: datetime
    correlation: str | None = None
    by_key: bool = False

    def command(self, ticket: ResumeTicket) -> ResumeCommand:
        """The command answering `ticket`."""
        command = ResumeCommand.from_ticket(
            ticket, self.answer, _actor(self.actor, ticket), self.at
        )
        if self.correlation is None:
            return command
        return command.model_copy(update={"correlation": self.correlation})


Decision = ResumeCommand | _Named
"""What `Decisions` applies: a command built by the caller, or a ticket named by id."""

ClaimReceived = Callable[[Transaction], Awaitable[ReceivedRecord | None]]
"""Claims stored clicks in the transaction it is given and returns the one to apply in
it (None: there is none)."""


@dataclass(frozen=True, slots=True)
class _Claimed:
    """A stored click that `claim` takes in the transaction that applies it."""

    claim: ClaimReceived


def _received(item: ReceivedRecord) -> _Named:
    """The decision a stored click made: when it arrived, not when it is applied."""
    return _Named(
        item.ticket_id,
        ANSWER.validate_python(item.answer),
        Actor.model_validate(item.actor),
        item.received_at,
        item.correlation,
    )


class _DecidedDetails(TypedDict, total=False):
    """The fields of a `Decided` note a decision sets only where they apply."""

    reason: str
    tool: str
    edit: dict[str, Any] | None
    args: dict[str, Any]
    args_digest: str
    grant: dict[str, Any]


def _expect(state: CallState, allowed: tuple[CallState, ...], ticket: ResumeTicket) -> None:
    if state not in allowed:
        raise ResolutionError(
            f"ticket {ticket.ticket_id}: the call is {state}, which this answer does not fit"
        )


def apply_to_call(call: CallRecord, fitted: Fitted, ticket: ResumeTicket) -> None:
    """Move `call` as the fitted answer says (a deny records the blocked result).

    Raises:
        ResolutionError: The call is in a state the answer does not fit.
    """
    match fitted:
        case PermissionDecision(answer=answer):
            match answer:
                case Allow():
                    _expect(call.state, (CallState.AWAITING_DECISION,), ticket)
                    move(call, CallState.APPROVED)
                case Deny(reason=reason):
                    _deny(call, reason, ticket)
                case _:
                    assert_never(answer)
        case InputDecision(answer=answer):
            match answer:
                case InputData(data=data):
                    _expect(call.state, (CallState.AWAITING_INPUT,), ticket)
                    move(call, CallState.APPROVED)
                    call.answer = data
                case Deny(reason=reason):
                    _deny(call, reason, ticket)
                case _:
                    assert_never(answer)
        case UncertainDecision(answer=answer):
            _expect(call.state, (CallState.UNCERTAIN,), ticket)
            match answer:
                case Resolve(result=result):
                    move(call, CallState.RESOLVED)
                    call.result = result
                case Retry():
                    move(call, CallState.APPROVED)
                case Abort(reason=reason):
                    move(call, CallState.RESOLVED)
                    call.error = "aborted"
                    call.result = f"Aborted: {reason}" if reason else "Aborted by an operator"
                case _:
                    assert_never(answer)
        case PauseDecision():
            raise ResolutionError(f"ticket {ticket.ticket_id} is a pause, not about a call")
        case ChildDecision():
            # Settled by the child run's end (`runtime.engine.delegation.settle_call`).
            raise ResolutionError(f"ticket {ticket.ticket_id} is settled by its child run")
        case _:
            assert_never(fitted)


def _deny(call: CallRecord, reason: str | None, ticket: ResumeTicket) -> None:
    _expect(call.state, (CallState.AWAITING_DECISION, CallState.AWAITING_INPUT), ticket)
    move(call, CallState.DENIED)
    call.result = blocked_text(reason)


class Decisions:
    """Validates and applies resume commands, each exactly once, and continues a run once
    its decisions are in (lifting a pause by deciding its ticket)."""

    def __init__(self, deps: Deps, queries: Queries, driving: Driving) -> None:
        self._deps = deps
        self._queries = queries
        self._driving = driving

    async def by_ref(
        self, pending: TicketRef, answer: Answer, actor: Actor | str | None, resume: bool
    ) -> RunResult:
        """Decide a pending entry, ticket, ticket id or execution key."""
        now = self._deps.clock.now()
        if isinstance(pending, str):
            named = _Named(pending, answer, actor, now, by_key=True)
            return await self._decided(named, resume=resume, received=None)
        ticket = pending.ticket if isinstance(pending, PendingEntry) else pending
        command = ResumeCommand.from_ticket(ticket, answer, _actor(actor, ticket), now)
        return await self.submit(command, resume=resume)

    async def decide(
        self,
        ticket_id: str,
        answer: Answer,
        actor: Actor,
        correlation: str | None,
        *,
        resume: bool = False,
    ) -> RunResult:
        """Decide a ticket by id now (see `Runtime.decide`); `UnknownTicket` if none."""
        named = _Named(ticket_id, answer, actor, self._deps.clock.now(), correlation)
        return await self._decided(named, resume=resume, received=None)

    async def apply_received(self, item: ReceivedRecord) -> None:
        """Apply a stored click, marking it applied in the decision's own transaction (so
        a crash cannot make it look refused on the next try).

        The decision was made when the click arrived, not when it is applied: a click
        acknowledged before the deadline counts.
        """
        await self._decide(_received(item), resume=False, received=item, report=False)

    async def claim_and_apply(self, claim: ClaimReceived) -> None:
        """Claim a stored click and apply it (as `apply_received`) in one transaction.

        `claim` runs first in that transaction; when it returns None the transaction ends
        there. A refused click's transaction rolls back, its claim with it: the caller
        records the refusal.
        """
        await self._decide(_Claimed(claim), resume=False, received=None, report=False)

    @staticmethod
    def resolution(result: Any, retry: bool, abort: bool, reason: str | None) -> Answer:
        """The answer to an uncertain call, from exactly one of result, retry and abort."""
        if sum([result is not MISSING, retry, abort]) != 1:
            raise ResolutionError("choose exactly one of result=..., retry=True, abort=True")
        if result is not MISSING:
            return Resolve(result=to_jsonable(result))
        if retry:
            return Retry()
        return Abort(reason=reason)

    @staticmethod
    async def _ticket_in(tx: Transaction, named: _Named) -> ResumeTicket:
        """The committed ticket `named` names, read in the applying transaction."""
        ticket = await tx.get_ticket(named.ref)
        if ticket is not None:
            return ticket
        if not named.by_key:
            raise UnknownTicket(f"no ticket {named.ref!r} exists")
        call = await tx.call_by_execution_key(named.ref)
        if call is None:
            raise UnknownExecutionKey(f"no pending call or ticket {named.ref!r}")
        open_ticket = await tx.open_ticket_for_call(call.call_id)
        if open_ticket is None:
            raise NotAwaiting(
                f"call {call.call_id} ({call.tool}) is {call.state}, not awaiting a decision"
            )
        return open_ticket

    def validate(self, command: ResumeCommand, ticket: ResumeTicket | None) -> Edit | None:
        """`validate_resume` against the agent as loaded now, the standing grant an allow
        asks for against what its tool allows (`GrantNotAllowed`), then an allow's edit.

        Returns:
            The checked edit of an ``Allow(args=...)`` (see `runtime.domain.edits`), else None.
        """
        agent = self._deps.agents.get(ticket.agent) if ticket is not None else None
        validate_resume(
            command,
            ticket,
            agent_version=agent.version if agent is not None else None,
            catalog_fingerprint=agent.catalog_fingerprint if agent is not None else None,
        )
        answer = command.answer
        if isinstance(answer, Allow) and answer.grant is not None and ticket is not None:
            grants.check_request(ticket, answer.grant, agent)
        if ticket is None or not isinstance(answer, Allow) or answer.args is None:
            return None
        target = ticket.target
        if not isinstance(target, ToolPermission):
            return None  # an allow fits only a permission request: validate_resume said so
        tool = agent.tools.get(target.tool) if agent is not None else None
        return check_edit(tool, target, answer.args)

    async def submit(
        self,
        command: ResumeCommand,
        *,
        resume: bool = False,
        received: ReceivedRecord | None = None,
    ) -> RunResult:
        """Validate and apply one resume command (see `Runtime.submit`)."""
        return await self._decided(command, resume=resume, received=received)

    async def _decided(
        self, decision: Decision, *, resume: bool, received: ReceivedRecord | None
    ) -> RunResult:
        """Validate and apply one decision, and return the run as it then is."""
        result = await self._decide(decision, resume=resume, received=received, report=True)
        assert result is not None  # reported
        return result

    async def _decide(
        self,
        decision: Decision | _Claimed,
        *,
        resume: bool,
        received: ReceivedRecord | None,
        report: bool,
    ) -> RunResult | None:
        """Validate and apply one decision; with `report`, return the run as it then is."""
        deps = self._deps
        # Not resuming here, a run this decision makes ready goes to a free place of the
        # local worker, claimed in this transaction, if there is one.
        slot = None if resume else deps.reserve_slot()
        try:
            return await self._submit(decision, resume, received, slot, report)
        finally:
            if slot is not None:
                slot.release()

    async def _submit(
        self,
        decision: Decision | _Claimed,
        resume: bool,
        received: ReceivedRecord | None,
        slot: Slot | None,
        report: bool,
    ) -> RunResult | None:
        deps = self._deps
        async with deps.store.transaction() as tx:
            if isinstance(decision, _Claimed):
                received = await decision.claim(tx)
                if received is None:
                    return None
                decision = _received(received)
            if isinstance(decision, ResumeCommand):
                command = decision
                run = await tx.get_run(command.run_id, for_update=True)
                ticket: ResumeTicket | None = await tx.get_ticket(command.ticket_id)
            else:
                # The ticket names the run, so it is read before the run's row is locked:
                # a concurrent decision may close it meanwhile, which the compare-and-set
                # close below finds out.
                ticket = await self._ticket_in(tx, decision)
                command = decision.command(ticket)
                run = await tx.get_run(command.run_id, for_update=True)
            person = await as_person(tx, command.actor, deps.identity)
            if person is not command.actor:
                command = command.model_copy(update={"actor": person})
            edit = self.validate(command, ticket)
            assert ticket is not None and run is not None
            stale = not isinstance(decision, ResumeCommand)
            if run.cancel_requested:
                # E.g. a sub-agent's run whose parent was cancelled while it ran: it
                # stops at its next step and voids this ticket then.
                await self._refuse_stale(tx, command, stale)
                raise NotAwaiting(f"run {run.run_id} is being cancelled")
            if not await tx.close_ticket(
                ticket.ticket_id,
                status=TicketStatus.DECIDED,
                at=command.at,
                decision=command.answer,
                decided_by=command.actor.id,
            ):
                await self._refuse_stale(tx, command, stale)
                raise NotAwaiting(f"ticket {ticket.ticket_id} was decided concurrently")
            await self._apply(tx, run, ticket, command, edit)
            if received is not None:
                received.state = "applied"
                received.applied_at = deps.clock.now()
                await tx.update_received(received)
            remaining = await tx.tickets_for_run(run.run_id, status=TicketStatus.OPEN)
            claimed_calls: list[CallRecord] | None = None
            if not remaining and run.status is RunStatus.AWAITING:
                await record(tx, run.run_id, command.at, "run_ready", by=command.actor.id)
                if resume or slot is not None:
                    # Claim in the same transaction: the run row is locked already.
                    self._driving.claim_locked(run, command.at)
                    await record_claim(tx, run, command.at)
                    claimed_calls = await tx.calls_for_run(run.run_id, batch=run.batch)
                else:
                    move_run(run, RunStatus.QUEUED)
                run.updated_at = command.at
                await tx.update_run(run)
        # A stored click is applied outside the span it arrived in: its wait, and the
        # stretch it resumes, link to that span.
        clicked = click_trace(received)
        with decided_in(clicked):
            record_wait(deps, run, ticket, "decided", command)
        deps.reach(
            "decision_committed",
            ticket_id=command.ticket_id,
            decision=command.answer.kind,
            latency_seconds=(command.at - ticket.created_at).total_seconds(),
            edge=command.actor.platform,
            ticket_kind=ticket.target.kind,
        )
        if claimed_calls is not None and slot is not None:
            with decided_in(clicked):  # the task driving it is created here
                slot.use(run.run_id, self._driving.proceed(run, calls=claimed_calls))
            return await self._report(command, report)
        if claimed_calls is not None:
            with decided_in(clicked):
                return await self._driving.drive_claimed(run, calls=claimed_calls)
        if resume and not remaining:
            # Ready but not awaiting (e.g. paused meanwhile): the usual path decides.
            return await self.resume(command.run_id, command.actor, wait=True)
        return await self._report(command, report)

    async def _refuse_stale(self, tx: Transaction, command: ResumeCommand, stale: bool) -> None:
        """Refuse `command` as the ticket committed now warrants, when the ticket it was
        checked against was read before the run's lock (off the hot path: only when the
        decision is refused anyway), so that it is refused as if read under the lock."""
        if stale:
            self.validate(command, await tx.get_ticket(command.ticket_id))

    async def _report(self, command: ResumeCommand, report: bool) -> RunResult | None:
        """The run as it now is, read only for a caller that wants it."""
        return await self._queries.get(command.run_id) if report else None

    async def resume(
        self, run_or_thread_id: str, actor: Actor | str | None, wait: bool
    ) -> RunResult:
        """Continue a run whose decisions are all in, or a paused run (and the runs of
        its sub-agents that were paused with it)."""
        run = await self._queries.find_run(run_or_thread_id)
        if run.status is RunStatus.PAUSED:
            run = await self._unpause(run, actor)
        below = await self._below(run.run_id)
        for child in below:
            if child.status is RunStatus.PAUSED:
                await self._unpause(child, actor)
        if wait:
            if run.status in (RunStatus.QUEUED, RunStatus.RUNNING):
                await self._driving.drive(run.run_id)
            else:
                # Waiting on a sub-agent whose decisions are in: continue the deepest
                # first; each hands over to its parent when it ends.
                for child in reversed(await self._below(run.run_id)):
                    if child.status is RunStatus.QUEUED:
                        await self._driving.drive(child.run_id)
        return await self._queries.get(run.run_id)

    async def _below(self, run_id: str) -> list[RunRecord]:
        async with self._deps.store.transaction() as tx:
            return await delegation.descendants(tx, run_id)

    async def _unpause(self, run: RunRecord, actor: Actor | str | None) -> RunRecord:
        deps = self._deps
        async with deps.store.transaction() as tx:
            tickets = await tx.tickets_for_run(run.run_id, status=TicketStatus.OPEN)
            pause = next((t for t in tickets if isinstance(t.target, Pause)), None)
        if pause is not None:
            who = (
                actor
                if isinstance(actor, Actor)
                else Actor(id=actor or run.requester or "system", platform="api")
            )
            await self.submit(ResumeCommand.from_ticket(pause, Continue(), who, deps.clock.now()))
        now = deps.clock.now()
        async with deps.store.transaction() as tx:
            current = await tx.get_run(run.run_id, for_update=True)
            assert current is not None
            if current.status is RunStatus.PAUSED:
                still_open = await tx.tickets_for_run(run.run_id, status=TicketStatus.OPEN)
                move_run(current, RunStatus.AWAITING if still_open else RunStatus.QUEUED)
                current.updated_at = now
                current.fence += 1
                await tx.update_run(current)
                await record(tx, run.run_id, now, "run_resumed", by=actor_id(actor))
            return current

    async def _apply(
        self,
        tx: Transaction,
        run: RunRecord,
        ticket: ResumeTicket,
        command: ResumeCommand,
        edit: Edit | None,
    ) -> None:
        answer = command.answer
        actor = command.actor
        fitted = fit(ticket.target, answer)
        if fitted is None:
            raise ResolutionError(f"a {answer.kind} answer does not fit a {ticket.target.kind}")
        reason = getattr(answer, "reason", None)
        # Only what applies is written: a decision without a reason or a call has no
        # such fields in its stored notification.
        described: _DecidedDetails = {"reason": reason} if reason else {}
        grant: GrantRecord | None = None
        match fitted:
            case PermissionDecision() | InputDecision() | UncertainDecision():
                call = await tx.get_call(fitted.target.call_id)
                if call is None:
                    raise ResolutionError(f"ticket {ticket.ticket_id} names an unknown call")
                agent = self._deps.agents.get(ticket.agent)
                described["tool"] = call.tool
                if edit is not None and edit.changes:
                    # Re-bound to the changed arguments: the tool runs with these.
                    call.args = edit.args
                    call.edit = edit.record(
                        actor.name or actor.id, display_args(agent, call.tool, edit.args)
                    )
                    described["edit"] = call.edit
                described["args"] = display_args(agent, call.tool, call.args)
                if isinstance(answer, Allow):
                    described["args_digest"] = args_digest(call.args)
                call.decided_by = actor.model_dump(mode="json")
                call.updated_at = command.at
                call.reason = reason
                apply_to_call(call, fitted, ticket)
                await tx.update_call(call)
                if isinstance(answer, Allow) and answer.grant is not None:
                    grant = grants.new_grant(
                        self._deps, run, ticket, call, actor, answer.grant, command.at
                    )
                    described["grant"] = grants.summary(grant, agent)
            case PauseDecision():
                pass
            case ChildDecision():
                raise ResolutionError(f"ticket {ticket.ticket_id} is settled by its child run")
            case _:
                assert_never(fitted)
        decided = Decided(
            run_id=run.run_id,
            agent=run.agent,
            ticket_id=ticket.ticket_id,
            decision=answer.kind,
            actor=actor.id,
            actor_name=actor.name,
            platform=actor.platform,
            decided_at=command.at.isoformat(),
            **described,
        )
        # The decision of a call the agent's policy saw names the policy and its version.
        policy = ticket.target.policy if isinstance(ticket.target, ToolPermission) else None
        under = {"policy": policy} if policy is not None else {}
        await record(
            tx, run.run_id, command.at, "ticket_decided", by=actor.id, **decided.details(), **under
        )
        await notify(self._deps, tx, run, decided)
        if grant is not None:
            # In the decision's transaction: the grant exists exactly when the allow does.
            await grants.give(tx, self._deps, grant, policy=policy)
            await grants.cover_open(tx, self._deps, run, grant, actor, command.at)
