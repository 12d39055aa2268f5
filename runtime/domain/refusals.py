"""Why a decision was refused, classified once in the core so every edge only words it.

`classify` turns the error a decision was refused with, and the ticket as committed at
that moment, into a `Refusal` whose `reason` is a closed set: the console, the API, Slack
and Discord each map the reason to their own wording (and HTTP status), never re-reading
the ticket or re-deriving who may decide.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from runtime.domain.errors import (
    AccessDenied,
    EditDenied,
    Expired,
    GrantNotAllowed,
    InvalidAnswer,
    InvalidEdit,
    NotAwaiting,
    NotEditable,
    NotLinked,
    ResolutionError,
    RunNotFound,
    SignoffError,
    StaleTicket,
    StorageError,
    Unauthorized,
    UnknownExecutionKey,
    UnknownTicket,
)
from runtime.domain.states import TicketStatus
from runtime.domain.tickets import ResumeTicket


class RefusalReason(StrEnum):
    """Why nothing was changed (the values are stable API error codes)."""

    UNKNOWN_TICKET = "unknown_ticket"
    """No such ticket (or none the caller may see)."""
    MISMATCH = "mismatch"
    """The ticket is open, but the click's token or run does not match it (a forged or
    outdated button)."""
    ALREADY_DECIDED = "already_decided"
    EXPIRED = "expired"
    """The deadline passed, whether or not the deadline loop has expired it yet."""
    VOIDED = "voided"
    """The run was cancelled and its tickets withdrawn."""
    UNAUTHORIZED = "unauthorized"
    NOT_LINKED = "not_linked"
    """A chat user linked to no person, while unlinked users are refused: link first."""
    STALE = "stale_ticket"
    """The agent or its tools changed since the run parked."""
    DOES_NOT_FIT = "resolution_error"
    """That kind of answer does not fit what the ticket waits for."""
    INVALID_ANSWER = "invalid_answer"
    """Typed input that fails the ticket's schema (see `Refusal.errors`)."""
    GRANT_NOT_ALLOWED = "grant_not_allowed"
    """The allow asks for a standing grant its tool does not allow (a wider scope, a
    four-eyes tool)."""
    INVALID_EDIT = "invalid_edit"
    """Changed arguments that fail the tool's schema (see `Refusal.errors`)."""
    NOT_EDITABLE = "not_editable"
    """The tool, or one of the changed arguments, may not be changed."""
    EDIT_DENIED = "edit_denied"
    """The tool's permission rule denies the call with the changed arguments."""
    UNKNOWN_RUN = "unknown_run"
    FORBIDDEN = "forbidden"
    """Not the caller's to do (e.g. joining another's thread)."""
    STORAGE = "storage_unavailable"
    """The database failed: whether the decision was stored is unknown; try again."""
    NOT_AWAITING = "not_awaiting"
    """The run cannot do that now (e.g. cancelling a finished run)."""


@dataclass(frozen=True, slots=True)
class Refusal:
    """A refused decision: why, and what an edge needs to say so.

    Attributes:
        reason: The classification.
        message: The runtime's own description (for logs and API bodies).
        ticket: The ticket as committed when the refusal was decided, if it exists.
        errors: For `RefusalReason.INVALID_ANSWER` and ``INVALID_EDIT``: one
            ``{"path", "message"}`` per field.
    """

    reason: RefusalReason
    message: str
    ticket: ResumeTicket | None = None
    errors: tuple[dict[str, Any], ...] = field(default=())

    @property
    def decided_by(self) -> str | None:
        """Who decided the ticket, when it was already decided."""
        return self.ticket.decided_by if self.ticket is not None else None

    @property
    def deciders(self) -> tuple[str, ...]:
        """Who may decide (approver entries; see `ResumeTicket.deciders`)."""
        return self.ticket.deciders() if self.ticket is not None else ()

    @property
    def four_eyes(self) -> bool:
        """Whether four-eyes keeps the requester from deciding."""
        return self.ticket is not None and self.ticket.four_eyes


def classify(exc: SignoffError, ticket: ResumeTicket | None) -> Refusal:
    """The refusal an error stands for, given the ticket as committed at that moment."""
    message = str(exc)
    match exc:
        case InvalidAnswer():
            return Refusal(RefusalReason.INVALID_ANSWER, message, ticket, tuple(exc.errors))
        case GrantNotAllowed():
            return Refusal(RefusalReason.GRANT_NOT_ALLOWED, message, ticket)
        case InvalidEdit():
            return Refusal(RefusalReason.INVALID_EDIT, message, ticket, tuple(exc.errors))
        case NotEditable():
            return Refusal(RefusalReason.NOT_EDITABLE, message, ticket, tuple(exc.errors))
        case EditDenied():
            return Refusal(RefusalReason.EDIT_DENIED, message, ticket)
        case ResolutionError():
            return Refusal(RefusalReason.DOES_NOT_FIT, message, ticket)
        case NotLinked():
            return Refusal(RefusalReason.NOT_LINKED, message, ticket)
        case Unauthorized():
            return Refusal(RefusalReason.UNAUTHORIZED, message, ticket)
        case Expired():
            return Refusal(RefusalReason.EXPIRED, message, ticket)
        case StaleTicket():
            return Refusal(RefusalReason.STALE, message, ticket)
        case UnknownTicket() | UnknownExecutionKey():
            return Refusal(RefusalReason.UNKNOWN_TICKET, message, None)
        case NotAwaiting():
            return Refusal(_closed_reason(ticket), message, ticket)
        case RunNotFound():
            return Refusal(RefusalReason.UNKNOWN_RUN, message, None)
        case AccessDenied():
            return Refusal(RefusalReason.FORBIDDEN, message, ticket)
        case StorageError():
            return Refusal(RefusalReason.STORAGE, message, ticket)
        case _:
            return Refusal(RefusalReason.NOT_AWAITING, message, ticket)


def _closed_reason(ticket: ResumeTicket | None) -> RefusalReason:
    if ticket is None:
        # Not about a ticket (e.g. pausing a paused run): the run cannot do that now.
        return RefusalReason.NOT_AWAITING
    match ticket.status:
        case TicketStatus.DECIDED:
            return RefusalReason.ALREADY_DECIDED
        case TicketStatus.EXPIRED:
            return RefusalReason.EXPIRED
        case TicketStatus.VOIDED:
            return RefusalReason.VOIDED
        case TicketStatus.OPEN:
            # Open, so the click's token or run did not match the ticket.
            return RefusalReason.MISMATCH
