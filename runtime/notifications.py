"""What the outbox hands a platform's notifier: a typed notification and its `Delivery`.

Every message a platform must receive is written to the outbox in the transaction of the
state change it reports. When it is delivered, the core reads it back as one frozen value
of the closed union `Notification` (tagged by ``kind``) and gathers what the notifier needs
to know about the world in a `Delivery`: where it goes, the ticket as it stands now, the
card an outcome edits, the run's first message in that channel. Notifiers never read the
store or open transactions; they turn a value into a platform message.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    TypeAdapter,
    ValidationError,
    model_validator,
)

from runtime.refusals import Refusal, RefusalReason
from runtime.tickets import ResumeTicket


class _Note(BaseModel):
    # Stored payloads may carry keys a later version added: ignored, never an error.
    model_config = ConfigDict(frozen=True, extra="ignore")

    run_id: str
    agent: str = ""

    def payload(self) -> dict[str, Any]:
        """The notification as plain data (for renderers that read mappings)."""
        return self.model_dump(mode="json")


class _TicketNote(_Note):
    ticket_id: str
    target: dict[str, Any]
    requester: str | None = None
    approvers: list[str] = []
    deciders: list[str] = []
    four_eyes: bool = False
    who_may_decide: str = ""
    deadline: str | None = None
    grants: list[str] = []
    """The standing grants an allow may also give (``run``, ``thread``)."""
    chain: list[str] = []
    """For a sub-agent's request: the agents from the top-level run down to the asking one."""
    editable: list[str] = []
    """For an approval: the arguments an approver may change before allowing."""
    tool_description: str | None = None
    """What the tool says it does (its docstring, or an MCP tool's description)."""
    tool_server: str | None = None
    """The MCP server an MCP tool comes from (None: not an MCP tool)."""

    @model_validator(mode="before")
    @classmethod
    def _deciders_of_older_notes(cls, data: Any) -> Any:
        # Notifications stored before `deciders` existed list only the approvers.
        if isinstance(data, dict) and "deciders" not in data:
            approvers = list(data.get("approvers") or [])
            requester = data.get("requester")
            alone = [requester] if requester and not data.get("four_eyes") else []
            data = {**data, "deciders": approvers or alone}
        return data


class ApprovalRequested(_TicketNote):
    """An ``ask`` tool call waits for Allow or Deny."""

    kind: Literal["approval_requested"] = "approval_requested"


class InputRequested(_TicketNote):
    """A tool asked for typed input (``target`` holds the prompt and schema)."""

    kind: Literal["input_requested"] = "input_requested"


class UncertainCall(_TicketNote):
    """A ``manual`` call's outcome is unknown; a person must resolve it."""

    kind: Literal["uncertain"] = "uncertain"


class Decided(_Note):
    """A ticket was decided (its card shows by whom)."""

    kind: Literal["decided"] = "decided"
    ticket_id: str
    decision: str
    actor: str | None = None
    actor_name: str | None = None
    platform: str | None = None
    decided_at: str | None = None
    reason: str | None = None
    tool: str | None = None
    grant: dict[str, Any] | None = None
    """The standing grant given with the allow (or that allowed it, with `by_grant`):
    ``grant_id``, ``scope``, ``expires_at``, ``constraint``."""
    by_grant: bool = False
    args_digest: str | None = None
    """For an allow: the digest of the arguments the call runs with."""
    edit: dict[str, Any] | None = None
    """For an allow with edits: what changed (``summary``, ``changes``), by whom."""


class TicketExpired(_Note):
    """A ticket's deadline passed without a decision."""

    kind: Literal["expired"] = "expired"
    ticket_id: str
    action: str = "deny"
    escalated_to: list[str] = []


class TicketVoided(_Note):
    """A ticket was withdrawn (its run was cancelled)."""

    kind: Literal["ticket_voided"] = "ticket_voided"
    ticket_id: str
    reason: str | None = None


class RunFinished(_Note):
    """The run ended: ``done`` with its text, ``failed`` with its error, or ``cancelled``."""

    kind: Literal["run_finished"] = "run_finished"
    status: str
    text: str | None = None
    error: str | None = None
    reason: str | None = None
    thread_id: str | None = None


class RunPaused(_Note):
    """The run was paused; it waits to be resumed."""

    kind: Literal["run_paused"] = "run_paused"
    ticket_id: str | None = None


class DecisionRefused(_Note):
    """A stored click was refused when it was applied (e.g. the loser of two clicks)."""

    kind: Literal["decision_refused"] = "decision_refused"
    ticket_id: str
    error: str | None = None
    reason: str | None = None
    decided_by: str | None = None
    message: str | None = None
    actor: str | None = None


