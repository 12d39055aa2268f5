"""What the outbox hands a platform's notifier: a typed notification and its `Delivery`.

Every message a platform must receive is written to the outbox in the transaction of the
state change it reports: its writer builds one frozen value of the closed union
`Notification` (tagged by ``kind``) and the journal stores its kind and `payload`. When
it is delivered, the core reads it back as the same value and gathers what the notifier
needs to know about the world in a `Delivery`: where it goes, the ticket as it stands
now, the card an outcome edits, the run's first message in that channel. Notifiers never
read the store or open transactions; they turn a value into a platform message.

A stored payload holds the fields its writer set, and only those, so rows keep the shape
older versions wrote; a row may carry fields a later version added (they are ignored).
The lists of kinds (`KINDS`, `CARD_KINDS` ...) are derived from the union (`kinds_of`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Literal, get_args, get_origin

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    TypeAdapter,
    ValidationError,
    model_validator,
)

from runtime.domain.refusals import Refusal, RefusalReason
from runtime.domain.tickets import ResumeTicket


class _Note(BaseModel):
    # Stored payloads may carry keys a later version added: ignored, never an error.
    model_config = ConfigDict(frozen=True, extra="ignore")

    run_id: str
    agent: str = ""

    def payload(self) -> dict[str, Any]:
        """The notification as its outbox row stores it (without its ``kind``).

        It holds the fields its writer set, and only those: a field left to its default
        is not written, so rows keep the shape older versions wrote and read.
        """
        return self.model_dump(mode="json", exclude_unset=True, exclude={"kind"})

    def details(self) -> dict[str, Any]:
        """The stored payload without ``run_id`` and ``agent``: what the flight
        recorder's event of the same change holds."""
        return self.model_dump(mode="json", exclude_unset=True, exclude={"kind", "run_id", "agent"})


class DescribedTicket(_Note):
    """A ticket as notifications and the flight recorder describe it.

    The notes that post a card (and a pause's note) carry these fields; fields a writer
    sets only for a tool's permission (``editable``, ``tool_description``,
    ``tool_server``) are absent from the stored payload otherwise.
    """

    ticket_id: str | None = None
    target: dict[str, Any] = {}
    """The ticket's await target as JSON (a call's arguments masked)."""
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
    external: bool = False
    """The call of an external agent (`runtime.domain.external`): signoff authorises it,
    the agent runs it elsewhere."""
    decide_in: list[str] = []
    """Step-up: the only places the ticket may be decided (empty: anywhere); a card
    elsewhere links to the console instead of offering the decision."""
    sso: bool = False
    """Step-up: a console decision must come from a single sign-on session."""

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

    @property
    def tool(self) -> str | None:
        """The tool the ticket is about (None: it is about none)."""
        return self._said("tool")

    @property
    def args(self) -> Any:
        """The call's arguments as a person may see them (secret ones masked)."""
        return self.target.get("args") or {}

    @property
    def why(self) -> str | None:
        """Why the tool asks (its permission rule's reason), if it says."""
        return self._said("reason")

    @property
    def prompt(self) -> str | None:
        """For an input request: what the tool asks for."""
        return self._said("prompt")

    @property
    def form_schema(self) -> dict[str, Any]:
        """For an input request: the JSON schema of the form it asks to fill."""
        schema = self.target.get("schema")
        return dict(schema) if isinstance(schema, dict) else {}

    @property
    def execution_key(self) -> str | None:
        """For an uncertain call: the key its execution was started with."""
        return self._said("execution_key")

    def _said(self, key: str) -> str | None:
        value = self.target.get(key)
        return str(value) if value else None


class _TicketNote(DescribedTicket):
    ticket_id: str
    target: dict[str, Any]


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
    edit: dict[str, Any] | None = None
    """For an allow with edits: what changed (``summary``, ``changes``), by whom."""
    args: dict[str, Any] | None = None
    """For a call: the arguments it runs with, as a person may see them."""
    args_digest: str | None = None
    """For an allow: the digest of the arguments the call runs with."""
    grant: dict[str, Any] | None = None
    """The standing grant given with the allow (or that allowed it, with `by_grant`):
    ``grant_id``, ``scope``, ``expires_at``, ``constraint``."""
    by_grant: bool = False


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


class RunPaused(DescribedTicket):
    """The run was paused; it waits to be resumed (its pause ticket described)."""

    kind: Literal["run_paused"] = "run_paused"


class DecisionRefused(_Note):
    """A stored click was refused when it was applied (e.g. the loser of two clicks)."""

    kind: Literal["decision_refused"] = "decision_refused"
    ticket_id: str
    error: str | None = None
    reason: str | None = None
    decided_by: str | None = None
    message: str | None = None
    actor: str | None = None


