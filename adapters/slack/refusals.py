"""What a person reads in Slack when their click or submission is refused (nothing changed).

The runtime classifies every refusal once (`runtime.Refusal`); this module only words it.
"""

from __future__ import annotations

from typing import assert_never

from adapters.slack import blocks
from runtime import BatchAccepted, Refusal, RefusalReason


def refusal_text(
    refusal: Refusal,
    groups: blocks.Groups | None = None,
    *,
    console_url: str | None = None,
    command: str = "/signoff",
) -> str:
    """The ephemeral message for a refused decision (mrkdwn, already escaped).

    Args:
        refusal: Why the runtime refused it.
        groups: Named approver groups, to word who may decide.
        console_url: The console's address, to say where an unlinked user gets a link
            code (None: they ask an operator).
        command: The slash command that redeems a link code.
    """
    match refusal.reason:
        case RefusalReason.UNAUTHORIZED if (
            refusal.ticket is not None
            and refusal.ticket.decide_in
            and "slack" not in refusal.ticket.decide_in
        ):
            where = " or ".join(refusal.ticket.decide_in)
            return (
                f":lock: This request may only be decided in the {where}"
                f"{' after single sign-on' if refusal.ticket.sso else ''}. Nothing changed."
            )
        case RefusalReason.UNAUTHORIZED:
            who = blocks.who_may_decide(refusal.deciders, refusal.four_eyes, groups)
            return f":no_entry: You may not decide this request; who may: {who}. Nothing changed."
        case RefusalReason.NOT_LINKED:
            return not_linked_text(console_url, command)
        case RefusalReason.EXPIRED if refusal.ticket is not None and not _open(refusal):
            return ":hourglass: This request already expired; nothing was changed."
        case RefusalReason.EXPIRED:
            return ":hourglass: This request expired before your decision; nothing was changed."
        case RefusalReason.STALE:
            return (
                ":warning: The agent or its tools changed since this was asked; the run must be "
                "restarted or cancelled. Nothing was changed."
            )
        case RefusalReason.INVALID_ANSWER:
            return f":warning: {blocks.escape(refusal.message)}"
        case RefusalReason.INVALID_EDIT | RefusalReason.NOT_EDITABLE:
            problems = "; ".join(
                f"{e.get('path') or 'arguments'}: {e.get('message')}" for e in refusal.errors
            )
            why = problems or refusal.message
            return (
                f":warning: Those changes cannot be made ({blocks.escape(why)}); nothing changed."
            )
        case RefusalReason.EDIT_DENIED:
            return (
                ":no_entry: The tool's rules deny the call with those changes; nothing changed. "
                "Allow or deny it as it is, or change it differently."
            )
        case RefusalReason.DOES_NOT_FIT:
            return (
                f":warning: This answer does not fit the request: {blocks.escape(refusal.message)}"
            )
        case RefusalReason.GRANT_NOT_ALLOWED:
            return f":no_entry: {blocks.escape(refusal.message)}. Nothing was changed."
        case RefusalReason.UNKNOWN_TICKET | RefusalReason.UNKNOWN_RUN:
            return ":warning: This button does not belong to any request I know; nothing changed."
        case RefusalReason.ALREADY_DECIDED:
            by = blocks.user(refusal.decided_by) if refusal.decided_by else "someone"
            return f":information_source: Already decided by {by}; nothing was changed."
        case RefusalReason.VOIDED:
            return ":heavy_multiplication_x: This request was voided (the run was cancelled)."
        case RefusalReason.MISMATCH:
            return ":warning: This button does not match the open request; nothing was changed."
        case RefusalReason.STORAGE:
            return (
                ":warning: Your decision could not be recorded (the database did not answer); "
                "nothing changed. Please try again."
            )
        case RefusalReason.FORBIDDEN | RefusalReason.NOT_AWAITING:
            return ":warning: This request is no longer open; nothing was changed."
        case _:
            assert_never(refusal.reason)


def not_linked_text(console_url: str | None, command: str = "/signoff") -> str:
    """What a Slack user linked to no person reads when unlinked users may not decide."""
    text = ":link: Your Slack account is not linked to a person yet, so it may not decide here. "
    if console_url:
        page = f"{console_url.rstrip('/')}/link"
        text += (
            f"To link it, sign in to the console at <{page}|{blocks.escape(page)}>, get a link "
            f"code there and send `{command} link <code>` here; or ask an operator to link it. "
        )
    else:
        text += "Ask an operator to link it to you. "
    return text + "Nothing changed."


def _open(refusal: Refusal) -> bool:
    return refusal.ticket is not None and refusal.ticket.status.value == "open"


def applied_refusal_text(refusal: Refusal, groups: blocks.Groups | None = None) -> str:
    """The message for a click that was stored but refused when it was applied.

    Args:
        refusal: Why (`runtime.domain.notifications.refusal_of` a ``decision_refused``).
        groups: Named approver groups, to word who may decide.
    """
    why = refusal_text(refusal, groups)
    text = f":warning: Your decision was recorded but could not be applied. {why}"
    return blocks.truncate(text, blocks.MAX_SECTION_TEXT)


def batch_text(decision: str, accepted: BatchAccepted, groups: blocks.Groups | None = None) -> str:
    """What the clicker of "Allow all N" / "Deny all N" reads: each call's outcome."""
    verb = "Allow" if decision == "allow" else "Deny"
    total = len(accepted.outcomes)
    lines = []
    if accepted.stored:
        lines.append(
            f":white_check_mark: {verb} recorded for {accepted.stored} of {total} calls; "
            "each card updates once its decision is applied."
        )
    for tool, refusal in accepted.refused:
        lines.append(f"• `{blocks.escape(tool)}`: {refusal_text(refusal, groups)}")
    return blocks.truncate("\n".join(lines), blocks.MAX_SECTION_TEXT)
