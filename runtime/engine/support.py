"""Helpers shared by the engine and the decision path: events, outbox rows, tickets."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Protocol, TypedDict, TypeVar, assert_never

from pydantic import BaseModel

from runtime.domain.agent import Agent
from runtime.domain.clock import Clock, IdSource
from runtime.domain.errors import ConfigurationError
from runtime.domain.model import Model
from runtime.domain.notifications import (
    ApprovalRequested,
    BatchOffered,
    Decided,
    DecisionRefused,
    DescribedTicket,
    InputRequested,
    Notification,
    RunCallback,
    RunFinished,
    RunPaused,
    TicketExpired,
    TicketVoided,
    UncertainCall,
)
from runtime.domain.states import CallState, RunStatus, check_call_move, check_run_move
from runtime.domain.tickets import (
    AwaitTarget,
    GrantScope,
    RemoteInput,
    ResumeTicket,
    ToolPermission,
)
from runtime.domain.tools import Tool
from runtime.engine.handoff import Slot, Slots
from runtime.store.base import Store, Transaction
from runtime.store.records import CallRecord, EventRecord, OutboxRecord, RunRecord


class Checkpoint(Protocol):
    """Called at named points of execution (crash tests kill the process there).

    Points: ``dispatch_committed``, ``tool_returned`` (before its result is committed),
    ``result_committed``, ``model_call_committed``, ``decision_committed``.
    """

    def __call__(self, point: str, info: dict[str, Any]) -> None:
        """Observe a point."""
        ...


@dataclass(frozen=True, slots=True)
class ResultMiddlewareInput:
    """What result middleware sees: the recorded raw result of one settled call."""

    call: CallRecord
    content: str


ResultMiddleware = Any  # Callable[[ResultMiddlewareInput], str]


@dataclass
class Deps:
    """What the engine and the decision path share."""

    store: Store
    clock: Clock
    ids: IdSource
    agents: dict[str, Agent]
    worker_id: str
    lease_seconds: float
    checkpoint: Checkpoint | None = None
    result_middleware: list[ResultMiddleware] = field(default_factory=list)
    models: dict[str, Model] = field(default_factory=dict)
    """The resolved model of each registered agent, by agent name."""
    slots: Slots | None = None
    """A local worker that takes runs claimed in the commit that made them ready."""

    def reserve_slot(self) -> Slot | None:
        """A free place in the local worker, if one is attached and has one."""
        return self.slots.reserve() if self.slots is not None else None

    def model_of(self, agent: Agent) -> Model:
        """The model `agent` runs on (resolved when it was registered)."""
        model = self.models.get(agent.name)
        if model is not None:
            return model
        if isinstance(agent.model, str):
            raise ConfigurationError(
                f"agent {agent.name!r}: its model {agent.model!r} was never resolved"
            )
        return agent.model

    def reach(self, point: str, **info: Any) -> None:
        """Report a named execution point."""
        if self.checkpoint is not None:
            self.checkpoint(point, info)


def move(call: CallRecord, new: CallState) -> None:
    """Move `call` to `new`, enforcing the call state machine."""
    check_call_move(call.state, new)
    call.state = new


def move_run(run: RunRecord, new: RunStatus) -> None:
    """Move `run` to `new`, enforcing the run state machine (`RUN_TRANSITIONS`).

    Every status change of a run goes through here; the store only ever claims a run
    (queued, or running with an expired lease -> running) in its own statement.
    """
    check_run_move(run.status, new)
    run.status = new


async def record_claim(tx: Transaction, run: RunRecord, at: datetime) -> None:
    """The event of `run` claimed, by its lease owner under its (new) fence."""
    await record(tx, run.run_id, at, "run_claimed", worker=run.lease_owner, fence=run.fence)


def claim_new(deps: Deps, run: RunRecord, now: datetime) -> None:
    """Make a run about to be inserted already claimed by this worker, its first model
    call marked in flight: the inserting commit is also the claim, and a crash leaves
    the run to recovery once the lease expires."""
    move_run(run, RunStatus.RUNNING)
    run.fence = 1
    run.lease_owner = deps.worker_id
    run.lease_expires_at = now + timedelta(seconds=deps.lease_seconds)
    run.model_attempt = 1
    run.model_in_flight = True


def to_jsonable(value: Any) -> Any:
    """Turn a tool's return value into something JSON can store."""
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return str(value)
    return value


