"""Standing grants: an approver allows a tool beyond one call.

With an allow, an approver may also grant the tool for the rest of the run (scope
``run``) or, for some hours, for the runs of the run's thread that the same person
requests (scope ``thread``), optionally only for some arguments (`runtime.domain.constraints`).
A tool says which scopes it allows (`runtime.tool`'s ``grants``: ``("run",)`` by default);
four-eyes tools allow none. The grant is a durable row written in the decision's own
transaction (`give`), so it exists exactly when the decision does.

When the model later asks for the tool and its permission says ``ask``, the engine asks
`allow_by_grant`: a grant that covers the call (read from the database at that moment, so
a revocation or an expiry counts at once, on every replica) lets it run without a ticket,
and the flight recorder's ``grant_applied`` event names the grant. Open tickets of the
same run that a new grant covers are allowed with it at once (`cover_open`).

A grant is seen and revoked by whoever gave it, the requester of the run it was given in,
and operators (`Grants`); anyone else is told it does not exist, also when they may see
the run it applies to (a ticket's decider, say). A ``run`` grant ends with its run: once
the run finished it reads ``ended`` and covers nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal, assert_never

from runtime.domain import constraints
from runtime.domain.agent import Agent
from runtime.domain.errors import GrantNotAllowed
from runtime.domain.external import ORIGIN_KEY, is_external
from runtime.domain.notifications import Decided
from runtime.domain.states import CallState, TicketStatus
from runtime.domain.tickets import (
    Actor,
    Allow,
    GrantRequest,
    GrantScope,
    ResumeTicket,
    ToolPermission,
)
from runtime.domain.tools import Tool
from runtime.engine.deps import Deps
from runtime.engine.journal import display_args, grant_scopes, notify, record
from runtime.engine.moves import move
from runtime.store.base import Transaction
from runtime.store.records import CallRecord, GrantRecord, RunRecord

DEFAULT_THREAD_HOURS = 8.0
"""How long a thread grant lasts when the approver does not say."""

GrantState = Literal["active", "revoked", "expired", "ended"]
"""Whether a grant covers calls now (``ended``: a ``run`` grant whose run finished)."""

_SESSION_GRANTS = 100
"""How many of a session's run grants an external agent's call is checked against."""
_SCOPE_WORDS: dict[str, str] = {"run": "the rest of this run", "thread": "this thread"}


@dataclass(frozen=True, slots=True)
class Grant:
    """A standing grant as a person may see it (secret arguments masked).

    Attributes:
        grant_id: Its id.
        agent: The agent whose tool it covers.
        tool: The tool.
        scope: ``run`` or ``thread``.
        run_id: The run it was given in (a ``run`` grant covers only that run).
        thread_id: That run's thread (a ``thread`` grant covers its runs).
        requester: That run's requester; a thread grant covers only their runs.
        constraint: The arguments it covers (`runtime.domain.constraints`); None: any.
        granted_by: Who gave it.
        granted_by_name: Their display name, if known.
        platform: Where they gave it.
        ticket_id: The decision it came with.
        created_at: When it was given.
        expires_at: When it stops (None: with its run).
        revoked_at: When it was revoked.
        revoked_by: Who revoked it.
        state: ``active``, ``revoked``, ``expired`` or ``ended`` (a ``run`` grant whose
            run finished), when it was read.
    """

    grant_id: str
    agent: str
    tool: str
    scope: GrantScope
    run_id: str
    thread_id: str
    requester: str | None
    constraint: constraints.Constraint | None
    granted_by: str
    granted_by_name: str | None
    platform: str
    ticket_id: str | None
    created_at: datetime
    expires_at: datetime | None
    revoked_at: datetime | None
    revoked_by: str | None
    state: GrantState

    @property
    def covers(self) -> str:
        """What it covers, in words: ``refund for the rest of this run (amount <= 300)``."""
        where = _SCOPE_WORDS[self.scope]
        args = "" if self.constraint is None else f" ({constraints.describe(self.constraint)})"
        return f"{self.tool} for {where}{args}"


def state_of(grant: GrantRecord, now: datetime, *, run_finished: bool = False) -> GrantState:
    """Whether `grant` is active, revoked, expired or ended at `now`.

    Args:
        grant: The grant.
        now: The time to judge it at.
        run_finished: Whether the run it was given in has finished (a ``run`` grant
            ends with it).
    """
    if grant.revoked_at is not None:
        return "revoked"
    if grant.expires_at is not None and now >= grant.expires_at:
        return "expired"
    if run_finished and grant.scope == "run":
        return "ended"
    return "active"


def ends_run_grants(run: RunRecord | None) -> bool:
    """Whether `run` has ended the ``run`` grants given in it: it finished, and it is not an
    external approval's run, whose run grants cover the rest of its session (see
    `allow_by_grant`) until they expire or are revoked."""
    return run is not None and run.status.finished and ORIGIN_KEY not in run.origin


def _scope(value: str) -> GrantScope:
    return "thread" if value == "thread" else "run"


def _secret(agent: Agent | None, tool_name: str) -> frozenset[str]:
    tool = agent.tools.get(tool_name) if agent is not None else None
    return tool.secret if tool is not None else frozenset()


def view(
    grant: GrantRecord, agent: Agent | None, now: datetime, *, run_finished: bool = False
) -> Grant:
    """`grant` as people see it, with its state at `now` (see `state_of`)."""
    return Grant(
        grant_id=grant.grant_id,
        agent=grant.agent,
        tool=grant.tool,
        scope=_scope(grant.scope),
        run_id=grant.run_id,
        thread_id=grant.thread_id,
        requester=grant.requester,
        constraint=constraints.masked(grant.constraint, _secret(agent, grant.tool)),
        granted_by=grant.granted_by,
        granted_by_name=grant.granted_by_name,
        platform=grant.platform,
        ticket_id=grant.ticket_id,
        created_at=grant.created_at,
        expires_at=grant.expires_at,
        revoked_at=grant.revoked_at,
        revoked_by=grant.revoked_by,
        state=state_of(grant, now, run_finished=run_finished),
    )


def summary(grant: GrantRecord, agent: Agent | None) -> dict[str, Any]:
    """A grant as events and notifications carry it (secret arguments masked)."""
    return {
        "grant_id": grant.grant_id,
        "tool": grant.tool,
        "scope": grant.scope,
        "expires_at": grant.expires_at.isoformat() if grant.expires_at else None,
        "constraint": constraints.masked(grant.constraint, _secret(agent, grant.tool)),
        "granted_by": grant.granted_by,
    }


def sees_grant(viewer: Actor | None, grant: GrantRecord) -> bool:
    """Whether `viewer` may see and revoke `grant`: an operator, whoever gave it, or the
    requester of the run it was given in (None: trusted host code)."""
    if viewer is None or viewer.operator:
        return True
    return grant.granted_by in viewer.ids or (
        grant.requester is not None and grant.requester in viewer.ids
    )


# -- offering and checking a grant with a decision ---------------------------------------


def _words(scopes: tuple[GrantScope, ...]) -> str:
    return " or ".join(_SCOPE_WORDS[s] for s in scopes)


def check_request(ticket: ResumeTicket, request: GrantRequest, agent: Agent | None) -> None:
    """Refuse a grant `ticket`'s tool does not allow; nothing is changed either way.

    Raises:
        GrantNotAllowed: A four-eyes tool, a scope the tool does not allow, or a
            constraint on arguments the tool does not take.
    """
    target = ticket.target
    if not isinstance(target, ToolPermission):
        raise GrantNotAllowed(f"ticket {ticket.ticket_id} is not about a tool's permission")
    if ticket.four_eyes:
        raise GrantNotAllowed(
            f"{target.tool} is four-eyes: every call needs its own decision, so it cannot "
            "be allowed beyond this call"
        )
    allowed = grant_scopes(agent, ticket)
    if request.scope not in allowed:
        beyond = _SCOPE_WORDS[request.scope]
        if not allowed:
            raise GrantNotAllowed(
                f"{target.tool} allows no standing grants: it can only be allowed for this call"
            )
        raise GrantNotAllowed(
            f"{target.tool} cannot be allowed for {beyond}; it allows grants for "
            f"{_words(allowed)} only"
        )
    if isinstance(request.args, dict):
        tool = agent.tools.get(target.tool) if agent is not None else None
        properties = tool.parameters.get("properties") if tool is not None else None
        if isinstance(properties, dict):
            unknown = constraints.argument_names(request.args) - set(properties)
            if unknown:
                known = ", ".join(sorted(properties)) or "none"
                raise GrantNotAllowed(
                    f"{target.tool} has no argument {', '.join(sorted(unknown))} "
                    f"(its arguments: {known})"
                )


def _expiry(request: GrantRequest, at: datetime) -> datetime | None:
    hours = request.hours
    if hours is None and request.scope == "thread":
        hours = DEFAULT_THREAD_HOURS
    return at + timedelta(hours=hours) if hours is not None else None


def _constraint(request: GrantRequest, call: CallRecord) -> constraints.Constraint | None:
    match request.args:
        case None:
            return None
        case "same":
            return constraints.exactly(call.args)
        case dict() as given:
            return given
        case _:
            assert_never(request.args)


def new_grant(
    deps: Deps,
    run: RunRecord,
    ticket: ResumeTicket,
    call: CallRecord,
    actor: Actor,
    request: GrantRequest,
    at: datetime,
) -> GrantRecord:
    """The grant an allow of `ticket` with `request` gives (not stored yet; see `give`).

    Call it after the decision was applied to `call`: ``"same"`` arguments are the call's
    arguments as they will run.
    """
    agent = deps.agents.get(ticket.agent)
    return GrantRecord(
        grant_id=deps.ids.new_id("gr"),
        agent=ticket.agent,
        agent_version=agent.version if agent is not None else ticket.agent_version,
        catalog_fingerprint=(
            agent.catalog_fingerprint if agent is not None else ticket.catalog_fingerprint
        ),
        tool=call.tool,
        scope=request.scope,
        run_id=run.run_id,
        thread_id=run.thread_id,
        requester=run.requester,
        constraint=_constraint(request, call),
        granted_by=actor.id,
        granted_by_name=actor.name,
        platform=actor.platform,
        ticket_id=ticket.ticket_id,
        created_at=at,
        expires_at=_expiry(request, at),
    )


async def give(
    tx: Transaction, deps: Deps, grant: GrantRecord, *, policy: dict[str, Any] | None = None
) -> None:
    """Store `grant` and its ``grant_created`` event, in the decision's transaction;
    `policy` is what the agent's policy said of the call it was given with."""
    await tx.insert_grant(grant)
    shown = summary(grant, deps.agents.get(grant.agent))
    under = {"policy": policy} if policy is not None else {}
    await record(
        tx, grant.run_id, grant.created_at, "grant_created", by=grant.granted_by, **shown, **under
    )


