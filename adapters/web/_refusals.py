"""One translation of runtime refusals into HTTP terms, shared by the API and the console.

The runtime classifies a refusal (`runtime.classify`); this module picks the status and
the words.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, assert_never

from runtime import (
    Refusal as Classified,
)
from runtime import (
    RefusalReason,
    Runtime,
    SignoffError,
    UnknownTicket,
    classify,
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
    if ticket_id is not None and not isinstance(exc, UnknownTicket):
        try:
            ticket = await runtime.ticket(ticket_id)
        except UnknownTicket:
            ticket = None
        except SignoffError:
            ticket = None  # the database is failing too; the status still fits
    return http_refusal(classify(exc, ticket), ticket_id)


def http_refusal(refusal: Classified, ticket_id: str | None = None) -> Refusal:
    """A classified refusal as an HTTP status, code and message."""
    code = refusal.reason.value
    match refusal.reason:
        case RefusalReason.UNAUTHORIZED:
            who = refusal.ticket.who_may_decide() if refusal.ticket is not None else "someone else"
            return Refusal(403, code, f"You may not decide this: who may: {who}")
        case RefusalReason.FORBIDDEN | RefusalReason.NOT_LINKED:
            return Refusal(403, code, refusal.message)
        case RefusalReason.EXPIRED:
            return Refusal(409, code, f"Expired: {refusal.message}")
        case RefusalReason.STALE:
            return Refusal(
                409, code, f"Stale: {refusal.message}; the run must be restarted or cancelled"
            )
        case RefusalReason.INVALID_ANSWER:
            return Refusal(422, code, refusal.message, list(refusal.errors))
        case RefusalReason.DOES_NOT_FIT:
            return Refusal(422, code, refusal.message)
        case RefusalReason.GRANT_NOT_ALLOWED:
            return Refusal(422, code, f"Not allowed: {refusal.message}; nothing was changed")
        case RefusalReason.INVALID_EDIT | RefusalReason.NOT_EDITABLE:
            return Refusal(422, code, refusal.message, list(refusal.errors))
        case RefusalReason.EDIT_DENIED:
            return Refusal(422, code, refusal.message)
        case RefusalReason.UNKNOWN_TICKET:
            shown = f"No ticket {ticket_id!r}" if ticket_id is not None else refusal.message
            return Refusal(404, code, shown)
        case RefusalReason.UNKNOWN_RUN:
            return Refusal(404, code, refusal.message)
        case RefusalReason.ALREADY_DECIDED:
            by = f" by {refusal.decided_by}" if refusal.decided_by else ""
            return Refusal(409, code, f"Already decided{by}")
        case RefusalReason.VOIDED:
            return Refusal(409, code, "Voided: the run was cancelled")
        case RefusalReason.MISMATCH | RefusalReason.NOT_AWAITING:
            return Refusal(409, "not_awaiting", refusal.message)
        case RefusalReason.STORAGE:
            return Refusal(503, code, "The database did not answer; try again")
        case _:
            assert_never(refusal.reason)