def content_of(value: Any) -> str:
    """The text a model sees for a recorded result."""
    if isinstance(value, str):
        return value
    return json.dumps(value, default=str)


async def record(
    tx: Transaction,
    run_id: str,
    at: datetime,
    kind: str,
    by: str | None = None,
    **data: Any,
) -> None:
    """Append one flight-recorder event; `by` is the acting user, if any."""
    await tx.append_event(EventRecord(run_id=run_id, at=at, kind=kind, data=data, actor=by))


async def notify(
    deps: Deps,
    tx: Transaction,
    run: RunRecord,
    note: Notification,
    *,
    to: Mapping[str, Any] | None = None,
    at: datetime | None = None,
    behind: timedelta = timedelta(0),
) -> None:
    """Queue a platform notification about `run` in the current transaction.

    It goes `to` a destination (default: the run's origin), due `at` a time (default:
    now); it counts as created `behind` that time, so a channel delivers it after items
    queued at the same moment.

    A finished run whose origin asks for a completion callback gets a second item,
    `RunCallback`, addressed to platform ``callback``: each item is delivered and retried
    on its own, so a retry never repeats the other delivery. A sub-agent's run ending is
    not announced: its answer goes to its parent, whose end is.
    """
    if isinstance(note, RunFinished) and run.parent_run_id is not None:
        return
    now = at or deps.clock.now()
    targets: list[tuple[Notification, dict[str, Any]]] = [(note, dict(to or run.origin))]
    if isinstance(note, RunFinished) and run.origin.get("callback_url"):
        callback = RunCallback.model_validate(note.payload())
        targets.append((callback, {**run.origin, "platform": "callback"}))
    for item, destination in targets:
        await tx.add_outbox(
            OutboxRecord(
                outbox_id=deps.ids.new_id("ob"),
                run_id=run.run_id,
                kind=item.kind,
                payload=item.payload(),
                destination=destination,
                created_at=now + behind,
                next_attempt_at=now,
                ticket_id=ticket_of(item),
            )
        )


def ticket_of(note: Notification) -> str | None:
    """The ticket an outbox item of `note` is filed under (a batch: its first ticket)."""
    match note:
        case BatchOffered():
            return note.ticket_ids[0] if note.ticket_ids else None
        case RunFinished() | RunCallback():
            return None
        case (
            ApprovalRequested()
            | InputRequested()
            | UncertainCall()
            | RunPaused()
            | Decided()
            | TicketExpired()
            | TicketVoided()
            | DecisionRefused()
        ):
            return note.ticket_id
        case _:
            assert_never(note)


def display_args(agent: Agent | None, tool_name: str, args: dict[str, Any]) -> dict[str, Any]:
    """Arguments as a person may see them (secret ones masked)."""
    if agent is None or tool_name not in agent.tools:
        return args
    return agent.tools[tool_name].masked(args)