def _actor_of(grant: GrantRecord) -> dict[str, Any]:
    """Who a call run under `grant` was allowed by (its tool context's actor)."""
    actor = Actor(id=grant.granted_by, name=grant.granted_by_name, platform=grant.platform)
    return actor.model_dump(mode="json")


async def cover_open(
    tx: Transaction,
    deps: Deps,
    run: RunRecord,
    grant: GrantRecord,
    actor: Actor,
    at: datetime,
) -> list[str]:
    """Allow the run's other open permission tickets that `grant` covers, with it.

    Each is closed with a compare-and-set like any decision, in the same transaction, by
    the actor who gave the grant (only where they may decide it).

    Returns:
        The ids of the tickets allowed.
    """
    agent = deps.agents.get(grant.agent)
    allowed: list[str] = []
    for ticket in await tx.tickets_for_run(run.run_id, status=TicketStatus.OPEN):
        target = ticket.target
        if (
            ticket.ticket_id == grant.ticket_id
            or not isinstance(target, ToolPermission)
            or target.tool != grant.tool
            or target.policy_wants_person
            or ticket.four_eyes
            or not ticket.may_decide(actor)
            or not ticket.decidable_here(actor)
            or not constraints.holds(grant.constraint, target.args)
        ):
            continue
        call = await tx.get_call(target.call_id)
        if call is None or call.state is not CallState.AWAITING_DECISION:
            continue
        if not await tx.close_ticket(
            ticket.ticket_id,
            status=TicketStatus.DECIDED,
            at=at,
            decision=Allow(),
            decided_by=actor.id,
        ):
            continue
        move(call, CallState.APPROVED)
        call.decided_by = actor.model_dump(mode="json")
        call.updated_at = at
        await tx.update_call(call)
        decided = Decided(
            run_id=run.run_id,
            agent=run.agent,
            ticket_id=ticket.ticket_id,
            decision="allow",
            actor=actor.id,
            actor_name=actor.name,
            platform=actor.platform,
            decided_at=at.isoformat(),
            tool=call.tool,
            args=display_args(agent, call.tool, call.args),
            grant=summary(grant, agent),
            by_grant=True,
        )
        await record(tx, run.run_id, at, "ticket_decided", by=actor.id, **decided.details())
        await notify(deps, tx, run, decided)
        allowed.append(ticket.ticket_id)
    return allowed


