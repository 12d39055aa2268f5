"""The `Runtime`: start runs, decide tickets, resume, pause, cancel and recover."""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from runtime._engine import Driver, blocked_text, cancel_in
from runtime._support import (
    Checkpoint,
    Deps,
    ResultMiddlewareInput,
    display_args,
    move,
    notify,
    open_ticket,
    record,
    to_jsonable,
)
from runtime.accepting import (
    Accepted,
    AcceptOutcome,
    ActorSource,
    Decidable,
    FormOutcome,
    Refused,
)
from runtime.agent import Agent
from runtime.clock import Clock, IdSource, RandomIds, SystemClock
from runtime.errors import (
    AccessDenied,
    ConfigurationError,
    IdempotencyConflict,
    LeaseLost,
    NotAwaiting,
    ResolutionError,
    ResumeError,
    RunNotFound,
    SignoffError,
    StorageError,
    UnknownExecutionKey,
    UnknownTicket,
)
from runtime.model import Model
from runtime.refusals import Refusal, classify
from runtime.results import PendingEntry, RunResult, pending_entry, run_result
from runtime.states import CallState, RunStatus, TicketStatus, check_run_move
from runtime.store.base import DuplicateKey, Store, Transaction
from runtime.store.records import (
    CallRecord,
    IdempotencyRecord,
    OutboxRecord,
    ReceivedRecord,
    RunRecord,
)
from runtime.tickets import (
    ANSWER,
    Abort,
    Actor,
    Allow,
    Answer,
    AnswerKind,
    Continue,
    Deny,
    InputData,
    Pause,
    RemoteInput,
    Resolve,
    ResumeCommand,
    ResumeTicket,
    Retry,
    ToolPermission,
    Uncertain,
    check_decidable,
    validate_resume,
)
from runtime.tools import Escalate, ExpiryAction
from runtime.visibility import is_chat_thread, may_join_thread, sees_run

_MISSING: Any = object()
# How many runs of a thread are checked for its participants, and how many of the latest
# ones make up a new run's history.
_THREAD_SCAN = 1000
_HISTORY_RUNS = 50
# Open tickets scanned for the ones a user may decide (who may decide is not a column).
_TICKET_SCAN = 10_000

TicketRef = PendingEntry | ResumeTicket | str
"""A pending entry, a ticket, a ticket id or an execution key."""


def _idempotency_keys(
    given: tuple[str, str, str] | Sequence[tuple[str, str, str]] | None,
) -> list[tuple[str, str, str]]:
    """One ``(scope, key, fingerprint)`` or several, as a list."""
    if given is None:
        return []
    if len(given) == 3 and isinstance(given[0], str):
        scope, key, fingerprint = given
        return [(str(scope), str(key), str(fingerprint))]
    return [tuple(item) for item in given]  # type: ignore[misc]


def _seq(entry: PendingEntry, calls: dict[str, CallRecord]) -> int:
    call = calls.get(entry.call.call_id)
    return call.seq if call is not None else -1


CARD_KINDS = ("approval_requested", "input_requested", "uncertain")
"""Notifications that post a card asking for a decision."""


@dataclass(frozen=True, slots=True)
class CardRef:
    """Where a ticket's card was posted.

    Attributes:
        kind: The notification that posted it (one of `CARD_KINDS`).
        ref: The platform's message reference (empty until it was posted).
        destination: Where it was addressed (the run's origin: channel, guild ...).
    """

    kind: str
    ref: dict[str, Any]
    destination: dict[str, Any]


class _Refusing(Exception):
    """Internal: leave a transaction (rolling it back) with this refusal."""

    def __init__(self, refusal: Refusal) -> None:
        super().__init__(refusal.message)
        self.refusal = refusal


@dataclass(frozen=True, slots=True)
class ReceivedOutcome:
    """What `Runtime.apply_received` did with one stored decision."""

    command: ReceivedRecord
    error: SignoffError | None

    @property
    def applied(self) -> bool:
        """Whether the decision was applied."""
        return self.error is None


