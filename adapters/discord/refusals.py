"""What a person reads in Discord when their click or form is refused (nothing changed)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from adapters.discord import cards
from runtime import (
    Expired,
    InvalidAnswer,
    NotAwaiting,
    ResolutionError,
    ResumeTicket,
    SignoffError,
    StaleTicket,
    StorageError,
    TicketStatus,
    Unauthorized,
    UnknownTicket,
)

UNRECOGNISED = "⚠️ This button does not belong to any request I know; nothing was changed."


def refusal_text(
    exc: SignoffError,
    ticket: ResumeTicket | None,
    role_groups: Mapping[str, Sequence[str]] | None = None,
) -> str:
    """The ephemeral message for a refused decision.

    Args:
        exc: Why the runtime refused it.
        ticket: The committed ticket, read again, to say *which* conflict happened.
        role_groups: Group names mapped to role ids, to name approvers as role mentions.
    """
    match exc:
        case Unauthorized():
            who = (
                cards.who_may_decide(
                    ticket.requester, ticket.approvers, ticket.four_eyes, role_groups or {}
                )
                if ticket is not None
                else "someone else"
            )
            return f"⛔ You may not decide this request. Who may: {who}. Nothing was changed."
        case Expired() if ticket is not None and ticket.status is TicketStatus.EXPIRED:
            return "⏰ This request already expired; nothing was changed."
        case Expired():
            return "⏰ This request expired before your decision; nothing was changed."
        case StaleTicket():
            return (
                "⚠️ The agent or its tools changed since this was asked; the run must be "
                "restarted or cancelled. Nothing was changed."
            )
        case InvalidAnswer():
            lines = [
                f"• {cards.code(e.get('path') or '(form)')}: {cards.escape(str(e.get('message')))}"
                for e in exc.errors
            ] or [cards.escape(str(exc))]
            return cards.clip_content(
                "⚠️ That answer does not fit the form; nothing was recorded:\n" + "\n".join(lines)
            )
        case ResolutionError():
            return f"⚠️ This answer does not fit the request: {cards.escape(str(exc))}"
        case UnknownTicket():
            return UNRECOGNISED
        case NotAwaiting() if ticket is not None:
            return _closed(ticket)
        case NotAwaiting():
            return "⚠️ This request is no longer open; nothing was changed."
        case StorageError():
            return (
                "⚠️ The database did not answer, so your decision may not have been "
                "recorded. If the message does not update, click again."
            )
        case _:
            return f"⚠️ Could not record that: {cards.escape(str(exc))}"


def _closed(ticket: ResumeTicket) -> str:
    match ticket.status:
        case TicketStatus.DECIDED:
            return f"📌 Already decided by {cards.user(ticket.decided_by)}; nothing was changed."
        case TicketStatus.EXPIRED:
            return "⏰ This request already expired; nothing was changed."
        case TicketStatus.VOIDED:
            return "✖️ This request was withdrawn (the run was cancelled); nothing was changed."
        case _:
            # Still open, so the click's correlation token did not match the ticket.
            return "⚠️ This button does not match the open request; nothing was changed."


def form_errors_text(errors: Mapping[str, str], labels: Mapping[str, str]) -> str:
    """The ephemeral message for typed input that could not even be converted."""
    lines = [
        f"• **{cards.escape(labels.get(name, name))}**: {cards.escape(message)}"
        for name, message in errors.items()
    ]
    return cards.clip_content(
        "⚠️ Some fields need another look; nothing was recorded:\n" + "\n".join(lines)
    )
