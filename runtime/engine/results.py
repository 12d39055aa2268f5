"""What callers get back: run results and the pending entries a parked run waits on."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, assert_never

from runtime.domain.states import RunStatus
from runtime.domain.tickets import (
    Child,
    GrantScope,
    Pause,
    RemoteInput,
    ResumeTicket,
    ToolPermission,
    Uncertain,
)
from runtime.store.records import CallRecord, RunRecord

PendingStatus = Literal["approval", "input", "uncertain"]


@dataclass(frozen=True, slots=True)
class ToolCallView:
    """The exact tool call a pending entry is about.

    Attributes:
        call_id: Our id for the call.
        name: The tool's name.
        arguments: The validated arguments (secret ones masked).
        execution_key: Stable key of this call across retries.
        model_call_id: The model's own id for the call.
        attempts: How many times it was dispatched so far.
    """

    call_id: str
    name: str
    arguments: dict[str, Any]
    execution_key: str
    model_call_id: str
    attempts: int


@dataclass(frozen=True, slots=True)
class PendingEntry:
    """One thing a parked run waits on, with the ticket that must be answered.

    Attributes:
        status: ``approval``, ``input`` or ``uncertain``.
        call: The tool call.
        ticket: The committed resume ticket.
        prompt: For ``input``: what is asked; for ``approval``: the model's stated reason.
        schema: For ``input``: the JSON schema of the answer.
        grants: For ``approval``: the standing grants an allow may also give (``run``,
            ``thread``; see `runtime.engine.grants`).
        editable: For ``approval``: the arguments an approver may change before allowing
            (see `runtime.domain.edits`); empty when none may.
    """

    status: PendingStatus
    call: ToolCallView
    ticket: ResumeTicket
    prompt: str | None = None
    schema: dict[str, Any] | None = None
    grants: tuple[GrantScope, ...] = ()
    editable: tuple[str, ...] = ()

    @property
    def execution_key(self) -> str:
        """The call's execution key (``approve`` and friends accept it too)."""
        return self.call.execution_key

    @property
    def run_id(self) -> str:
        """The run the ticket belongs to (a sub-agent's, for a parent's entries)."""
        return self.ticket.run_id

    @property
    def chain(self) -> tuple[str, ...]:
        """For a sub-agent's request: the agents from the top-level run down to the one
        asking (``("ops", "billing")``); empty for a top-level run's own."""
        return self.ticket.chain

    @property
    def ticket_id(self) -> str:
        """The ticket's id."""
        return self.ticket.ticket_id


@dataclass(frozen=True, slots=True)
class RunLink:
    """One run of a delegation tree, as a parent or a child sees it.

    Attributes:
        run_id: The run.
        agent: Its agent.
        task_key: The task it was started for (None for a top-level run).
        status: Where it is now (None where only the lineage was read).
    """

    run_id: str
    agent: str
    task_key: str | None = None
    status: RunStatus | None = None


@dataclass(frozen=True, slots=True)
class Totals:
    """Counters added up over a run's sub-agent runs (children, their children ...).

    Attributes:
        runs: How many sub-agent runs there are.
        turns: Their model calls.
        prompt_tokens: Their prompt tokens.
        completion_tokens: Their completion tokens.
        usage_incomplete: Whether any of them may have been charged for an interrupted
            model call.
    """

    runs: int = 0
    turns: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    usage_incomplete: bool = False

    @property
    def total_tokens(self) -> int:
        """Prompt plus completion tokens."""
        return self.prompt_tokens + self.completion_tokens


