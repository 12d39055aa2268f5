"""What a person reads in Slack when their click or submission is refused (nothing changed).

The runtime classifies every refusal once (`runtime.Refusal`); this module only words it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, assert_never

from adapters.slack import blocks
from runtime import Refusal, RefusalReason


def refusal_text(refusal: Refusal, groups: blocks.Groups | None = None) -> str:
    """The ephemeral message for a refused decision (mrkdwn, already escaped)."""
    match refusal.reason:
        case RefusalReason.UNAUTHORIZED:
            who = blocks.who_may_decide(refusal.deciders, refusal.four_eyes, groups)
            return f":no_entry: You may not decide this request; who may: {who}. Nothing changed."
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
        case RefusalReason.DOES_NOT_FIT:
            return (
                f":warning: This answer does not fit the request: {blocks.escape(refusal.message)}"
            )
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


def _open(refusal: Refusal) -> bool:
    return refusal.ticket is not None and refusal.ticket.status.value == "open"


def applied_refusal_text(payload: Mapping[str, Any], groups: blocks.Groups | None = None) -> str:
    """The message for a click that was stored but refused when it was applied.

    Args:
        payload: The ``decision_refused`` notification (``reason``, ``decided_by``,
            ``message``; older ones only have the ``error`` code).
        groups: Named approver groups, to word who may decide.
    """
    head = ":warning: Your decision was recorded but could not be applied"
    reason = str(payload.get("reason") or payload.get("error") or "")
    match reason:
        case RefusalReason.ALREADY_DECIDED.value:
            by = payload.get("decided_by")
            who = blocks.user(str(by)) if by else "someone"
            return f"{head}: it was already decided by {who}. Nothing was changed."
        case RefusalReason.EXPIRED.value:
            return f"{head}: the request expired first. Nothing was changed."
        case RefusalReason.VOIDED.value:
            return f"{head}: the request was withdrawn (the run was cancelled)."
        case RefusalReason.UNAUTHORIZED.value:
            return f"{head}: you may not decide it. Nothing was changed."
        case RefusalReason.STALE.value:
            return f"{head}: the agent or its tools changed since this was asked."
        case _:
            message = blocks.escape(str(payload.get("message") or reason or "refused"))
            return blocks.truncate(f"{head}: {message}", blocks.MAX_SECTION_TEXT)