# -- the permission check ---------------------------------------------------------------


async def allow_by_grant(
    tx: Transaction,
    deps: Deps,
    run: RunRecord,
    agent: Agent,
    tool: Tool,
    call: CallRecord,
) -> GrantRecord | None:
    """The grant that lets `call` (whose permission says ask) run without asking, if any.

    Read from the database now, inside the transaction that proposes the call. A grant
    covers the call when it is active, of this run (or of this thread and this run's
    requester), given under the agent's current version and tool catalog, for a tool
    that still allows its scope, and the call's arguments meet its constraint. The
    ``grant_applied`` event is recorded, and the call remembers who allowed it.
    """
    if not agent.grants_for(tool):
        return None
    now = deps.clock.now()
    found = await tx.active_grants(
        agent=agent.name, tool=tool.name, run_id=run.run_id, thread_id=run.thread_id, now=now
    )
    if is_external(agent):
        # An external approval's run is one call: a grant "for the rest of the run"
        # covers the rest of its session (the thread) instead.
        session = await tx.list_grants(
            thread_id=run.thread_id, scope="run", active_at=now, limit=_SESSION_GRANTS
        )
        seen = {g.grant_id for g in found}
        found += [
            g
            for g in session
            if g.agent == agent.name and g.tool == tool.name and g.grant_id not in seen
        ]
    allowed = agent.grants_for(tool)
    for grant in found:
        if (
            grant.requester != run.requester
            or grant.scope not in allowed
            or grant.agent_version != agent.version
            or grant.catalog_fingerprint != agent.catalog_fingerprint
            or not constraints.holds(grant.constraint, call.args)
        ):
            continue
        call.decided_by = _actor_of(grant)
        await record(
            tx,
            run.run_id,
            now,
            "grant_applied",
            call_id=call.call_id,
            tool=call.tool,
            grant_id=grant.grant_id,
            scope=grant.scope,
            granted_by=grant.granted_by,
            granted_in=grant.run_id,
        )
        return grant
    return None


# -- listing and revoking -------------------------------------------------------------------