class BatchOffered(_Note):
    """Several calls of one model turn wait for approval: once every one of their cards
    is posted, a message offers to decide them all at once ("Allow all N").

    Attributes:
        ticket_ids: The permission tickets of the turn, in the order of their calls; the
            first one names the batch (`runtime.batches`).
        token: Proves a click came from this message (`runtime.batches.batch_token`).
        calls: Each call as shown on its card: ``tool`` and masked ``args``.
    """

    kind: Literal["batch_offered"] = "batch_offered"
    ticket_ids: list[str]
    token: str
    calls: list[dict[str, Any]] = []


class RunCallback(_Note):
    """A webhook's run ended: its completion callback."""

    kind: Literal["run_callback"] = "run_callback"
    status: str
    text: str | None = None
    error: str | None = None
    reason: str | None = None


Notification = Annotated[
    ApprovalRequested
    | InputRequested
    | UncertainCall
    | Decided
    | TicketExpired
    | TicketVoided
    | RunFinished
    | RunPaused
    | DecisionRefused
    | BatchOffered
    | RunCallback,
    Discriminator("kind"),
]
"""Every notification a platform can receive."""
NOTIFICATION: TypeAdapter[Notification] = TypeAdapter(Notification)

TicketNotification = ApprovalRequested | InputRequested | UncertainCall
"""The notifications that post a card asking for a decision."""
OutcomeNotification = Decided | TicketExpired | TicketVoided
"""The notifications that edit a card to show how its ticket ended."""


class UnreadableNotification(ValueError):
    """A stored notification that no known kind fits (delivery gives it up)."""


def read_notification(kind: str, payload: Mapping[str, Any]) -> Notification:
    """The typed notification of a stored ``kind`` and payload.

    Raises:
        UnreadableNotification: The kind is unknown or the payload does not fit it.
    """
    try:
        return NOTIFICATION.validate_python({**payload, "kind": kind})
    except ValidationError as exc:
        raise UnreadableNotification(f"a {kind!r} notification does not fit: {exc}") from None


def refusal_of(note: DecisionRefused, ticket: ResumeTicket | None) -> Refusal:
    """The refusal a ``decision_refused`` notification reports, with the ticket as it
    stands now (who decided it, who may)."""
    try:
        reason = RefusalReason(note.reason or note.error or "")
    except ValueError:
        reason = RefusalReason.NOT_AWAITING
    return Refusal(reason, note.message or reason.value, ticket)


@dataclass(frozen=True, slots=True)
class PostedCard:
    """A ticket's card, as the outbox knows it.

    Attributes:
        note: The notification that posts it.
        state: ``pending`` (not posted yet), ``delivered`` or ``failed``.
        ref: The platform's reference to the posted message (empty until posted).
    """

    note: TicketNotification | RunPaused
    state: str
    ref: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class BatchMember:
    """One call of a `BatchOffered` batch, as the outbox knows it.

    Attributes:
        ticket: Its ticket as it stands now (None: it no longer exists).
        card: Its card on the batch message's platform (None: none was queued there).
    """

    ticket: ResumeTicket | None
    card: PostedCard | None


@dataclass(frozen=True, slots=True)
class Delivery:
    """Where a notification goes and what its notifier needs to know about the world.

    Attributes:
        outbox_id: The outbox item (for logs).
        destination: The run's origin: ``platform``, channel, thread ...
        attempt: 1 for the first try.
        ticket: The notification's ticket as it stands now, if it has one (a card posted
            late shows a decided ticket without buttons; a card's buttons carry its
            correlation token).
        card: For outcomes: the card they edit, if one was queued.
        first_message: The platform reference of the run's first message delivered to
            this destination's channel (to keep a run's messages in one thread).
        members: For `BatchOffered`: each call's ticket and card, in the batch's order.
        pace: For a message posted in a paced channel: await it right before posting. It
            holds the channel's slot, shared by every process on the database, and waits
            while another process holds it (None: not paced).
    """

    outbox_id: str
    destination: Mapping[str, Any]
    attempt: int = 1
    ticket: ResumeTicket | None = None
    card: PostedCard | None = None
    first_message: Mapping[str, Any] | None = None
    members: tuple[BatchMember, ...] = ()
    pace: Callable[[], Awaitable[None]] | None = None

    @property
    def platform(self) -> str | None:
        """The destination's platform."""
        platform = self.destination.get("platform")
        return str(platform) if platform else None


__all__ = [
    "NOTIFICATION",
    "ApprovalRequested",
    "BatchMember",
    "BatchOffered",
    "Decided",
    "DecisionRefused",
    "Delivery",
    "InputRequested",
    "Notification",
    "OutcomeNotification",
    "PostedCard",
    "RunCallback",
    "RunFinished",
    "RunPaused",
    "TicketExpired",
    "TicketNotification",
    "TicketVoided",
    "UncertainCall",
    "UnreadableNotification",
    "read_notification",
    "refusal_of",
]
