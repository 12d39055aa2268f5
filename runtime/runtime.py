"""The `Runtime`: start runs, decide tickets, resume, pause, cancel and recover.

`Runtime` is a facade: each group of operations lives in its own small service and
shares one `Deps` (store, clock, ids, agents):

- `runtime.services.starting` — new runs, thread membership and history, idempotency keys;
- `runtime.services.queries` — what a viewer may read: runs, tickets, events, cards;
- `runtime.services.decisions` — the single ingress of every decision (`submit`);
- `runtime.services.inbox` — chat clicks checked and stored before the ack, applied later;
- `runtime.services.control` — resume, pause, cancel;
- `runtime.services.driving` — claiming runs and driving them with the engine, recovery;
- `runtime.services.expiry` — decision deadlines;
- `runtime.engine.grants` — standing grants: listing and revoking them.
- `runtime.domain.edits` — an approver's change of a call's arguments before allowing it;
- `runtime.services.batches` — several tickets decided in one action, each on its own;
- `runtime.services.approvals` and `runtime.services.outcomes` — external approvals, whose
  methods `Runtime` takes from `runtime.external_approvals`.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from typing import Any

from runtime.domain.accepting import AcceptOutcome, ActorSource, FormOutcome, Refused
from runtime.domain.agent import Agent
from runtime.domain.clock import Clock, IdSource, RandomIds, SystemClock
from runtime.domain.edits import EditForm, ticket_edit_form
from runtime.domain.errors import ConfigurationError
from runtime.domain.external import AgentRegistry, ExternalAgent, UndeclaredAgents
from runtime.domain.model import Model
from runtime.domain.states import RunStatus
from runtime.domain.subagents import check_no_cycle
from runtime.domain.tickets import (
    Actor,
    Allow,
    Answer,
    AnswerKind,
    Deny,
    GrantRequest,
    InputData,
    ResumeCommand,
    ResumeTicket,
)
from runtime.engine.deps import NO_TRACER, Checkpoint, Deps, ResultMiddlewareInput, Tracer
from runtime.engine.grants import Grant
from runtime.engine.handoff import Slots
from runtime.engine.results import PendingEntry, RunResult
from runtime.external_approvals import ExternalApprovals
from runtime.services.approvals import Approvals
from runtime.services.batches import BatchAccepted, Batches, BatchItem, BatchOutcome
from runtime.services.control import RunControl
from runtime.services.decisions import MISSING, Decisions, TicketRef
from runtime.services.driving import Driving
from runtime.services.expiry import Expiry
from runtime.services.grants import Grants
from runtime.services.identities import Identities
from runtime.services.inbox import Inbox, ReceivedOutcome
from runtime.services.outcomes import Outcomes
from runtime.services.queries import CARD_KINDS, CardRef, Page, Queries
from runtime.services.sessions import Sessions
from runtime.services.starting import IdempotencyKeys, Starter
from runtime.store.base import Store
from runtime.store.records import ReceivedRecord

__all__ = [
    "CARD_KINDS",
    "BatchAccepted",
    "BatchItem",
    "BatchOutcome",
    "CardRef",
    "EditForm",
    "ReceivedOutcome",
    "Runtime",
    "TicketRef",
]


class Runtime(ExternalApprovals):
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
        undeclared_agents: Whether an external approval may name an agent that was not
            registered: ``any`` (an `ExternalAgent` with the defaults is synthesised for
            it: every tool asks, the requester decides, cards in the console) or
            ``declared`` (refused with `ApprovalRefused`).
        tracer: Where spans go (`runtime.edges.Tracer`, see ``docs/tracing.md``; default none).
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
        undeclared_agents: UndeclaredAgents = "declared",
        tracer: Tracer = NO_TRACER,
    ) -> None:
        if lease_seconds <= 0:
            raise ConfigurationError("lease_seconds must be positive")
        if undeclared_agents not in ("any", "declared"):
            raise ConfigurationError("undeclared_agents must be 'any' or 'declared'")
        registry = AgentRegistry()
        registry.undeclared = undeclared_agents
        deps = Deps(
            store=store,
            clock=clock or SystemClock(),
            ids=ids or RandomIds(),
            agents=registry,
            worker_id=worker_id or f"{socket.gethostname()}:{os.getpid()}",
            lease_seconds=lease_seconds,
            checkpoint=checkpoint,
            result_middleware=list(result_middleware),
            tracer=tracer,
        )
        self._deps = deps
        self._model_resolver = model_resolver
        self._queries = Queries(deps)
        self._driving = Driving(deps, self._queries)
        self._starter = Starter(deps, self._queries, self._driving)
        self._decisions = Decisions(deps, self._queries, self._driving)
        self._inbox = Inbox(deps, self._decisions)
        self._control = RunControl(deps, self._queries, self._driving)
        self._expiry = Expiry(deps)
        self._sessions = Sessions(deps)
        self._grants = Grants(deps)
        self._batches = Batches(deps, self._queries, self._decisions, self._inbox)
        self._approvals = Approvals(deps, self._starter, self._control)
        self._outcomes = Outcomes(deps)
        self.identities = Identities(deps)
        """One person across edges: identity links and link codes."""
        # The listed agents first, then the sub-agents they list but which are not
        # listed themselves: a listed agent wins over a sub-agent of the same name.
        for agent in agents:
            self._register_one(agent)
        for agent in agents:
            self._register_subagents(agent)

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

        Its sub-agents are registered too, unless an agent of their name already is (that
        one then runs the delegated tasks; agents given to the constructor are registered
        before the sub-agents they list).

        Raises:
            ConfigurationError: If another agent already has its name, its sub-agents form
                a cycle, or its model is a spec and there is no ``model_resolver`` (or
                the resolver refuses it: an unknown provider, a missing API key).
        """
        self._register_one(agent)
        self._register_subagents(agent)
        return agent

    def _register_subagents(self, agent: Agent) -> None:
        for sub in agent.subagents.values():
            if sub.name not in self._deps.agents:
                self.register(sub)

    def _register_one(self, agent: Agent) -> None:
        # The plain dict's `get`: the registry's answers for undeclared external agents too.
        existing = dict.get(self._deps.agents, agent.name)
        if existing is agent:
            return
        if existing is not None:
            raise ConfigurationError(f"an agent named {agent.name!r} is already registered")
        check_no_cycle(agent.name, agent.subagents)
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

    async def aclose(self) -> None:
        """Close what this runtime opened: the models its ``model_resolver`` built (their
        HTTP clients). The store and models passed in as objects stay the caller's."""
        close = getattr(self._model_resolver, "aclose", None)
        if close is not None:
            await close()

    def _agent(self, name: str | Agent) -> Agent:
        if isinstance(name, Agent):
            return self.register(name)
        try:
            found = self._deps.agents[name]
        except KeyError:
            known = ", ".join(sorted(self._deps.agents)) or "none"
            raise ConfigurationError(f"no agent named {name!r} (loaded: {known})") from None
        if isinstance(found, ExternalAgent):
            raise ConfigurationError(
                f"agent {name!r} is external: it runs elsewhere and asks for approvals "
                "(Runtime.request_approval, POST /api/approvals)"
            )
        return found

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
        idempotency: IdempotencyKeys = None,
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
                in `scope` returns the run it started (``replayed`` set) and starts
                nothing; with another fingerprint (request body hash) it raises
                `IdempotencyConflict`. Every given key is recorded for the new run.
            joining_as: The authenticated user of an edge where threads are private (API,
                console): a `thread_id` with runs must be one they take part in, and
                never a chat platform's thread (`runtime.domain.visibility`).

        Returns:
            The run as it stands when it stops: ``awaiting`` with ``pending`` entries,
            ``done`` with ``text``, ``failed``, or when not waiting ``queued``
            (``running`` once claimed for a `Worker` of this process with a free place;
            see `hand_off_to`). A decision made after it parked shows in `get`.
        """
        return await self._starter.start(
            self._agent(agent),
            input,
            requester=requester,
            thread_id=thread_id,
            origin=origin,
            wait=wait,
            idempotency=idempotency,
            joining_as=joining_as,
        )

    async def card_of(self, ticket_id: str, platform: str) -> CardRef | None:
        """Where the card asking for a ticket's decision was posted on `platform`."""
        return await self._queries.card_of(ticket_id, platform)

    async def started_by(self, scope: str, key: str, *more: tuple[str, str]) -> str | None:
        """The run an idempotency key already started in `scope`, if any.

        Args:
            scope: The key's scope.
            key: The key.
            *more: Further ``(scope, key)`` pairs, looked up in the same read: the run
                the first used one started.
        """
        return await self._queries.started_by((scope, key), *more)

    async def forget_idempotency(self, scope: str, before: datetime) -> int:
        """Forget the idempotency keys of `scope` first used before `before`.

        Returns:
            How many were forgotten.
        """
        return await self._starter.forget_idempotency(scope, before)

    # -- console sessions --------------------------------------------------------------
    async def revoke_session(self, session_id: str, expires_at: datetime) -> None:
        """Refuse a signed-out session until `expires_at`, in every process sharing the
        database; revocations of sessions that have expired are forgotten on the way."""
        await self._sessions.revoke(session_id, expires_at)

    async def session_revoked(self, session_id: str) -> bool:
        """Whether a session was signed out."""
        return await self._sessions.revoked(session_id)

    # -- reading ---------------------------------------------------------------------
    async def get(self, run_id: str, *, viewer: Actor | None = None) -> RunResult:
        """The run's current state and what it waits on.

        Args:
            run_id: The run.
            viewer: Who is looking (see `runtime.domain.visibility`); None for trusted host code.

        Raises:
            RunNotFound: No such run, or `viewer` may not see it.
        """
        return await self._queries.get(run_id, viewer)

    async def children(self, run_id: str, *, viewer: Actor | None = None) -> list[RunResult]:
        """The sub-agent runs `run_id` started (its children), oldest first.

        Args:
            run_id: The parent run.
            viewer: Who is looking: whoever may see a run sees its children.

        Raises:
            RunNotFound: No such run, or `viewer` may not see it.
        """
        return await self._queries.children(run_id, viewer)

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
        return await self._queries.ticket(ticket_id, viewer)

    async def may_see(self, run_id: str, viewer: Actor) -> bool:
        """Whether `viewer` may see the run (False for an unknown run too)."""
        return await self._queries.may_see(run_id, viewer)

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
            viewer: Only the runs this user may see (see `runtime.domain.visibility`).
        """
        return await self._queries.list_runs(statuses, thread_id, limit, viewer)

    async def run_page(
        self,
        *,
        statuses: Sequence[RunStatus | str] = (),
        thread_id: str | None = None,
        limit: int = 100,
        viewer: Actor | None = None,
        cursor: str | None = None,
    ) -> Page[RunResult]:
        """A page of `list_runs`, with the cursor of the next one.

        Raises:
            InvalidCursor: `cursor` is not one this listing gave `viewer`.
        """
        return await self._queries.run_page(statuses, thread_id, limit, viewer, cursor)

    async def run_counts(self) -> dict[str, int]:
        """How many runs there are in each status."""
        return await self._queries.run_counts()

    async def events(self, run_id: str, *, viewer: Actor | None = None) -> list[dict[str, Any]]:
        """The run's flight recorder as plain dicts, oldest first.

        Raises:
            RunNotFound: No such run, or `viewer` may not see it.
        """
        return await self._queries.events(run_id, viewer)

    async def export_events(self, run_id: str, *, viewer: Actor | None = None) -> str:
        """The run's flight recorder as JSON lines."""
        return await self._queries.export_events(run_id, viewer)

    async def open_tickets(
        self, limit: int = 100, *, viewer: Actor | None = None
    ) -> list[PendingEntry]:
        """Open tool-call tickets across runs, oldest first.

        Args:
            limit: At most this many.
            viewer: Only the tickets this user may decide (operators: all).
        """
        return await self._queries.open_tickets(limit, viewer)

    async def ticket_page(
        self, limit: int = 100, *, viewer: Actor | None = None, cursor: str | None = None
    ) -> Page[PendingEntry]:
        """A page of `open_tickets`, with the cursor of the next one.

        Raises:
            InvalidCursor: `cursor` is not one this listing gave `viewer`.
        """
        return await self._queries.ticket_page(limit, viewer, cursor)

    # -- decisions -------------------------------------------------------------------
    async def approve(
        self,
        pending: TicketRef,
        *,
        actor: Actor | str | None = None,
        resume: bool = False,
        grant: GrantRequest | None = None,
        args: dict[str, Any] | None = None,
    ) -> RunResult:
        """Allow a pending tool call.

        Args:
            pending: A pending entry, ticket, ticket id or execution key.
            actor: Who decides (default: the run's requester, for trusted host code).
            resume: Continue the run now if this was the last open decision.
            grant: Also allow later calls of the tool (for the rest of the run, or in
                the thread for some hours), within what the tool allows
                (`GrantNotAllowed` otherwise). See `runtime.engine.grants`.
            args: Change these arguments before allowing (merged over the call's own;
                see `runtime.domain.edits`): checked against the tool's schema, ``editable``
                and permission rule, or refused with an `EditRefused` error.
        """
        answer = Allow(grant=grant, args=args)
        return await self._decisions.by_ref(pending, answer, actor, resume)

    async def decline(
        self,
        pending: TicketRef,
        *,
        actor: Actor | str | None = None,
        reason: str | None = None,
        resume: bool = False,
    ) -> RunResult:
        """Deny a pending tool call (or input request); the model sees a blocked result."""
        return await self._decisions.by_ref(pending, Deny(reason=reason), actor, resume)

    async def answer(
        self,
        pending: TicketRef,
        data: dict[str, Any],
        *,
        actor: Actor | str | None = None,
        resume: bool = False,
    ) -> RunResult:
        """Answer a typed-input request; `data` is validated against its schema."""
        return await self._decisions.by_ref(pending, InputData(data=data), actor, resume)

    async def resolve_tool(
        self,
        pending: TicketRef,
        *,
        result: Any = MISSING,
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
        answer = Decisions.resolution(result, retry, abort, reason)
        return await self._decisions.by_ref(pending, answer, actor, resume)

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
        return await self._decisions.decide(ticket_id, answer, actor, correlation, resume=resume)

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
        """Check a click and store it durably, in one transaction (see `runtime.domain.accepting`).

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
        return await self._inbox.accept(
            ticket_id,
            answer,
            actor,
            correlation=correlation,
            source=source,
            delivery_id=delivery_id,
            reply=reply,
        )

    async def may_answer(
        self, ticket_id: str, kind: AnswerKind, actor: ActorSource, *, correlation: str
    ) -> FormOutcome:
        """Whether `actor` may answer the ticket with an answer of `kind` now.

        For a button that opens a form: everything a decision is checked for except the
        answer's content. Changes nothing.
        """
        return await self._inbox.may_answer(ticket_id, kind, actor, correlation=correlation)

    async def apply_received(self, limit: int = 20) -> list[ReceivedOutcome]:
        """Apply stored decisions, oldest first, each exactly once.

        A decision refused now (e.g. the loser of two concurrent clicks, or a ticket that
        expired meanwhile) is marked refused and changes nothing else; when the edge gave
        a `reply` destination, a ``decision_refused`` notification tells the clicker. A
        run whose last decision this was is left ready for a worker.

        Returns:
            What happened to each command.
        """
        return await self._inbox.apply_received(limit)

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
        return await self._decisions.submit(command, resume=resume, received=received)

    # -- standing grants ---------------------------------------------------------------
    async def grants(
        self,
        *,
        viewer: Actor | None = None,
        run_id: str | None = None,
        thread_id: str | None = None,
        active: bool = True,
        limit: int = 100,
    ) -> list[Grant]:
        """Standing grants, newest first.

        Args:
            viewer: Only the grants this user may see: those they gave and those given
                in runs they requested (operators and None: all).
            run_id: Only grants given in this run.
            thread_id: Only grants given in this thread.
            active: Only grants that cover calls now (False: revoked, expired and ended
                ones too).
            limit: At most this many.
        """
        return await self._grants.find(
            viewer, run_id=run_id, thread_id=thread_id, active=active, limit=limit
        )

    async def grants_of_run(
        self, run_id: str, *, viewer: Actor | None = None, active: bool = True
    ) -> list[Grant]:
        """The grants that cover calls of a run: its own, and its thread's for its
        requester, newest first; with `viewer`, only those they may see (see `grant`).

        Raises:
            RunNotFound: No such run, or `viewer` may not see it.
        """
        found = await self._queries.find_visible(run_id, viewer)
        return await self._grants.applying_to(found, viewer, active=active)

    async def grant(self, grant_id: str, *, viewer: Actor | None = None) -> Grant:
        """One grant, active or not.

        Raises:
            UnknownGrant: No such grant, or `viewer` may not see it (only operators, whoever
                gave it and the requester of the run it was given in may).
        """
        return await self._grants.get(grant_id, viewer)

    async def revoke_grant(self, grant_id: str, *, actor: Actor | str) -> Grant:
        """Revoke a grant: calls after the commit are asked for again, on every process.

        Raises:
            UnknownGrant: No such grant, or `actor` may not see it.
            GrantNotActive: It was revoked already, or it expired.
        """
        who = actor if isinstance(actor, Actor) else Actor(id=actor)
        return await self._grants.revoke(grant_id, who)

    # -- edits and batches -----------------------------------------------------------
    def edit_form(self, ticket: ResumeTicket) -> EditForm | None:
        """What an approver may change of the call `ticket` waits on, for an edge's form:
        the editable arguments as fields and their current values (never secret ones).
        None when the tool allows no edits or the ticket is no permission request."""
        return ticket_edit_form(self._deps.agents, ticket)

    async def decide_batch(
        self, items: Sequence[BatchItem], actor: Actor, *, resume: bool = False
    ) -> list[BatchOutcome]:
        """Decide several tickets in one action, each on its own.

        Each item is checked like a single decision by `decide` (who may see the ticket
        first: one the actor may not see is refused as unknown), validated and applied
        in its own transaction; a refusal changes nothing for its ticket and does not
        stop the others.

        Args:
            items: The tickets and their answers, in the order to apply them.
            actor: The authenticated user.
            resume: Continue a run here once its last open decision is in.

        Returns:
            One outcome per item, in order.
        """
        return await self._batches.decide(items, actor, resume=resume)

    async def accept_batch(
        self,
        ticket_id: str,
        token: str,
        answer: Answer,
        actor: ActorSource,
        *,
        source: str,
        delivery_id: str,
        reply: dict[str, Any] | None = None,
    ) -> BatchAccepted | Refused:
        """Check and store a click on "Allow all N" / "Deny all N" (`runtime.services.batches`).

        The click names the batch's first ticket and the batch's token; each ticket of
        the batch is then checked and stored on its own exactly as `accept` does for a
        single click (a worker applies them), so one refusal does not stop the others.

        Returns:
            `BatchAccepted` with each ticket's outcome, or `Refused` when the click names
            no batch (nothing was stored).
        """
        return await self._batches.accept(
            ticket_id,
            token,
            answer,
            actor,
            source=source,
            delivery_id=delivery_id,
            reply=reply,
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
        return await self._decisions.resume(run_or_thread_id, actor, wait)

    async def pause(self, run_id: str, *, actor: Actor | str | None = None) -> RunResult:
        """Ask a run to pause: no new steps; a running tool settles first."""
        return await self._control.pause(run_id, actor)

    async def cancel(
        self, run_id: str, *, actor: Actor | str | None = None, reason: str | None = None
    ) -> RunResult:
        """Cancel a run. Cooperative: a running tool finishes; open tickets are voided."""
        return await self._control.cancel(run_id, actor, reason)

    # -- workers and recovery ------------------------------------------------------------
    async def recover(self, limit: int = 1000) -> list[RunResult]:
        """Claim and continue every run that is queued or whose worker's lease expired.

        Call it on start-up. Dispatched calls without a recorded result follow their
        replay policy: ``safe`` and ``idempotent`` run again (same execution key),
        ``manual`` becomes ``uncertain`` and parks the run for a person.
        """
        return await self._driving.recover(limit)

    async def work_once(self, limit: int = 10) -> int:
        """Claim and drive up to `limit` claimable runs; returns how many were driven."""
        return await self._driving.work_once(limit)

    async def claimable(self, limit: int = 10) -> list[str]:
        """Ids of runs a worker could claim now (queued, or their lease expired)."""
        return await self._driving.claimable(limit)

    def hand_off_to(self, slots: Slots | None, *, only: Slots | None = None) -> None:
        """Hand runs made ready by this runtime's commits to `slots` (a `Worker` of this
        process does this while its loop runs), or to nobody (None).

        With `slots`, a start that does not wait and a decision that makes its run ready
        claim the run in their own transaction while `slots` has a free place, and give
        it to `slots` to drive; otherwise the run is stored ``queued`` as before.

        Args:
            slots: Who takes the runs, or None.
            only: With None: stop handing off only if `only` is the one taking them.
        """
        if slots is None and only is not None and self._deps.slots is not only:
            return
        self._deps.slots = slots

    async def drive(self, run_id: str) -> bool:
        """Claim `run_id` and execute it until it parks or ends.

        Returns:
            False if the run could not be claimed (another worker has it, or it is not
            ready), True once it was driven.
        """
        return await self._driving.drive(run_id)

    async def expire_overdue(self, limit: int = 100) -> list[str]:
        """Expire open tickets past their deadline, each exactly once.

        What expiry does comes from the tool's or agent's ``on_expiry``: ``deny`` (the
        model sees a blocked result saying the request expired), ``cancel`` the run, or
        `Escalate` to other approvers (once; an escalated ticket that expires is denied).
        The expiry is recorded and notified in the same transaction.

        Returns:
            The ids of the tickets expired.
        """
        return await self._expiry.expire_overdue(limit)