class BatchCall(BaseModel):
    """One call of a `BatchOffered` batch, as its card shows it.

    Attributes:
        ticket_id: Its permission ticket.
        tool: The tool it calls.
        args: Its arguments as a person may see them (secret ones masked).
    """

    model_config = ConfigDict(frozen=True, extra="ignore")

    ticket_id: str | None = None
    tool: str | None = None
    args: dict[str, Any] = {}


class BatchOffered(_Note):
    """Several calls of one model turn wait for approval: once every one of their cards
    is posted, a message offers to decide them all at once ("Allow all N").

    Attributes:
        ticket_ids: The permission tickets of the turn, in the order of their calls; the
            first one names the batch (`runtime.services.batches`).
        token: Proves a click came from this message (`runtime.services.batches.batch_token`).
        calls: Each call as shown on its card.
    """

    kind: Literal["batch_offered"] = "batch_offered"
    ticket_ids: list[str]
    token: str
    calls: list[BatchCall] = []


class RunCallback(_Note):
    """A webhook's run ended: its completion callback (what its `RunFinished` says)."""

    kind: Literal["run_callback"] = "run_callback"
    status: str
    text: str | None = None
    error: str | None = None
    reason: str | None = None
    thread_id: str | None = None


APPROVAL_CALLBACK = "approval_callback"
"""The platform that delivers the callbacks of external approvals."""
APPROVAL_CALLBACK_URL = "approval_callback_url"
"""The origin key of an external approval's callback URL."""
APPROVAL_RESUME = "approval_resume"
"""The origin key of where an external approval's caller is resumed if it deferred: a
destination whose ``platform`` names the notifier that resumes it."""


class ApprovalCallback(_Note):
    """An external approval's run ended: the signed callback its request asked for
    (`run_id` is the approval id; the callback's body is the approval as it then stands),
    or, addressed to its resume destination, the resumption of a caller that deferred."""

    kind: Literal["approval_callback"] = "approval_callback"
    status: str
    """How the run ended: ``done``, ``failed`` or ``cancelled``."""


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
    | RunCallback
    | ApprovalCallback,
    Discriminator("kind"),
]
"""Every notification a platform can receive."""
NOTIFICATION: TypeAdapter[Notification] = TypeAdapter(Notification)

TicketNotification = ApprovalRequested | InputRequested | UncertainCall
"""The notifications that post a card asking for a decision."""
OutcomeNotification = Decided | TicketExpired | TicketVoided
"""The notifications that edit a card to show how its ticket ended."""
CardNotification = TicketNotification | RunPaused
"""The notifications that post a message a later outcome edits."""
PostingNotification = TicketNotification | RunFinished | RunPaused | BatchOffered
"""The notifications that post a new message in a channel (the others edit one, reply
to one person, or leave chat)."""


def kinds_of(notes: Any) -> tuple[str, ...]:
    """The ``kind`` of each notification of a union of them, in the union's order.

    Args:
        notes: A notification class, or a union of them (`Notification` included).
    """
    members = get_args(notes)
    if members and get_origin(notes) is Annotated:
        members = get_args(members[0])
    classes = members or (notes,)
    return tuple(str(cls.model_fields["kind"].default) for cls in classes)


KINDS = kinds_of(Notification)
"""Every notification kind an outbox row can have."""
CARD_KINDS = kinds_of(TicketNotification)
"""Notifications that post a card asking for a decision."""
OUTCOME_KINDS = kinds_of(OutcomeNotification)
"""Notifications that edit a card to show how its ticket ended."""


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

    note: CardNotification
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
            correlation token). None also when the notifier says it does not read it for
            this notification (``needs_ticket``, see `runtime.services.delivery`).
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
    "APPROVAL_CALLBACK",
    "APPROVAL_CALLBACK_URL",
    "CARD_KINDS",
    "KINDS",
    "NOTIFICATION",
    "OUTCOME_KINDS",
    "ApprovalCallback",
    "ApprovalRequested",
    "BatchCall",
    "BatchMember",
    "BatchOffered",
    "CardNotification",
    "Decided",
    "DecisionRefused",
    "Delivery",
    "DescribedTicket",
    "InputRequested",
    "Notification",
    "OutcomeNotification",
    "PostedCard",
    "PostingNotification",
    "RunCallback",
    "RunFinished",
    "RunPaused",
    "TicketExpired",
    "TicketNotification",
    "TicketVoided",
    "UncertainCall",
    "UnreadableNotification",
    "kinds_of",
    "read_notification",
    "refusal_of",
]