@dataclass(frozen=True, slots=True)
class RunResult:
    """A run as it stands after the call that returned it.

    Attributes:
        run_id: The run.
        thread_id: Its conversation.
        agent: The agent's name.
        status: ``done``, ``awaiting``, ``paused``, ``failed``, ``cancelled``, or
            ``queued`` / ``running`` while not finished.
        text: The final answer when done.
        pending: What an ``awaiting`` run waits on: its own requests, and for a call
            waiting on a sub-agent, that sub-agent's (the deepest ones).
        turns: Model calls over the run's whole life.
        prompt_tokens: Lifetime prompt tokens.
        completion_tokens: Lifetime completion tokens.
        usage_incomplete: True when an interrupted model call may have been charged.
        error: Why the run failed, if it did.
        requester: Who started it.
        input: The message the run was started with.
        created_at: When it was started.
        updated_at: When it last changed.
        origin: Where it was started and where its notifications go (``platform``,
            channel ...), as the edge that started it recorded it.
        parent_run_id: For a sub-agent's run: the run that started it.
        task_key: For a sub-agent's run: the task it was started for.
        depth: 0 for a top-level run, 1 for its children ...
        chain: For a sub-agent's run: the runs from the top-level one down to this one.
        children: The sub-agent runs this run started, oldest first (filled by
            `Runtime.get`, empty in run lists).
        children_totals: The counters of every sub-agent run below this one, added up
            (`turns` and the token fields are this run's own); filled by `Runtime.get`
            and by the calls that drive a run, zero in run lists.
        replayed: Set by `Runtime.start` when an idempotency key it was given had
            already started this run: nothing was started by that call.
    """

    run_id: str
    thread_id: str
    agent: str
    status: RunStatus
    text: str | None
    pending: tuple[PendingEntry, ...]
    turns: int
    prompt_tokens: int
    completion_tokens: int
    usage_incomplete: bool
    error: str | None
    requester: str | None
    input: str = ""
    created_at: datetime | None = None
    updated_at: datetime | None = None
    origin: dict[str, Any] = field(default_factory=dict)
    parent_run_id: str | None = None
    task_key: str | None = None
    depth: int = 0
    chain: tuple[RunLink, ...] = ()
    children: tuple[RunLink, ...] = ()
    children_totals: Totals = field(default_factory=Totals)
    replayed: bool = False

    @property
    def total_tokens(self) -> int:
        """Prompt plus completion tokens over the run's life."""
        return self.prompt_tokens + self.completion_tokens


def pending_entry(
    ticket: ResumeTicket,
    call: CallRecord,
    masked: dict[str, Any],
    grants: tuple[GrantScope, ...] = (),
    editable: tuple[str, ...] = (),
) -> PendingEntry | None:
    """Describe an open ticket on `call` as a pending entry (None: not about a call);
    `grants` are the standing grants an allow of it may give, `editable` the arguments
    an approver may change (both kept for approvals only)."""
    view = ToolCallView(
        call_id=call.call_id,
        name=call.tool,
        arguments=masked,
        execution_key=call.execution_key,
        model_call_id=call.model_call_id,
        attempts=call.attempts,
    )
    target = ticket.target
    match target:
        case RemoteInput():
            return PendingEntry("input", view, ticket, prompt=target.prompt, schema=target.schema_)
        case Uncertain():
            return PendingEntry("uncertain", view, ticket)
        case ToolPermission():
            return PendingEntry(
                "approval", view, ticket, prompt=target.reason, grants=grants, editable=editable
            )
        case Pause() | Child():
            # A child's own pending entries stand for it (`runtime.services.queries`).
            return None
        case _:
            assert_never(target)


def run_result(
    run: RunRecord,
    pending: tuple[PendingEntry, ...],
    *,
    children: Sequence[RunRecord] = (),
    children_totals: Totals | None = None,
) -> RunResult:
    """Build a `RunResult` from a stored run, its pending entries and, for `Runtime.get`,
    its direct children and the totals of every run below it."""
    chain: tuple[RunLink, ...] = ()
    if run.lineage:
        ancestors = (RunLink(a["run_id"], a["agent"]) for a in run.lineage)
        chain = (*ancestors, RunLink(run.run_id, run.agent, run.task_key, run.status))
    return RunResult(
        run_id=run.run_id,
        thread_id=run.thread_id,
        agent=run.agent,
        status=run.status,
        text=run.final_text,
        pending=pending,
        turns=run.turns,
        prompt_tokens=run.prompt_tokens,
        completion_tokens=run.completion_tokens,
        usage_incomplete=run.usage_incomplete,
        error=run.error,
        requester=run.requester,
        input=run.input,
        created_at=run.created_at,
        updated_at=run.updated_at,
        origin=dict(run.origin),
        parent_run_id=run.parent_run_id,
        task_key=run.task_key,
        depth=run.depth,
        chain=chain,
        children=tuple(RunLink(c.run_id, c.agent, c.task_key, c.status) for c in children),
        children_totals=children_totals if children_totals is not None else Totals(),
    )
