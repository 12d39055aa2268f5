"""What a person reads in Slack when their click or submission is refused (nothing changed)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from adapters.slack import blocks
from runtime import (
    Expired,
    InvalidAnswer,
    NotAwaiting,
    ResolutionError,
    ResumeTicket,
    SignoffError,
    StaleTicket,
    TicketStatus,
    Unauthorized,
    UnknownTicket,
)


def who_may_decide(ticket: ResumeTicket) -> str:
    """Who may decide `ticket`, with Slack mentions."""
    return blocks.who_may_decide(
        {
            "requester": ticket.requester,
            "approvers": list(ticket.approvers),
            "four_eyes": ticket.four_eyes,
        }
    )


def refusal_text(exc: SignoffError, ticket: ResumeTicket | None) -> str:
    """The ephemeral message for a refused decision (mrkdwn, already escaped)."""
    match exc:
        case Unauthorized():
            who = who_may_decide(ticket) if ticket is not None else "someone else"
            return f":no_entry: You may not decide this request; who may: {who}. Nothing changed."
        case Expired() if ticket is not None and ticket.status is TicketStatus.EXPIRED:
            return ":hourglass: This request already expired; nothing was changed."
        case Expired():
            return ":hourglass: This request expired before your decision; nothing was changed."
        case StaleTicket():
            return (
                ":warning: The agent or its tools changed since this was asked; the run must be "
                "restarted or cancelled. Nothing was changed."
            )
        case InvalidAnswer():
            return f":warning: {blocks.escape(str(exc))}"
        case ResolutionError():
            return f":warning: This answer does not fit the request: {blocks.escape(str(exc))}"
        case UnknownTicket():
            return ":warning: This button does not belong to any request I know; nothing changed."
        case NotAwaiting() if ticket is not None:
            return _closed(ticket)
        case NotAwaiting():
            return ":warning: This request is no longer open; nothing was changed."
        case _:
            return f":warning: Could not record that: {blocks.escape(str(exc))}"


def _closed(ticket: ResumeTicket) -> str:
    match ticket.status:
        case TicketStatus.DECIDED:
            by = blocks.user(ticket.decided_by) if ticket.decided_by else "someone"
            return f":information_source: Already decided by {by}; nothing was changed."
        case TicketStatus.EXPIRED:
            return ":hourglass: This request already expired; nothing was changed."
        case TicketStatus.VOIDED:
            return ":heavy_multiplication_x: This request was voided (the run was cancelled)."
        case _:
            # Open, so the click's correlation token did not match the ticket.
            return ":warning: This button does not match the open request; nothing was changed."


def applied_refusal_text(payload: Mapping[str, Any], ticket: ResumeTicket | None) -> str:
    """The message for a click that was stored but refused when it was applied.

    Args:
        payload: The ``decision_refused`` notification (``error`` code and ``message``).
        ticket: The ticket as it stands now, if it exists.
    """
    code = str(payload.get("error") or "")
    head = ":warning: Your decision was recorded but could not be applied"
    if ticket is not None and ticket.status is not TicketStatus.OPEN:
        return f"{head}: {_closed(ticket)}"
    match code:
        case "expired":
            return f"{head}: the request expired first. Nothing was changed."
        case "unauthorized" if ticket is not None:
            return f"{head}: you may not decide it; who may: {who_may_decide(ticket)}."
        case "stale_ticket":
            return f"{head}: the agent or its tools changed since this was asked."
        case _:
            message = blocks.escape(str(payload.get("message") or code or "refused"))
            return blocks.truncate(f"{head}: {message}", blocks.MAX_SECTION_TEXT)