class Runtime:
    """Starts runs and applies decisions; every state change is committed to the store.

    Args:
        store: Where runs, calls, tickets, events and notifications live.
        agents: The agents this runtime can run (more with `register`).
        clock: The time source (default: the system clock).
        ids: The id source (default: random ids).
        worker_id: Names this process in leases (default: host and pid).
        lease_seconds: How long a claim lasts without a heartbeat.
        checkpoint: Observer of named execution points (crash tests use it).
        result_middleware: Callables turning a recorded raw result into what the model
            sees; they run after the raw result is committed.
        model_resolver: Turns an agent's model spec (``"openai:gpt-4.1-mini"``) into a
            `Model` when the agent is registered; needed only for agents whose model is
            a string.
    """

    def __init__(
        self,
        store: Store,
        agents: Iterable[Agent] = (),
        *,
        clock: Clock | None = None,
        ids: IdSource | None = None,
        worker_id: str | None = None,
        lease_seconds: float = 30.0,
        checkpoint: Checkpoint | None = None,
        result_middleware: Sequence[Callable[[ResultMiddlewareInput], str]] = (),
        model_resolver: Callable[[str], Model] | None = None,
    ) -> None:
        if lease_seconds <= 0:
            raise ConfigurationError("lease_seconds must be positive")
        self._deps = Deps(
            store=store,
            clock=clock or SystemClock(),
            ids=ids or RandomIds(),
            agents={},
            worker_id=worker_id or f"{socket.gethostname()}:{os.getpid()}",
            lease_seconds=lease_seconds,
            checkpoint=checkpoint,
            result_middleware=list(result_middleware),
        )
        self._model_resolver = model_resolver
        for agent in agents:
            self.register(agent)

    # -- configuration -------------------------------------------------------------
    @property
    def store(self) -> Store:
        """The store."""
        return self._deps.store

    @property
    def clock(self) -> Clock:
        """The clock."""
        return self._deps.clock

    @property
    def worker_id(self) -> str:
        """How this process is named in leases."""
        return self._deps.worker_id

    @property
    def agents(self) -> dict[str, Agent]:
        """Registered agents by name."""
        return dict(self._deps.agents)

    def register(self, agent: Agent) -> Agent:
        """Make `agent` runnable; a model given as a spec is resolved now.

        Raises:
            ConfigurationError: If another agent already has its name, or its model is a
                spec and there is no ``model_resolver`` (or the resolver refuses it: an
                unknown provider, a missing API key).
        """
        existing = self._deps.agents.get(agent.name)
        if existing is agent:
            return agent
        if existing is not None:
            raise ConfigurationError(f"an agent named {agent.name!r} is already registered")
        if isinstance(agent.model, str):
            if self._model_resolver is None:
                raise ConfigurationError(
                    f"agent {agent.name!r}: its model is the spec {agent.model!r}, and this "
                    "Runtime has no model_resolver to turn it into a model (pass a Model, "
                    "or Runtime(..., model_resolver=adapters.models.ModelResolver(...)))"
                )
            try:
                model = self._model_resolver(agent.model)
            except ConfigurationError as exc:
                raise ConfigurationError(f"agent {agent.name!r}: {exc}") from exc
        else:
            model = agent.model
        self._deps.models[agent.name] = model
        self._deps.agents[agent.name] = agent
        return agent

    def _agent(self, name: str | Agent) -> Agent:
        if isinstance(name, Agent):
            return self.register(name)
        try:
            return self._deps.agents[name]
        except KeyError:
            known = ", ".join(sorted(self._deps.agents)) or "none"
            raise ConfigurationError(f"no agent named {name!r} (loaded: {known})") from None

    # -- starting ------------------------------------------------------------------
    async def start(
        self,
        agent: str | Agent,
        input: str,
        *,
        requester: str | None = None,
        thread_id: str | None = None,
        origin: dict[str, Any] | None = None,
        wait: bool = True,
        idempotency: tuple[str, str, str] | Sequence[tuple[str, str, str]] | None = None,
        joining_as: Actor | None = None,
    ) -> RunResult:
        """Start a run of `agent` on `input`.

        Args:
            agent: The agent or its name.
            input: The user's message.
            requester: The user starting the run; by default only they may decide.
            thread_id: Continue a conversation: the run sees the thread's earlier runs.
            origin: Where notifications go (platform, channel, thread ...), copied onto
                every outbox row.
            wait: Execute now until the run parks or ends (True), or only queue it for a
                worker (False).
            idempotency: ``(scope, key, fingerprint)``, or several: a key already used
                in `scope` returns the run it started and starts nothing; with another
                fingerprint (request body hash) it raises `IdempotencyConflict`. Every
                given key is recorded for the new run.
            joining_as: The authenticated user of an edge where threads are private (API,
                console): a `thread_id` with runs must be one they take part in, and
                never a chat platform's thread (`runtime.visibility`).

        Returns:
            The run as it stands: ``awaiting`` with ``pending`` entries, ``done`` with
            ``text``, ``failed``, or ``queued`` when not waiting.
        """
        chosen = self._agent(agent)
        deps = self._deps
        now = deps.clock.now()
        thread = thread_id or deps.ids.new_id("th")
        history: list[dict[str, Any]] = []
        if thread_id is not None:
            if joining_as is not None and is_chat_thread(thread_id):
                raise AccessDenied(
                    f"thread {thread_id!r} belongs to a chat platform; continue it there"
                )
            async with deps.store.transaction() as tx:
                earlier = await tx.list_runs(thread_id=thread_id, limit=_THREAD_SCAN)
            if joining_as is not None and not may_join_thread(
                joining_as, (r.requester for r in earlier)
            ):
                raise AccessDenied(
                    f"{joining_as.id} does not take part in thread {thread_id!r}; "
                    "only its participants and operators may continue it"
                )
            for previous in reversed(earlier[:_HISTORY_RUNS]):
                if previous.status is RunStatus.DONE:
                    history.append({"role": "user", "content": previous.input})
                    history.append({"role": "assistant", "content": previous.final_text})
        run = RunRecord(
            run_id=deps.ids.new_id("run"),
            thread_id=thread,
            agent=chosen.name,
            agent_version=chosen.version,
            status=RunStatus.QUEUED,
            input=input,
            requester=requester,
            created_at=now,
            updated_at=now,
            origin=dict(origin or {}),
            messages=[*history, {"role": "user", "content": input}],
        )
        if wait:
            # Insert the run already claimed by this worker, so starting costs one commit.
            run.status = RunStatus.RUNNING
            run.fence = 1
            run.lease_owner = deps.worker_id
            run.lease_expires_at = now + timedelta(seconds=deps.lease_seconds)
            run.model_attempt = 1
            run.model_in_flight = True
        for attempt in (1, 2):
            try:
                earlier_id = await self._insert_run(run, idempotency)
                break
            except DuplicateKey:
                # A concurrent request with the same key won the insert; read its run.
                if attempt == 2:
                    raise
        if earlier_id is not None:
            return await self.get(earlier_id)
        if wait:
            return await self._drive_claimed(run, model_marked=True)
        return await self.get(run.run_id)

    async def _insert_run(
        self,
        run: RunRecord,
        idempotency: tuple[str, str, str] | Sequence[tuple[str, str, str]] | None,
    ) -> str | None:
        requester = run.requester
        keys = _idempotency_keys(idempotency)
        async with self._deps.store.transaction() as tx:
            earlier_id = await self._use_keys(tx, keys, run.run_id)
            if earlier_id is not None:
                return earlier_id
            await tx.insert_run(run)
            await record(
                tx,
                run.run_id,
                run.created_at,
                "run_started",
                by=requester,
                agent=run.agent,
                input=run.input,
                thread_id=run.thread_id,
                origin=run.origin,
            )
        return None

    async def _use_keys(
        self, tx: Transaction, keys: Sequence[tuple[str, str, str]], run_id: str
    ) -> str | None:
        """The run an already used key started (None if every key is new); every new key
        is recorded for that run, or for `run_id`."""
        earlier_id = None
        new = []
        for scope, key, fingerprint in keys:
            earlier = await tx.get_idempotency(scope, key)
            if earlier is None:
                new.append((scope, key, fingerprint))
            elif earlier.fingerprint != fingerprint:
                raise IdempotencyConflict(
                    f"idempotency key {key!r} was already used with a different request body"
                )
            elif earlier_id is None:
                earlier_id = earlier.run_id
        now = self._deps.clock.now()
        for scope, key, fingerprint in new:
            await tx.insert_idempotency(
                IdempotencyRecord(scope, key, fingerprint, earlier_id or run_id, now)
            )
        return earlier_id

    async def card_of(self, ticket_id: str, platform: str) -> CardRef | None:
        """Where the card asking for a ticket's decision was posted on `platform`."""
        async with self._deps.store.transaction() as tx:
            for kind in CARD_KINDS:
                item = await tx.find_outbox(ticket_id=ticket_id, kind=kind)
                if item is not None and item.destination.get("platform") == platform:
                    return CardRef(kind, dict(item.platform_ref or {}), dict(item.destination))
        return None

    async def started_by(self, scope: str, key: str) -> str | None:
        """The run an idempotency key already started in `scope`, if any."""
        async with self._deps.store.transaction() as tx:
            found = await tx.get_idempotency(scope, key)
        return found.run_id if found is not None else None

    async def forget_idempotency(self, scope: str, before: datetime) -> int:
        """Forget the idempotency keys of `scope` first used before `before`.

        Returns:
            How many were forgotten.
        """
        async with self._deps.store.transaction() as tx:
            return await tx.forget_idempotency(scope, before)

    # -- console sessions --------------------------------------------------------------
    async def revoke_session(self, session_id: str, expires_at: datetime) -> None:
        """Refuse a signed-out session until `expires_at`, in every process sharing the
        database; revocations of sessions that have expired are forgotten on the way."""
        async with self._deps.store.transaction() as tx:
            await tx.forget_revoked_sessions(self._deps.clock.now())
            await tx.revoke_session(session_id, expires_at)

    async def session_revoked(self, session_id: str) -> bool:
        """Whether a session was signed out."""
        async with self._deps.store.transaction() as tx:
            return await tx.session_revoked(session_id)

    # -- reading ---------------------------------------------------------------------
    async def get(self, run_id: str, *, viewer: Actor | None = None) -> RunResult:
        """The run's current state and what it waits on.

        Args:
            run_id: The run.
            viewer: Who is looking (see `runtime.visibility`); None for trusted host code.

        Raises:
            RunNotFound: No such run, or `viewer` may not see it.
        """
        async with self._deps.store.transaction() as tx:
            return await self._get_in(tx, run_id, viewer)

    async def _get_in(self, tx: Transaction, run_id: str, viewer: Actor | None = None) -> RunResult:
        run = await tx.get_run(run_id)
        if run is None or not await self._sees(tx, viewer, run):
            raise RunNotFound(f"no run {run_id!r}")
        return run_result(run, await self._pending(tx, run))

    async def _sees(self, tx: Transaction, viewer: Actor | None, run: RunRecord) -> bool:
        if viewer is None or viewer.operator or viewer.id == run.requester:
            return True
        return sees_run(viewer, run.requester, await tx.tickets_for_run(run.run_id))

    async def ticket(self, ticket_id: str, *, viewer: Actor | None = None) -> ResumeTicket:
        """A ticket as committed, open or closed.

        Args:
            ticket_id: The ticket.
            viewer: Who is looking: they must be able to see its run, or be someone who
                may decide it (so the loser of a race learns who won). Others get
                `UnknownTicket`, as if it did not exist.

        Raises:
            UnknownTicket: No such ticket, or `viewer` may not see it.
        """
        async with self._deps.store.transaction() as tx:
            ticket = await tx.get_ticket(ticket_id)
            visible = ticket is not None and (
                viewer is None
                or ticket.may_decide(viewer)
                or await self._sees_run_id(tx, viewer, ticket.run_id)
            )
        if ticket is None or not visible:
            raise UnknownTicket(f"no ticket {ticket_id!r} exists")
        return ticket

    async def _sees_run_id(self, tx: Transaction, viewer: Actor, run_id: str) -> bool:
        run = await tx.get_run(run_id)
        return run is not None and await self._sees(tx, viewer, run)

    async def may_see(self, run_id: str, viewer: Actor) -> bool:
        """Whether `viewer` may see the run (False for an unknown run too)."""
        async with self._deps.store.transaction() as tx:
            run = await tx.get_run(run_id)
            return run is not None and await self._sees(tx, viewer, run)

    async def _pending(self, tx: Transaction, run: RunRecord) -> tuple[PendingEntry, ...]:
        if run.status.finished:
            return ()
        tickets = await tx.tickets_for_run(run.run_id, status=TicketStatus.OPEN)
        if not any(t.call_id for t in tickets):
            return ()
        calls = {c.call_id: c for c in await tx.calls_for_run(run.run_id, batch=run.batch)}
        agent = self._deps.agents.get(run.agent)
        entries = []
        for ticket in tickets:
            call = calls.get(ticket.call_id or "")
            if call is None and ticket.call_id is not None:
                call = await tx.get_call(ticket.call_id)
            if call is None:
                continue
            entries.append(pending_entry(ticket, call, display_args(agent, call.tool, call.args)))
        entries.sort(key=lambda e: (e.ticket.created_at, e.call.call_id in calls, _seq(e, calls)))
        return tuple(entries)

    async def list_runs(
        self,
        *,
        statuses: Sequence[RunStatus | str] = (),
        thread_id: str | None = None,
        limit: int = 100,
        viewer: Actor | None = None,
    ) -> list[RunResult]:
        """Runs, newest first, optionally filtered by status or thread (no pending lists).

        Args:
            statuses: Only runs in these statuses.
            thread_id: Only runs of this thread.
            limit: At most this many.
            viewer: Only the runs this user may see (see `runtime.visibility`).
        """
        wanted = [RunStatus(s) for s in statuses]
        async with self._deps.store.transaction() as tx:
            if viewer is None or viewer.operator:
                found = await tx.list_runs(statuses=wanted, thread_id=thread_id, limit=limit)
            else:
                deciding = {
                    t.run_id
                    for t in await tx.open_tickets(limit=_TICKET_SCAN)
                    if t.may_decide(viewer)
                }
                found = await tx.list_runs(
                    statuses=wanted,
                    thread_id=thread_id,
                    limit=limit,
                    involving=viewer.id,
                    including=sorted(deciding),
                )
        return [run_result(run, ()) for run in found]

    async def run_counts(self) -> dict[str, int]:
        """How many runs there are in each status."""
        async with self._deps.store.transaction() as tx:
            return await tx.count_runs()

    async def events(self, run_id: str, *, viewer: Actor | None = None) -> list[dict[str, Any]]:
        """The run's flight recorder as plain dicts, oldest first.

        Raises:
            RunNotFound: No such run, or `viewer` may not see it.
        """
        async with self._deps.store.transaction() as tx:
            run = await tx.get_run(run_id)
            if run is None or not await self._sees(tx, viewer, run):
                raise RunNotFound(f"no run {run_id!r}")
            found = await tx.events(run_id)
        return [
            {
                "seq": e.seq,
                "at": e.at.isoformat(),
                "run_id": e.run_id,
                "kind": e.kind,
                "actor": e.actor,
                "data": e.data,
            }
            for e in found
        ]

    async def export_events(self, run_id: str, *, viewer: Actor | None = None) -> str:
        """The run's flight recorder as JSON lines."""
        found = await self.events(run_id, viewer=viewer)
        return "".join(json.dumps(e, default=str) + "\n" for e in found)

    async def open_tickets(
        self, limit: int = 100, *, viewer: Actor | None = None
    ) -> list[PendingEntry]:
        """Open tool-call tickets across runs, oldest first.

        Args:
            limit: At most this many.
            viewer: Only the tickets this user may decide (operators: all).
        """
        restricted = viewer is not None and not viewer.operator
        async with self._deps.store.transaction() as tx:
            tickets = await tx.open_tickets(limit=_TICKET_SCAN if restricted else limit)
            entries: list[PendingEntry] = []
            for ticket in tickets:
                if ticket.call_id is None:
                    continue
                if restricted and viewer is not None and not ticket.may_decide(viewer):
                    continue
                if len(entries) >= limit:
                    break
                call = await tx.get_call(ticket.call_id)
                if call is None:
                    continue
                agent = self._deps.agents.get(ticket.agent)
                entries.append(
                    pending_entry(ticket, call, display_args(agent, call.tool, call.args))
                )
        return entries

    # -- decisions -------------------------------------------------------------------
    async def approve(
        self, pending: TicketRef, *, actor: Actor | str | None = None, resume: bool = False
    ) -> RunResult:
        """Allow a pending tool call.

        Args:
            pending: A pending entry, ticket, ticket id or execution key.
            actor: Who decides (default: the run's requester, for trusted host code).
            resume: Continue the run now if this was the last open decision.
        """
        return await self._decide_ref(pending, Allow(), actor, resume)

    async def decline(
        self,
        pending: TicketRef,
        *,
        actor: Actor | str | None = None,
        reason: str | None = None,
        resume: bool = False,
    ) -> RunResult:
        """Deny a pending tool call (or input request); the model sees a blocked result."""
        return await self._decide_ref(pending, Deny(reason=reason), actor, resume)

    async def answer(
        self,
        pending: TicketRef,
        data: dict[str, Any],
        *,
        actor: Actor | str | None = None,
        resume: bool = False,
    ) -> RunResult:
        """Answer a typed-input request; `data` is validated against its schema."""
        return await self._decide_ref(pending, InputData(data=data), actor, resume)

    async def resolve_tool(
        self,
        pending: TicketRef,
        *,
        result: Any = _MISSING,
        retry: bool = False,
        abort: bool = False,
        reason: str | None = None,
        actor: Actor | str | None = None,
        resume: bool = False,
    ) -> RunResult:
        """Resolve an uncertain call: record its verified `result`, `retry` it, or `abort`.

        Raises:
            ResolutionError: Unless exactly one of result, retry and abort is given.
        """
        chosen = [result is not _MISSING, retry, abort]
        if sum(chosen) != 1:
            raise ResolutionError("choose exactly one of result=..., retry=True, abort=True")
        answer: Answer
        if result is not _MISSING:
            answer = Resolve(result=to_jsonable(result))
        elif retry:
            answer = Retry()
        else:
            answer = Abort(reason=reason)
        return await self._decide_ref(pending, answer, actor, resume)

    async def _decide_ref(
        self, pending: TicketRef, answer: Answer, actor: Actor | str | None, resume: bool
    ) -> RunResult:
        ticket = await self._find_ticket(pending)
        who = self._actor(actor, ticket)
        command = ResumeCommand.from_ticket(ticket, answer, who, self._deps.clock.now())
        return await self.submit(command, resume=resume)

    def _actor(self, actor: Actor | str | None, ticket: ResumeTicket) -> Actor:
        if isinstance(actor, Actor):
            return actor
        if isinstance(actor, str):
            return Actor(id=actor)
        return Actor(id=ticket.requester or "system", platform="api")

    async def _find_ticket(self, pending: TicketRef) -> ResumeTicket:
        if isinstance(pending, PendingEntry):
            return pending.ticket
        if isinstance(pending, ResumeTicket):
            return pending
        async with self._deps.store.transaction() as tx:
            ticket = await tx.get_ticket(pending)
            if ticket is not None:
                return ticket
            call = await tx.call_by_execution_key(pending)
            if call is None:
                raise UnknownExecutionKey(f"no pending call or ticket {pending!r}")
            open_ticket = await tx.open_ticket_for_call(call.call_id)
            if open_ticket is None:
                raise NotAwaiting(
                    f"call {call.call_id} ({call.tool}) is {call.state}, not awaiting a decision"
                )
            return open_ticket

    async def decide(
        self,
        ticket_id: str,
        answer: Answer,
        actor: Actor,
        *,
        correlation: str | None = None,
        resume: bool = False,
    ) -> RunResult:
        """Decide a ticket by id, as a chat or HTTP edge does.

        Args:
            ticket_id: The ticket the click or request names.
            answer: The typed answer.
            actor: The authenticated user.
            correlation: The token the click carried; checked against the ticket.
            resume: Continue the run now if this was its last open decision.
        """
        async with self._deps.store.transaction() as tx:
            ticket = await tx.get_ticket(ticket_id)
        if ticket is None:
            raise UnknownTicket(f"no ticket {ticket_id!r} exists")
        command = ResumeCommand.from_ticket(ticket, answer, actor, self._deps.clock.now())
        if correlation is not None:
            command = command.model_copy(update={"correlation": correlation})
        return await self.submit(command, resume=resume)

    async def check(
        self, ticket_id: str, answer: Answer, actor: Actor, *, correlation: str
    ) -> ResumeTicket:
        """Validate a decision without applying it (a chat edge does this before acking).

        Raises the same errors as `decide` would and changes nothing.

        Returns:
            The committed ticket the decision is about.
        """
        deps = self._deps
        async with deps.store.transaction() as tx:
            ticket = await tx.get_ticket(ticket_id)
        if ticket is None:
            raise UnknownTicket(f"no ticket {ticket_id!r} exists")
        command = ResumeCommand.from_ticket(ticket, answer, actor, deps.clock.now())
        command = command.model_copy(update={"correlation": correlation})
        agent = deps.agents.get(ticket.agent)
        validate_resume(
            command,
            ticket,
            agent_version=agent.version if agent is not None else None,
            catalog_fingerprint=agent.catalog_fingerprint if agent is not None else None,
        )
        return ticket

    async def accept(
        self,
        ticket_id: str,
        answer: Answer,
        actor: ActorSource,
        *,
        correlation: str,
        source: str,
        delivery_id: str,
        reply: dict[str, Any] | None = None,
    ) -> AcceptOutcome:
        """Check a click and store it durably, in one transaction (see `runtime.accepting`).

        Args:
            ticket_id: The ticket the click names.
            answer: The typed answer.
            actor: The clicker, or a function finding them from the ticket.
            correlation: The token the click carried.
            source: The platform, e.g. ``slack``.
            delivery_id: The platform's id of this delivery (its retries repeat it).
            reply: Where the edge wants word if the decision is refused when applied.

        Returns:
            `Accepted` (stored, or already stored by an earlier delivery) or `Refused`.
        """
        deps = self._deps
        try:
            who = await self._resolve_actor(actor, ticket_id)
            now = deps.clock.now()
            item = ReceivedRecord(
                command_id=deps.ids.new_id("rc"),
                source=source,
                delivery_id=delivery_id,
                ticket_id=ticket_id,
                correlation=correlation,
                answer=ANSWER.dump_python(answer, mode="json"),
                actor=who.model_dump(mode="json"),
                received_at=now,
                reply=reply,
            )
            try:
                async with deps.store.transaction() as tx:
                    ticket = await tx.get_ticket(ticket_id)
                    # A retry of a stored delivery is recognised before the check: the
                    # ticket may be decided by now, by this very click.
                    if not await tx.insert_received(item):
                        return Accepted(ticket, stored=False)
                    try:
                        self._check_click(ticket, ticket_id, answer, who, correlation, now)
                    except ResumeError as exc:
                        # Leaving the block by an exception rolls the insert back.
                        raise _Refusing(classify(exc, ticket)) from exc
            except DuplicateKey:
                return Accepted(None, stored=False)  # a concurrent delivery won the insert
        except _Refusing as refusing:
            return Refused(refusing.refusal)
        except StorageError as exc:
            return Refused(classify(exc, None))
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
        agent = self._deps.agents.get(ticket.agent)
        command = ResumeCommand.from_ticket(ticket, answer, actor, at)
        validate_resume(
            command.model_copy(update={"correlation": correlation}),
            ticket,
            agent_version=agent.version if agent is not None else None,
            catalog_fingerprint=agent.catalog_fingerprint if agent is not None else None,
        )

    async def may_answer(
        self, ticket_id: str, kind: AnswerKind, actor: ActorSource, *, correlation: str
    ) -> FormOutcome:
        """Whether `actor` may answer the ticket with an answer of `kind` now.

        For a button that opens a form: everything a decision is checked for except the
        answer's content. Changes nothing.
        """
        deps = self._deps
        try:
            who = await self._resolve_actor(actor, ticket_id)
            async with deps.store.transaction() as tx:
                ticket = await tx.get_ticket(ticket_id)
        except StorageError as exc:
            return Refused(classify(exc, None))
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

    async def _resolve_actor(self, actor: ActorSource, ticket_id: str) -> Actor:
        if isinstance(actor, Actor):
            return actor
        async with self._deps.store.transaction() as tx:
            ticket = await tx.get_ticket(ticket_id)
        return await actor(ticket)

    async def receive(
        self,
        ticket_id: str,
        answer: Answer,
        actor: Actor,
        *,
        correlation: str,
        source: str,
        delivery_id: str,
        reply: dict[str, Any] | None = None,
    ) -> bool:
        """Store a decision durably, to be applied later by `apply_received`.

        A chat edge calls this before acknowledging a click, so that a crash after the
        acknowledgement cannot lose it. One short transaction.

        Args:
            ticket_id: The ticket the click names.
            answer: The typed answer.
            actor: The authenticated user.
            correlation: The token the click carried.
            source: The platform, e.g. ``slack``.
            delivery_id: The platform's id of this delivery (retries repeat it).
            reply: Anything the edge wants back with the outcome (e.g. a response URL).

        Returns:
            False if this delivery was received before (a retry); nothing is stored then.
        """
        deps = self._deps
        item = ReceivedRecord(
            command_id=deps.ids.new_id("rc"),
            source=source,
            delivery_id=delivery_id,
            ticket_id=ticket_id,
            correlation=correlation,
            answer=ANSWER.dump_python(answer, mode="json"),
            actor=actor.model_dump(mode="json"),
            received_at=deps.clock.now(),
            reply=reply,
        )
        try:
            async with deps.store.transaction() as tx:
                return await tx.insert_received(item)
        except DuplicateKey:
            return False

    async def apply_received(self, limit: int = 20) -> list[ReceivedOutcome]:
        """Apply stored decisions, oldest first, each exactly once.

        A decision refused now (e.g. the loser of two concurrent clicks, or a ticket that
        expired meanwhile) is marked refused and changes nothing else; when the edge gave
        a `reply` destination, a ``decision_refused`` notification tells the clicker. A
        run whose last decision this was is left ready for a worker.

        Returns:
            What happened to each command.
        """
        deps = self._deps
        now = deps.clock.now()
        async with deps.store.transaction() as tx:
            # Claimed, so that of several processes only one applies (or refuses) each.
            pending = await tx.claim_received(
                now,
                limit,
                owner=deps.worker_id,
                until=now + timedelta(seconds=deps.lease_seconds),
            )
        outcomes = []
        for item in pending:
            error: SignoffError | None = None
            try:
                async with deps.store.transaction() as tx:
                    ticket = await tx.get_ticket(item.ticket_id)
                if ticket is None:
                    raise UnknownTicket(f"no ticket {item.ticket_id!r} exists")
                # The decision was made when the click arrived, not when it is applied:
                # a click acknowledged before the deadline counts.
                command = ResumeCommand.from_ticket(
                    ticket,
                    ANSWER.validate_python(item.answer),
                    Actor.model_validate(item.actor),
                    item.received_at,
                ).model_copy(update={"correlation": item.correlation})
                # Marked applied in the decision's own transaction, so a crash cannot
                # make it look refused on the next try.
                await self.submit(command, received=item)
            except (ResumeError, RunNotFound) as exc:
                error = exc
            if error is not None:
                item.applied_at = deps.clock.now()
                item.state = "refused"
                item.error_code = getattr(error, "code", type(error).__name__)
                item.error = str(error)
                async with deps.store.transaction() as tx:
                    # Another process may have applied it meanwhile (its claim expired).
                    if not await tx.update_received(item, only_pending=True):
                        continue
                    if item.reply is not None:
                        await self._tell_refused(tx, item, error)
            outcomes.append(ReceivedOutcome(item, error))
        return outcomes

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
        await tx.add_outbox(
            OutboxRecord(
                outbox_id=self._deps.ids.new_id("ob"),
                run_id=run.run_id,
                kind="decision_refused",
                payload={
                    "run_id": run.run_id,
                    "agent": run.agent,
                    "ticket_id": item.ticket_id,
                    "error": item.error_code,
                    "reason": refusal.reason.value,
                    "decided_by": refusal.decided_by,
                    "message": item.error,
                    "actor": item.actor.get("id"),
                },
                destination={**(item.reply or {}), "platform": item.source},
                created_at=item.applied_at or self._deps.clock.now(),
                next_attempt_at=item.applied_at or self._deps.clock.now(),
                ticket_id=item.ticket_id,
            )
        )

    async def submit(
        self,
        command: ResumeCommand,
        *,
        resume: bool = False,
        received: ReceivedRecord | None = None,
    ) -> RunResult:
        """Validate and apply one resume command. The single ingress of every decision.

        The ticket is closed with a compare-and-set in the same transaction that applies
        the decision (and marks `received`, a stored chat click, applied), so of two
        concurrent commands on one ticket exactly one wins; the other gets `NotAwaiting`.
        A refused command changes nothing.
        """
        deps = self._deps
        async with deps.store.transaction() as tx:
            run = await tx.get_run(command.run_id, for_update=True)
            ticket = await tx.get_ticket(command.ticket_id)
            agent = deps.agents.get(ticket.agent) if ticket is not None else None
            validate_resume(
                command,
                ticket,
                agent_version=agent.version if agent is not None else None,
                catalog_fingerprint=agent.catalog_fingerprint if agent is not None else None,
            )
            assert ticket is not None and run is not None
            if not await tx.close_ticket(
                ticket.ticket_id,
                status=TicketStatus.DECIDED,
                at=command.at,
                decision=command.answer,
                decided_by=command.actor.id,
            ):
                raise NotAwaiting(f"ticket {ticket.ticket_id} was decided concurrently")
            await self._apply(tx, run, ticket, command)
            if received is not None:
                received.state = "applied"
                received.applied_at = deps.clock.now()
                await tx.update_received(received)
            remaining = await tx.tickets_for_run(run.run_id, status=TicketStatus.OPEN)
            claimed_calls: list[CallRecord] | None = None
            if not remaining and run.status is RunStatus.AWAITING:
                await record(tx, run.run_id, command.at, "run_ready", by=command.actor.id)
                if resume:
                    # Claim in the same transaction: the run row is locked already.
                    self._claim_locked(run, command.at)
                    await record(
                        tx,
                        run.run_id,
                        command.at,
                        "run_claimed",
                        worker=deps.worker_id,
                        fence=run.fence,
                    )
                    claimed_calls = await tx.calls_for_run(run.run_id, batch=run.batch)
                else:
                    run.status = RunStatus.QUEUED
                run.updated_at = command.at
                await tx.update_run(run)
        deps.reach(
            "decision_committed",
            ticket_id=command.ticket_id,
            decision=command.answer.kind,
            latency_seconds=(command.at - ticket.created_at).total_seconds(),
        )
        if claimed_calls is not None:
            return await self._drive_claimed(run, calls=claimed_calls)
        if resume and not remaining:
            # Ready but not awaiting (e.g. paused meanwhile): the usual path decides.
            return await self.resume(command.run_id, actor=command.actor)
        return await self.get(command.run_id)

    def _claim_locked(self, run: RunRecord, now: datetime) -> None:
        """Claim `run` (whose row the current transaction has locked) for this worker."""
        check_run_move(run.status, RunStatus.RUNNING)
        run.status = RunStatus.RUNNING
        run.fence += 1
        run.lease_owner = self._deps.worker_id
        run.lease_expires_at = now + timedelta(seconds=self._deps.lease_seconds)

    async def _apply(
        self, tx: Transaction, run: RunRecord, ticket: ResumeTicket, command: ResumeCommand
    ) -> None:
        answer = command.answer
        actor = command.actor
        target = ticket.target
        agent = self._deps.agents.get(ticket.agent)
        described: dict[str, Any] = {
            "ticket_id": ticket.ticket_id,
            "decision": answer.kind,
            "actor": actor.id,
            "actor_name": actor.name,
            "platform": actor.platform,
            "decided_at": command.at.isoformat(),
        }
        reason = getattr(answer, "reason", None)
        if reason:
            described["reason"] = reason
        if isinstance(target, ToolPermission | RemoteInput | Uncertain):
            call = await tx.get_call(target.call_id)
            if call is None:
                raise ResolutionError(f"ticket {ticket.ticket_id} names an unknown call")
            described["tool"] = call.tool
            described["args"] = display_args(agent, call.tool, call.args)
            call.decided_by = actor.model_dump(mode="json")
            call.updated_at = command.at
            call.reason = reason
            match answer:
                case Allow():
                    self._expect(call.state, CallState.AWAITING_DECISION, ticket)
                    move(call, CallState.APPROVED)
                case Deny():
                    self._expect(
                        call.state, (CallState.AWAITING_DECISION, CallState.AWAITING_INPUT), ticket
                    )
                    move(call, CallState.DENIED)
                    call.result = blocked_text(reason)
                case InputData():
                    self._expect(call.state, CallState.AWAITING_INPUT, ticket)
                    move(call, CallState.APPROVED)
                    call.answer = answer.data
                case Resolve():
                    self._expect(call.state, CallState.UNCERTAIN, ticket)
                    move(call, CallState.RESOLVED)
                    call.result = answer.result
                case Retry():
                    self._expect(call.state, CallState.UNCERTAIN, ticket)
                    move(call, CallState.APPROVED)
                case Abort():
                    self._expect(call.state, CallState.UNCERTAIN, ticket)
                    move(call, CallState.RESOLVED)
                    call.error = "aborted"
                    call.result = f"Aborted: {reason}" if reason else "Aborted by an operator"
                case _:
                    raise ResolutionError(f"a {answer.kind} answer does not fit a tool call")
            await tx.update_call(call)
        await record(tx, run.run_id, command.at, "ticket_decided", by=actor.id, **described)
        await notify(self._deps, tx, run, "decided", described, ticket_id=ticket.ticket_id)

    @staticmethod
    def _expect(
        state: CallState, allowed: CallState | tuple[CallState, ...], ticket: ResumeTicket
    ) -> None:
        options = allowed if isinstance(allowed, tuple) else (allowed,)
        if state not in options:
            raise ResolutionError(
                f"ticket {ticket.ticket_id}: the call is {state}, which this answer does not fit"
            )

    # -- continuing ------------------------------------------------------------------
    async def resume(
        self, run_or_thread_id: str, *, actor: Actor | str | None = None, wait: bool = True
    ) -> RunResult:
        """Continue a run whose decisions are all in, or a paused run.

        Accepts a run id or a thread id (its latest run). A run still waiting on open
        tickets is returned as it is, with its pending entries.

        Args:
            run_or_thread_id: The run, or a thread whose latest run to continue.
            actor: Who resumes (recorded; lifts a pause).
            wait: Drive the run here until it parks or ends (True), or only make it ready
                for a worker (False).
        """
        run = await self._find_run(run_or_thread_id)
        if run.status is RunStatus.PAUSED:
            run = await self._unpause(run, actor)
        if wait and run.status in (RunStatus.QUEUED, RunStatus.RUNNING):
            await self.drive(run.run_id)
        return await self.get(run.run_id)

    async def _find_run(self, run_or_thread_id: str) -> RunRecord:
        async with self._deps.store.transaction() as tx:
            run = await tx.get_run(run_or_thread_id)
            if run is None:
                latest = await tx.list_runs(thread_id=run_or_thread_id, limit=1)
                run = latest[0] if latest else None
        if run is None:
            raise RunNotFound(f"no run or thread {run_or_thread_id!r}")
        return run

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
            command = ResumeCommand.from_ticket(pause, Continue(), who, deps.clock.now())
            await self.submit(command)
        now = deps.clock.now()
        async with deps.store.transaction() as tx:
            current = await tx.get_run(run.run_id, for_update=True)
            assert current is not None
            if current.status is RunStatus.PAUSED:
                still_open = await tx.tickets_for_run(run.run_id, status=TicketStatus.OPEN)
                current.status = RunStatus.AWAITING if still_open else RunStatus.QUEUED
                current.updated_at = now
                current.fence += 1
                await tx.update_run(current)
                await record(
                    tx,
                    run.run_id,
                    now,
                    "run_resumed",
                    by=actor.id if isinstance(actor, Actor) else actor,
                )
            return current

    async def pause(self, run_id: str, *, actor: Actor | str | None = None) -> RunResult:
        """Ask a run to pause: no new steps; a running tool settles first."""
        deps = self._deps
        now = deps.clock.now()
        who = actor.id if isinstance(actor, Actor) else actor
        async with deps.store.transaction() as tx:
            run = await tx.get_run(run_id, for_update=True)
            if run is None:
                raise RunNotFound(f"no run {run_id!r}")
            if run.status.finished or run.status is RunStatus.PAUSED:
                raise NotAwaiting(f"run {run_id} is {run.status}; it cannot be paused")
            if run.status is RunStatus.RUNNING and not self._lease_expired(run):
                await tx.set_run_flags(run_id, pause=True)
                await record(tx, run_id, now, "pause_requested", by=who)
            else:
                run.status = RunStatus.PAUSED
                run.lease_owner = None
                run.lease_expires_at = None
                run.fence += 1
                run.updated_at = now
                agent = deps.agents.get(run.agent)
                if agent is not None:
                    await open_ticket(deps, tx, run, agent, Pause(), None, "run_paused")
                await record(tx, run_id, now, "run_paused", by=who)
                await tx.update_run(run)
        return await self.get(run_id)

    async def cancel(
        self, run_id: str, *, actor: Actor | str | None = None, reason: str | None = None
    ) -> RunResult:
        """Cancel a run. Cooperative: a running tool finishes; open tickets are voided."""
        deps = self._deps
        now = deps.clock.now()
        who = actor.id if isinstance(actor, Actor) else actor
        async with deps.store.transaction() as tx:
            run = await tx.get_run(run_id, for_update=True)
            if run is None:
                raise RunNotFound(f"no run {run_id!r}")
            if run.status.finished:
                raise NotAwaiting(f"run {run_id} already {run.status}")
            if run.status is RunStatus.RUNNING and not self._lease_expired(run):
                await tx.set_run_flags(run_id, cancel=True)
                await record(tx, run_id, now, "cancel_requested", by=who, reason=reason)
            else:
                await cancel_in(deps, tx, run, actor=who, reason=reason or "cancelled")
                run.fence += 1
                run.updated_at = now
                await tx.update_run(run)
        return await self.get(run_id)

    def _lease_expired(self, run: RunRecord) -> bool:
        return run.lease_expires_at is None or run.lease_expires_at <= self._deps.clock.now()

    # -- workers and recovery ------------------------------------------------------------
    async def recover(self, limit: int = 1000) -> list[RunResult]:
        """Claim and continue every run that is queued or whose worker's lease expired.

        Call it on start-up. Dispatched calls without a recorded result follow their
        replay policy: ``safe`` and ``idempotent`` run again (same execution key),
        ``manual`` becomes ``uncertain`` and parks the run for a person.
        """
        async with self._deps.store.transaction() as tx:
            ids = await tx.claimable_runs(self._deps.clock.now(), limit)
        results = []
        for run_id in ids:
            await self.drive(run_id)
            results.append(await self.get(run_id))
        return results

    async def work_once(self, limit: int = 10) -> int:
        """Claim and drive up to `limit` claimable runs; returns how many were driven."""
        async with self._deps.store.transaction() as tx:
            ids = await tx.claimable_runs(self._deps.clock.now(), limit)
        driven = 0
        for run_id in ids:
            if await self.drive(run_id):
                driven += 1
        return driven

    async def claimable(self, limit: int = 10) -> list[str]:
        """Ids of runs a worker could claim now (queued, or their lease expired)."""
        async with self._deps.store.transaction() as tx:
            return await tx.claimable_runs(self._deps.clock.now(), limit)

    async def drive(self, run_id: str) -> bool:
        """Claim `run_id` and execute it until it parks or ends.

        Returns:
            False if the run could not be claimed (another worker has it, or it is not
            ready), True once it was driven.
        """
        deps = self._deps
        now = deps.clock.now()
        async with deps.store.transaction() as tx:
            claimed = await tx.claim_run(
                run_id,
                owner=deps.worker_id,
                now=now,
                until=now + timedelta(seconds=deps.lease_seconds),
            )
            if claimed is not None:
                await record(
                    tx, run_id, now, "run_claimed", worker=deps.worker_id, fence=claimed.fence
                )
                calls = await tx.calls_for_run(run_id, batch=claimed.batch)
        if claimed is None:
            return False
        await self._drive_claimed(claimed, calls=calls)
        return True

    async def _drive_claimed(
        self,
        run: RunRecord,
        *,
        calls: list[CallRecord] | None = None,
        model_marked: bool = False,
    ) -> RunResult:
        driver = Driver(self._deps, run, calls=calls, model_marked=model_marked)
        try:
            await driver.drive()
        except LeaseLost:
            # Another worker took the run over; it owns the outcome now.
            return await self.get(run.run_id)
        if driver.run.status.finished:
            return run_result(driver.run, ())
        return await self.get(run.run_id)

    async def expire_overdue(self, limit: int = 100) -> list[str]:
        """Expire open tickets past their deadline, each exactly once.

        What expiry does comes from the tool's or agent's ``on_expiry``: ``deny`` (the
        model sees a blocked result saying the request expired), ``cancel`` the run, or
        `Escalate` to other approvers (once; an escalated ticket that expires is denied).
        The expiry is recorded and notified in the same transaction.

        Returns:
            The ids of the tickets expired.
        """
        deps = self._deps
        now = deps.clock.now()
        async with deps.store.transaction() as tx:
            overdue = await tx.overdue_tickets(now, limit)
        expired = []
        for ticket in overdue:
            async with deps.store.transaction() as tx:
                run = await tx.get_run(ticket.run_id, for_update=True)
                if run is None or not await tx.close_ticket(
                    ticket.ticket_id, status=TicketStatus.EXPIRED, at=now
                ):
                    continue
                await self._expire(tx, run, ticket)
            expired.append(ticket.ticket_id)
        return expired

    async def _expire(self, tx: Transaction, run: RunRecord, ticket: ResumeTicket) -> None:
        deps = self._deps
        now = deps.clock.now()
        agent = deps.agents.get(ticket.agent)
        call = await tx.get_call(ticket.call_id) if ticket.call_id else None
        tool = agent.tools.get(call.tool) if agent is not None and call is not None else None
        action = agent.on_expiry_for(tool) if agent is not None else ExpiryAction.DENY
        if isinstance(action, Escalate) and call is not None and agent is not None:
            earlier = [
                t
                for t in await tx.tickets_for_run(run.run_id, status=TicketStatus.EXPIRED)
                if t.call_id == call.call_id and t.ticket_id != ticket.ticket_id
            ]
            if not earlier:
                await record(
                    tx,
                    run.run_id,
                    now,
                    "ticket_expired",
                    ticket_id=ticket.ticket_id,
                    action="escalate",
                    approvers=list(action.approvers),
                )
                await notify(
                    deps,
                    tx,
                    run,
                    "expired",
                    {
                        "ticket_id": ticket.ticket_id,
                        "action": "escalate",
                        "escalated_to": list(action.approvers),
                    },
                    ticket_id=ticket.ticket_id,
                )
                kind = (
                    "input_requested"
                    if isinstance(ticket.target, RemoteInput)
                    else ("approval_requested")
                )
                await open_ticket(
                    deps,
                    tx,
                    run,
                    agent,
                    ticket.target,
                    tool,
                    kind,
                    approvers=action.approvers,
                    deadline=action.deadline,
                )
                return
            action = ExpiryAction.DENY
        outcome = "cancel" if action is ExpiryAction.CANCEL else "deny"
        await record(
            tx, run.run_id, now, "ticket_expired", ticket_id=ticket.ticket_id, action=outcome
        )
        await notify(
            deps,
            tx,
            run,
            "expired",
            {"ticket_id": ticket.ticket_id, "action": outcome},
            ticket_id=ticket.ticket_id,
        )
        if outcome == "cancel":
            await cancel_in(
                deps, tx, run, actor=None, reason="a decision deadline passed without a decision"
            )
            run.fence += 1
            run.updated_at = now
            await tx.update_run(run)
            return
        if call is not None and not call.state.settled:
            move(call, CallState.DENIED)
            call.result = blocked_text("the request expired without a decision")
            call.reason = "expired"
            call.updated_at = now
            await tx.update_call(call)
        remaining = await tx.tickets_for_run(run.run_id, status=TicketStatus.OPEN)
        if not remaining and run.status is RunStatus.AWAITING:
            run.status = RunStatus.QUEUED
            run.updated_at = now
            await tx.update_run(run)
