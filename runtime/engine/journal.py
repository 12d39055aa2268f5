"""The journal of a run: the events it records and the notifications it queues, in the
transaction of the change they report; the tickets a run opens, each announced by its note.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any, TypedDict, TypeVar, assert_never

from pydantic import BaseModel

from runtime.domain.agent import Agent
from runtime.domain.external import (
    ORIGIN_KEY,
    extra_secret,
    is_external,
    overridden_approvers,
    overridden_deadline,
)
from runtime.domain.notifications import (
    APPROVAL_CALLBACK,
    APPROVAL_CALLBACK_URL,
    APPROVAL_RESUME,
    ApprovalCallback,
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
from runtime.domain.states import RunStatus
from runtime.domain.tickets import (
    AwaitTarget,
    GrantScope,
    RemoteInput,
    ResumeTicket,
    ToolPermission,
)
from runtime.domain.tools import MASK, Tool
from runtime.engine.deps import Deps
from runtime.store.base import Transaction
from runtime.store.records import CallRecord, EventRecord, OutboxRecord, RunRecord


async def record_claim(tx: Transaction, run: RunRecord, at: datetime) -> None:
    """The event of `run` claimed, by its lease owner under its (new) fence."""
    await record(tx, run.run_id, at, "run_claimed", worker=run.lease_owner, fence=run.fence)


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
    on its own, so a retry never repeats the other delivery. An external approval's run
    whose request gave a callback URL (origin key `APPROVAL_CALLBACK_URL`) gets an
    `ApprovalCallback` to platform ``approval_callback`` the same way, and one whose
    request named a resume destination (origin key `APPROVAL_RESUME`) one more to that
    destination, whose notifier resumes the caller if it deferred. A sub-agent's run
    ending is not announced: its answer goes to its parent, whose end is. Nor is an
    external approval's: its card shows the decision, and a call a rule allowed at once
    has no card to follow up (the caller has the answer, and its callback if it asked).
    """
    if isinstance(note, RunFinished) and run.parent_run_id is not None:
        return
    now = at or deps.clock.now()
    targets: list[tuple[Notification, dict[str, Any]]] = []
    if not (isinstance(note, RunFinished) and ORIGIN_KEY in run.origin):
        targets.append((note, dict(to or run.origin)))
    if isinstance(note, RunFinished) and run.origin.get("callback_url"):
        callback = RunCallback.model_validate(note.payload())
        targets.append((callback, {**run.origin, "platform": "callback"}))
    if isinstance(note, RunFinished) and run.origin.get(APPROVAL_CALLBACK_URL):
        decided = ApprovalCallback(run_id=run.run_id, agent=run.agent, status=note.status)
        targets.append((decided, {**run.origin, "platform": APPROVAL_CALLBACK}))
    resume = run.origin.get(APPROVAL_RESUME)
    if isinstance(note, RunFinished) and isinstance(resume, dict) and resume.get("platform"):
        decided = ApprovalCallback(run_id=run.run_id, agent=run.agent, status=note.status)
        targets.append((decided, dict(resume)))
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


async def notify_finished(deps: Deps, tx: Transaction, run: RunRecord) -> None:
    """Queue `RunFinished` for `run`, which just ended: with its text when done, its
    error when failed, the reason given when cancelled."""
    status = run.status
    ended = RunFinished(
        run_id=run.run_id,
        agent=run.agent,
        status=status.value,
        text=run.final_text if status is RunStatus.DONE else None,
        error=run.error if status is RunStatus.FAILED else None,
        reason=run.error if status is RunStatus.CANCELLED else None,
        thread_id=run.thread_id,
    )
    await notify(deps, tx, run, ended)


def ticket_of(note: Notification) -> str | None:
    """The ticket an outbox item of `note` is filed under (a batch: its first ticket)."""
    match note:
        case BatchOffered():
            return note.ticket_ids[0] if note.ticket_ids else None
        case RunFinished() | RunCallback() | ApprovalCallback():
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
    if deadline is None and expires and is_external(agent):
        deadline = overridden_deadline(run.origin)
    limit = deadline or (agent.deadline_for(tool) if tool is not None and expires else None)
    if approvers is None and is_external(agent):
        approvers = overridden_approvers(run.origin)
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
        decide_in=tool.decide_in if tool is not None else (),
        sso=tool.sso if tool is not None else False,
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
    if target.policy_wants_person:
        return ()
    tool = agent.tools.get(target.tool)
    return agent.grants_for(tool) if tool is not None else ()


TicketNoteClass = (
    type[ApprovalRequested] | type[InputRequested] | type[UncertainCall] | type[RunPaused]
)
"""The notification that announces a ticket as it opens."""


_Described = TypeVar("_Described", bound=DescribedTicket)


class _ToolFields(TypedDict, total=False):
    decide_in: list[str]
    sso: bool
    editable: list[str]
    external: bool
    tool_description: str | None
    tool_server: str | None


def describe_ticket(
    note: type[_Described], run: RunRecord, ticket: ResumeTicket, agent: Agent | None
) -> _Described:
    """`ticket` of `run` described as a `note` (and as its flight-recorder event)."""
    target = ticket.target.model_dump(mode="json", by_alias=True)
    if "args" in target:
        shown = display_args(agent, target.get("tool", ""), target["args"])
        extra = extra_secret(run.origin)
        target["args"] = {k: (MASK if k in extra else v) for k, v in shown.items()}
    about: _ToolFields = {}
    if isinstance(ticket.target, ToolPermission) and agent is not None:
        # The arguments an approver may change (runtime.edits): cards offer an edit form.
        tool = agent.tools.get(ticket.target.tool)
        about["editable"] = list(tool.editable_for(ticket.target.args)) if tool is not None else []
    named = getattr(ticket.target, "tool", None)
    called = agent.tools.get(named) if agent is not None and isinstance(named, str) else None
    if called is not None and not is_external(agent):
        # What the tool says it does, and where an MCP tool comes from: cards show both.
        about["tool_description"] = called.description
        about["tool_server"] = called.server
    if is_external(agent):
        # Cards say the call comes from an agent running elsewhere.
        about["external"] = True
    if ticket.decide_in:
        # Step-up: cards elsewhere link to where it may be decided instead of deciding.
        about["decide_in"] = list(ticket.decide_in)
        about["sso"] = ticket.sso
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
