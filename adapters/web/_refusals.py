"""One translation of runtime refusals into HTTP terms, shared by the API and the console."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from runtime import (
    AccessDenied,
    Expired,
    InvalidAnswer,
    NotAwaiting,
    ResolutionError,
    ResumeError,
    RunNotFound,
    Runtime,
    SignoffError,
    StaleTicket,
    TicketStatus,
    Unauthorized,
    UnknownExecutionKey,
    UnknownTicket,
)


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why a request was refused.

    Attributes:
        status: The HTTP status.
        code: A stable machine-readable reason (``already_decided``, ``expired`` ...).
        message: What a person reads.
        errors: Field errors of an invalid answer (``path`` and ``message`` each).
    """

    status: int
    code: str
    message: str
    errors: list[dict[str, Any]] = field(default_factory=list)

    def body(self) -> dict[str, Any]:
        """The JSON error body."""
        body: dict[str, Any] = {"error": self.code, "message": self.message}
        if self.errors:
            body["errors"] = self.errors
        return body


async def explain(runtime: Runtime, exc: SignoffError, ticket_id: str | None = None) -> Refusal:
    """Translate a runtime error raised while acting on `ticket_id` (if any).

    The ticket is read again so the message says *which* conflict happened: a ticket
    that never existed is 404, one that was decided, voided or expired is 409.
    """
    ticket = None
    if ticket_id is not None:
        try:
            ticket = await runtime.ticket(ticket_id)
        except UnknownTicket:
            ticket = None
    match exc:
        case AccessDenied():
            return Refusal(403, "forbidden", str(exc))
        case Unauthorized():
            who = ticket.who_may_decide() if ticket is not None else "someone else"
            return Refusal(403, "unauthorized", f"You may not decide this: who may: {who}")
        case Expired():
            return Refusal(409, "expired", f"Expired: {exc}")
        case StaleTicket():
            return Refusal(
                409, "stale_ticket", f"Stale: {exc}; the run must be restarted or cancelled"
            )
        case InvalidAnswer():
            return Refusal(422, "invalid_answer", str(exc), list(exc.errors))
        case ResolutionError():
            return Refusal(422, "resolution_error", str(exc))
        case UnknownExecutionKey():
            return Refusal(404, "unknown_ticket", str(exc))
        case RunNotFound():
            return Refusal(404, "unknown_run", str(exc))
        case UnknownTicket():
            return Refusal(404, "unknown_ticket", f"No ticket {ticket_id!r}")
        case NotAwaiting() if ticket_id is not None and ticket is None:
            return Refusal(404, "unknown_ticket", f"No ticket {ticket_id!r}")
        case NotAwaiting() if ticket is not None:
            return _closed(ticket.status, ticket.decided_by, exc)
        case NotAwaiting():
            return Refusal(409, "not_awaiting", str(exc))
        case ResumeError():
            return Refusal(409, exc.code, str(exc))
        case _:
            return Refusal(500, "internal_error", f"{type(exc).__name__}: {exc}")


def _closed(status: TicketStatus, decided_by: str | None, exc: Exception) -> Refusal:
    if status is TicketStatus.DECIDED:
        by = f" by {decided_by}" if decided_by else ""
        return Refusal(409, "already_decided", f"Already decided{by}")
    if status is TicketStatus.EXPIRED:
        return Refusal(409, "expired", "Expired: the decision deadline passed")
    if status is TicketStatus.VOIDED:
        return Refusal(409, "voided", "Voided: the run was cancelled")
    return Refusal(409, "not_awaiting", str(exc))
