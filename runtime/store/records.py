"""Rows the store keeps, as plain dataclasses the core reads and writes."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from runtime.domain.notifications import PostingNotification, kinds_of
from runtime.domain.states import CallState, RunStatus
from runtime.domain.tickets import ANYONE, GROUP_PREFIX, REQUESTER, ResumeTicket


@dataclass(slots=True)
class RunRecord:
    """One run: its status, transcript, counters and lease.

    ``pause_requested`` and ``cancel_requested`` are written only with
    `Transaction.set_run_flags`, so a worker saving the row never clobbers a request made
    while it held the lease.

    A sub-agent's run (a child) names its parent run, the parent's delegating call and
    the task key it was started for (unique per parent), its depth (1 for a child of a
    top-level run) and its `lineage`: ``{"run_id", "agent"}`` of every ancestor, the
    top-level run first. ``trace_context`` is the W3C context (``traceparent``,
    ``tracestate``) of the trace the run was started in, which every later stretch of
    it continues (None: started with tracing off).

    The transcript (`messages`) only grows: entries are appended, never changed or
    removed, so a store writes only what was appended since it last wrote the run.
    ``messages_sealed`` is a store's own bookkeeping of that (how many entries it keeps
    apart from the run's row); it is not part of the run's value.
    """

    run_id: str
    thread_id: str
    agent: str
    agent_version: str
    status: RunStatus
    input: str
    requester: str | None
    created_at: datetime
    updated_at: datetime
    origin: dict[str, Any] = field(default_factory=dict)
    messages: list[dict[str, Any]] = field(default_factory=list)
    turns: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    usage_incomplete: bool = False
    model_attempt: int = 0
    model_in_flight: bool = False
    batch: int = 0
    final_text: str | None = None
    error: str | None = None
    pause_requested: bool = False
    cancel_requested: bool = False
    lease_owner: str | None = None
    lease_expires_at: datetime | None = None
    fence: int = 0
    parent_run_id: str | None = None
    parent_call_id: str | None = None
    task_key: str | None = None
    depth: int = 0
    lineage: list[dict[str, str]] = field(default_factory=list)
    trace_context: dict[str, str] | None = None
    messages_sealed: int = field(default=0, compare=False, repr=False)


RUN_CREATED_WITH = (
    "thread_id",
    "agent",
    "agent_version",
    "input",
    "requester",
    "created_at",
    "origin",
    "trace_context",
)
"""What a run is created with: written by `Transaction.insert_run` only, never updated."""


@dataclass(frozen=True, slots=True)
class RunFlags:
    """The request flags of a run as stored, returned by every run update."""

    pause_requested: bool = False
    cancel_requested: bool = False


@dataclass(slots=True)
class CallRecord:
    """One tool call the model asked for, and everything that happened to it.

    ``edit`` is set when an approver changed the arguments before allowing the call
    (`runtime.domain.edits`): what changed, by whom, and the digests of the arguments before
    and after; ``args`` then holds the changed arguments, which the tool runs with.
    """

    call_id: str
    run_id: str
    batch: int
    seq: int
    model_call_id: str
    tool: str
    args: dict[str, Any]
    state: CallState
    replay_policy: str
    execution_key: str
    created_at: datetime
    updated_at: datetime
    attempts: int = 0
    result: Any = None
    error: str | None = None
    answer: dict[str, Any] | None = None
    decided_by: dict[str, Any] | None = None
    reason: str | None = None
    edit: dict[str, Any] | None = None


CALL_CREATED_WITH = (
    "run_id",
    "batch",
    "seq",
    "model_call_id",
    "tool",
    "replay_policy",
    "execution_key",
    "created_at",
)
"""What a tool call is proposed with: written by `Transaction.insert_call` only. Not its
``args``: an approver may change them before allowing the call (`runtime.domain.edits`)."""


@dataclass(slots=True)
class EventRecord:
    """One flight-recorder entry. ``seq`` is assigned by the store, in order per run."""

    run_id: str
    at: datetime
    kind: str
    data: dict[str, Any]
    actor: str | None = None
    seq: int = 0


@dataclass(slots=True)
class OutboxRecord:
    """A notification a chat platform must receive, with its delivery state.

    ``state`` is ``pending`` until delivered (``delivered``) or given up (``failed``).
    ``platform_ref`` holds the platform's message reference once posted, so the message
    can be edited later. A delivery claims the item first (`Transaction.claim_outbox`):
    ``lease_owner`` delivers it until ``lease_expires_at``, and ``fence`` (one more for
    every claim) lets only the latest claimer record the outcome.
    """

    outbox_id: str
    run_id: str
    kind: str
    payload: dict[str, Any]
    destination: dict[str, Any]
    created_at: datetime
    next_attempt_at: datetime
    ticket_id: str | None = None
    state: str = "pending"
    attempts: int = 0
    last_error: str | None = None
    platform_ref: dict[str, Any] | None = None
    delivered_at: datetime | None = None
    lease_owner: str | None = None
    lease_expires_at: datetime | None = None
    fence: int = 0

    @property
    def pacing_key(self) -> str | None:
        """The unit of pacing of this notification; see `pacing_key`."""
        return pacing_key(self.kind, self.destination)

    @property
    def posted_in(self) -> str | None:
        """The channel (``platform:channel``, see `channel_key`) of the message this
        notification left, once delivered with a platform reference; else None."""
        if self.state != "delivered" or not self.platform_ref:
            return None
        return channel_key(self.destination)


PACED_KINDS = frozenset(kinds_of(PostingNotification))
"""Notifications that post a new message in a channel. Only those are paced: editing a
posted card or a reply only one person sees has its own, far looser platform limits."""


def pacing_key(kind: str, destination: Mapping[str, Any]) -> str | None:
    """The pacing unit of a notification: its channel when it posts a message, else none."""
    return channel_key(destination) if kind in PACED_KINDS else None


def channel_key(destination: Mapping[str, Any]) -> str | None:
    """``platform:channel`` of an outbox destination; None when it names no channel.

    Messages posted to one channel are paced together, across every replica (see
    `pacing_key`). The channel is the destination's ``channel`` (or ``channel_id``, as
    Discord origins name it).
    """
    channel = destination.get("channel") or destination.get("channel_id")
    if channel is None or channel == "":
        return None
    platform = destination.get("platform") or "console"
    return f"{platform}:{channel}"


@dataclass(slots=True)
class IdempotencyRecord:
    """A request key already used to start a run (webhooks' ``Idempotency-Key``).

    Attributes:
        scope: Where the key is unique (e.g. ``hook:refunds``).
        key: The caller's key.
        fingerprint: A hash of the request body; the same key with another body is refused.
        run_id: The run the first request started.
        created_at: When it was first seen.
    """

    scope: str
    key: str
    fingerprint: str
    run_id: str
    created_at: datetime


@dataclass(slots=True)
class ReceivedRecord:
    """A decision received from a chat platform, stored before it is acknowledged.

    Attributes:
        command_id: Our id.
        source: The platform (``slack``, ``discord``...).
        delivery_id: The platform's id of this delivery; a second delivery with the same
            id is a retry and is ignored.
        ticket_id: The ticket the click names.
        correlation: The token the click carried.
        answer: The answer, as `runtime.domain.tickets.ANSWER` JSON.
        actor: The authenticated user, as `runtime.domain.tickets.Actor` JSON.
        reply: Where the platform wants feedback (opaque to the runtime).
        received_at: When it was stored.
        state: ``pending`` until ``applied`` or ``refused``.
        error_code: Why it was refused (an error ``code``), if it was.
        error: The refusal message.
        applied_at: When it was applied or refused.
        lease_owner: The process applying it (`Transaction.claim_received`), if any.
        lease_expires_at: Until when that claim holds.
    """

    command_id: str
    source: str
    delivery_id: str
    ticket_id: str
    correlation: str
    answer: dict[str, Any]
    actor: dict[str, Any]
    received_at: datetime
    reply: dict[str, Any] | None = None
    state: str = "pending"
    error_code: str | None = None
    error: str | None = None
    applied_at: datetime | None = None
    lease_owner: str | None = None
    lease_expires_at: datetime | None = None


@dataclass(slots=True)
class GrantRecord:
    """A standing grant: later calls of one tool that run without asking.

    An approver gives it with an allow (see `runtime.engine.grants`); it covers calls of
    `tool` of `agent` in the run it was given in (``scope`` ``run``) or in runs of the
    same thread requested by the same `requester` (``thread``), whose arguments meet
    `constraint`, until `expires_at` or until it is revoked.

    Attributes:
        grant_id: Our id.
        agent: The agent whose tool it covers.
        agent_version: The agent's version when it was given; it covers nothing once the
            agent changed.
        catalog_fingerprint: Likewise for the agent's tool catalog.
        tool: The tool's name.
        scope: ``run`` or ``thread``.
        run_id: The run it was given in.
        thread_id: That run's thread.
        requester: That run's requester (a thread grant covers only their runs).
        constraint: Which arguments it covers (`runtime.domain.constraints`); None: any.
        granted_by: Who gave it (an actor id).
        granted_by_name: Their display name, if known.
        platform: Where they gave it (``slack``, ``api`` ...).
        ticket_id: The decision it came with.
        created_at: When it was given.
        expires_at: When it stops covering calls (None: with its run).
        revoked_at: When it was revoked, if it was.
        revoked_by: Who revoked it.
    """

    grant_id: str
    agent: str
    agent_version: str
    catalog_fingerprint: str
    tool: str
    scope: str
    run_id: str
    thread_id: str
    requester: str | None
    constraint: dict[str, Any] | None
    granted_by: str
    granted_by_name: str | None
    platform: str
    ticket_id: str | None
    created_at: datetime
    expires_at: datetime | None = None
    revoked_at: datetime | None = None
    revoked_by: str | None = None

    def active(self, now: datetime) -> bool:
        """Whether it covers calls at `now` (not revoked, not expired)."""
        return self.revoked_at is None and (self.expires_at is None or now < self.expires_at)


@dataclass(frozen=True, slots=True)
class Position:
    """Where a page of a listing ended: the last item's time and id (its sort key).

    Listings sort by ``(time, id)``; the next page starts just past this position.
    """

    at: datetime
    id: str


ANY_DECIDER = "any"
"""The decider key of an ``*`` approver entry: whoever is signed in."""


def decider_keys(ticket: ResumeTicket) -> tuple[str, ...]:
    """The keys under which an open ticket is found by those who may decide it.

    ``user:<id>`` for a user id (the requester's for a ``requester`` entry, or when there
    are no approvers), ``group:<name>`` for a group, `ANY_DECIDER` for ``*``. No keys
    means only an operator decides. Four-eyes is not a key: the store keeps the barred
    requester apart (see `Transaction.decidable_tickets`).
    """
    requester = ticket.requester
    entries = list(ticket.approvers) or ([REQUESTER] if requester is not None else [])
    keys: list[str] = []
    for entry in entries:
        if entry == ANYONE:
            key = ANY_DECIDER
        elif entry == REQUESTER:
            if requester is None:
                continue
            key = f"user:{requester}"
        elif entry.startswith(GROUP_PREFIX):
            key = entry
        else:
            key = f"user:{entry}"
        if key not in keys:
            keys.append(key)
    return tuple(keys)


def viewer_keys(user_id: str, groups: Iterable[str]) -> tuple[str, ...]:
    """The decider keys a user with these groups matches (see `decider_keys`)."""
    return (ANY_DECIDER, f"user:{user_id}", *(f"group:{g}" for g in sorted(set(groups))))