async def open_ticket(
    deps: Deps,
    tx: Transaction,
    run: RunRecord,
    agent: Agent,
    target: AwaitTarget,
    tool: Tool | None,
    note: TicketNoteClass,
    *,
    approvers: tuple[str, ...] | None = None,
    deadline: timedelta | None = None,
) -> ResumeTicket:
    """Persist an open ticket for `target`, with its event and its notification (a
    `note` of it).

    `approvers` and `deadline` override the tool's (for escalation). Uncertain and pause
    tickets never expire: there is no safe default for them.
    """
    now = deps.clock.now()
    expires = isinstance(target, ToolPermission | RemoteInput)
    limit = deadline or (agent.deadline_for(tool) if tool is not None and expires else None)
    if approvers is None:
        approvers = agent.approvers_for(tool) if tool is not None else ()
    ticket = ResumeTicket(
        ticket_id=deps.ids.new_id("tk"),
        correlation=deps.ids.token(),
        run_id=run.run_id,
        thread_id=run.thread_id,
        agent=agent.name,
        agent_version=agent.version,
        catalog_fingerprint=agent.catalog_fingerprint,
        target=target,
        requester=run.requester,
        approvers=approvers,
        four_eyes=agent.four_eyes_for(tool) if tool is not None else False,
        deadline=now + limit if limit is not None else None,
        created_at=now,
        chain=chain_of(run),
    )
    await tx.insert_ticket(ticket)
    opened = describe_ticket(note, run, ticket, agent)
    await record(tx, run.run_id, now, "ticket_opened", **opened.details())
    await notify(deps, tx, run, opened)
    return ticket


def grant_scopes(agent: Agent | None, ticket: ResumeTicket) -> tuple[GrantScope, ...]:
    """The standing grants an approver may give with an allow of `ticket` (none for a
    four-eyes ticket, or one that is not about a tool's permission)."""
    target = ticket.target
    if not isinstance(target, ToolPermission) or ticket.four_eyes or agent is None:
        return ()
    tool = agent.tools.get(target.tool)
    return agent.grants_for(tool) if tool is not None else ()


TicketNoteClass = (
    type[ApprovalRequested] | type[InputRequested] | type[UncertainCall] | type[RunPaused]
)
"""The notification that announces a ticket as it opens."""

_Described = TypeVar("_Described", bound=DescribedTicket)


class _ToolFields(TypedDict, total=False):
    editable: list[str]
    tool_description: str | None
    tool_server: str | None


def describe_ticket(
    note: type[_Described], run: RunRecord, ticket: ResumeTicket, agent: Agent | None
) -> _Described:
    """`ticket` of `run` described as a `note` (and as its flight-recorder event)."""
    target = ticket.target.model_dump(mode="json", by_alias=True)
    if "args" in target:
        target["args"] = display_args(agent, target.get("tool", ""), target["args"])
    about: _ToolFields = {}
    if isinstance(ticket.target, ToolPermission) and agent is not None:
        # The arguments an approver may change (runtime.edits): cards offer an edit form.
        tool = agent.tools.get(ticket.target.tool)
        about["editable"] = list(tool.editable_arguments()) if tool is not None else []
    named = getattr(ticket.target, "tool", None)
    called = agent.tools.get(named) if agent is not None and isinstance(named, str) else None
    if called is not None:
        # What the tool says it does, and where an MCP tool comes from: cards show both.
        about["tool_description"] = called.description
        about["tool_server"] = called.server
    return note(
        run_id=run.run_id,
        agent=run.agent,
        ticket_id=ticket.ticket_id,
        target=target,
        requester=ticket.requester,
        approvers=list(ticket.approvers),
        deciders=list(ticket.deciders()),
        four_eyes=ticket.four_eyes,
        who_may_decide=ticket.who_may_decide(),
        deadline=ticket.deadline.isoformat() if ticket.deadline else None,
        grants=list(grant_scopes(agent, ticket)),
        chain=list(ticket.chain),
        **about,
    )


def chain_of(run: RunRecord) -> tuple[str, ...]:
    """The agents from the top-level run down to `run`'s own, for a sub-agent's run
    (``("ops", "billing")``); empty for a top-level run."""
    if not run.lineage:
        return ()
    return (*(a["agent"] for a in run.lineage), run.agent)


def permission_target(call: CallRecord, reason: str | None) -> ToolPermission:
    """The permission target for a call that must be approved."""
    return ToolPermission(call_id=call.call_id, tool=call.tool, args=call.args, reason=reason)
