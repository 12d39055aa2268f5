"""What callers get back: run results and the pending entries a parked run waits on."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, assert_never

from runtime.states import RunStatus
from runtime.store.records import CallRecord, RunRecord
from runtime.tickets import (
    GrantScope,
    Pause,
    RemoteInput,
    ResumeTicket,
    ToolPermission,
    Uncertain,
)

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
        prompt: For ``input``: what is asked.
        schema: For ``input``: the JSON schema of the answer.
        grants: For ``approval``: the standing grants an allow may also give (``run``,
            ``thread``; see `runtime.grants`).
    """

    status: PendingStatus
    call: ToolCallView
    ticket: ResumeTicket
    prompt: str | None = None
    schema: dict[str, Any] | None = None
    grants: tuple[GrantScope, ...] = ()

    @property
    def execution_key(self) -> str:
        """The call's execution key (``approve`` and friends accept it too)."""
        return self.call.execution_key

    @property
    def ticket_id(self) -> str:
        """The ticket's id."""
        return self.ticket.ticket_id


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
        pending: What an ``awaiting`` run waits on.
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

    @property
    def total_tokens(self) -> int:
        """Prompt plus completion tokens over the run's life."""
        return self.prompt_tokens + self.completion_tokens


def pending_entry(
    ticket: ResumeTicket,
    call: CallRecord,
    masked: dict[str, Any],
    grants: tuple[GrantScope, ...] = (),
) -> PendingEntry | None:
    """Describe an open ticket on `call` as a pending entry (None: not about a call);
    `grants` are the standing grants an allow of it may give."""
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
            return PendingEntry("approval", view, ticket, prompt=target.reason, grants=grants)
        case Pause():
            return None
        case _:
            assert_never(target)


def run_result(run: RunRecord, pending: tuple[PendingEntry, ...]) -> RunResult:
    """Build a `RunResult` from a stored run and its pending entries."""
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
    )
