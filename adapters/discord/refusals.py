"""What a person reads in Discord when their click or form is refused (nothing changed).

The runtime classifies every refusal once (`runtime.Refusal`); this module only words it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import assert_never

from adapters.discord import cards
from runtime import BatchAccepted, Refusal, RefusalReason, TicketStatus


def not_linked_text(console_url: str | None) -> str:
    """What a Discord user linked to no person reads when unlinked users may not decide."""
    text = "🔗 Your Discord account is not linked to a person yet, so it may not decide here. "
    if console_url:
        text += (
            f"To link it, sign in to the console at {console_url.rstrip('/')}/link, get a "
            "link code there and send `/signoff link <code>` here; or ask an operator to "
            "link it. "
        )
    else:
        text += "Ask an operator to link it to you. "
    return text + "Nothing was changed."


UNRECOGNISED = "⚠️ This button does not belong to any request I know; nothing was changed."
NOT_EDITABLE = "⚠️ This call's arguments cannot be changed; allow or deny it as it is."


def refusal_text(
    refusal: Refusal,
    role_groups: Mapping[str, Sequence[str]] | None = None,
    *,
    console_url: str | None = None,
) -> str:
    """The ephemeral message for a refused decision.

    Args:
        refusal: Why the runtime refused it.
        role_groups: Group names mapped to role ids, to name approvers as role mentions.
        console_url: The console's address, to say where an unlinked user gets a link
            code (None: they ask an operator).
    """
    match refusal.reason:
        case RefusalReason.UNAUTHORIZED if (
            refusal.ticket is not None
            and refusal.ticket.decide_in
            and "discord" not in refusal.ticket.decide_in
        ):
            where = " or ".join(refusal.ticket.decide_in)
            return (
                f"🔒 This request may only be decided in the {where}"
                f"{' after single sign-on' if refusal.ticket.sso else ''}. Nothing was changed."
            )
        case RefusalReason.NOT_LINKED:
            return not_linked_text(console_url)
        case RefusalReason.UNAUTHORIZED:
            who = cards.who_may_decide(refusal.deciders, refusal.four_eyes, role_groups or {})
            return f"⛔ You may not decide this request. Who may: {who}. Nothing was changed."
        case RefusalReason.EXPIRED if (
            refusal.ticket is not None and refusal.ticket.status is TicketStatus.EXPIRED
        ):
            return "⏰ This request already expired; nothing was changed."
        case RefusalReason.EXPIRED:
            return "⏰ This request expired before your decision; nothing was changed."
        case RefusalReason.STALE:
            return (
                "⚠️ The agent or its tools changed since this was asked; the run must be "
                "restarted or cancelled. Nothing was changed."
            )
        case RefusalReason.INVALID_ANSWER:
            lines = [
                f"• {cards.code(e.get('path') or '(form)')}: {cards.escape(str(e.get('message')))}"
                for e in refusal.errors
            ] or [cards.escape(refusal.message)]
            return cards.clip_content(
                "⚠️ That answer does not fit the form; nothing was recorded:\n" + "\n".join(lines)
            )
        case RefusalReason.INVALID_EDIT | RefusalReason.NOT_EDITABLE:
            lines = [
                f"• {cards.code(e.get('path') or '(arguments)')}: "
                f"{cards.escape(str(e.get('message')))}"
                for e in refusal.errors
            ] or [cards.escape(refusal.message)]
            return cards.clip_content(
                "⚠️ Those changes cannot be made; nothing was changed:\n" + "\n".join(lines)
            )
        case RefusalReason.EDIT_DENIED:
            return (
                "⛔ The tool's rules deny the call with those changes; nothing was changed. "
                "Allow or deny it as it is, or change it differently."
            )
        case RefusalReason.DOES_NOT_FIT:
            return f"⚠️ This answer does not fit the request: {cards.escape(refusal.message)}"
        case RefusalReason.GRANT_NOT_ALLOWED:
            return f"⛔ {cards.escape(refusal.message)}. Nothing was changed."
        case RefusalReason.UNKNOWN_TICKET | RefusalReason.UNKNOWN_RUN:
            return UNRECOGNISED
        case RefusalReason.ALREADY_DECIDED:
            return f"📌 Already decided by {cards.user(refusal.decided_by)}; nothing was changed."
        case RefusalReason.VOIDED:
            return "✖️ This request was withdrawn (the run was cancelled); nothing was changed."
        case RefusalReason.MISMATCH:
            return "⚠️ This button does not match the open request; nothing was changed."
        case RefusalReason.STORAGE:
            return (
                "⚠️ The database did not answer, so your decision may not have been "
                "recorded. If the message does not update, click again."
            )
        case RefusalReason.FORBIDDEN | RefusalReason.NOT_AWAITING:
            return "⚠️ This request is no longer open; nothing was changed."
        case _:
            assert_never(refusal.reason)


def applied_refusal_text(
    refusal: Refusal, role_groups: Mapping[str, Sequence[str]] | None = None
) -> str:
    """The follow-up for a click that was stored but refused when it was applied.

    Args:
        refusal: Why (`runtime.domain.notifications.refusal_of` a ``decision_refused``).
        role_groups: Group names mapped to role ids, to name approvers as role mentions.
    """
    text = refusal_text(refusal, role_groups)
    return cards.clip_content(f"⚠️ Your decision was recorded but could not be applied. {text}")


def form_errors_text(errors: Mapping[str, str], labels: Mapping[str, str]) -> str:
    """The ephemeral message for typed input that could not even be converted."""
    lines = [
        f"• **{cards.escape(labels.get(name, name))}**: {cards.escape(message)}"
        for name, message in errors.items()
    ]
    return cards.clip_content(
        "⚠️ Some fields need another look; nothing was recorded:\n" + "\n".join(lines)
    )


def batch_text(
    decision: str,
    accepted: BatchAccepted,
    role_groups: Mapping[str, Sequence[str]] | None = None,
) -> str:
    """What the clicker of "Allow all N" / "Deny all N" reads: each call's outcome."""
    verb = "Allow" if decision == "allow" else "Deny"
    total = len(accepted.outcomes)
    lines = []
    if accepted.stored:
        lines.append(
            f"✅ {verb} recorded for {accepted.stored} of {total} calls; each card updates "
            "once its decision is applied."
        )
    for tool, refusal in accepted.refused:
        lines.append(f"• {cards.code(tool)}: {refusal_text(refusal, role_groups)}")
    return cards.clip_content("\n".join(lines))
