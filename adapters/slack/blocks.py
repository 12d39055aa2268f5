"""Block Kit messages for signoff's notifications: pure functions from typed notes.

Every card is built from the notification the runtime committed (agent, tool, masked
arguments, requester, deadline, who may decide) plus, for open tickets, the ticket's
correlation token. Buttons carry only ``{"t": ticket_id, "c": correlation}`` in
their ``value``; everything else is looked up server-side when they are clicked.

Slack's limits are enforced here, never left to chance: section text 3000 characters,
button values 2000, header text 150, at most 50 blocks per message, modal titles 24.
Text is cut on a character boundary, never inside an ``&amp;`` entity, and marked with
an ellipsis.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, assert_never

from runtime.edges import (
    ApprovalRequested,
    BatchOffered,
    Decided,
    DescribedTicket,
    InputRequested,
    OutcomeNotification,
    RunFinished,
    RunPaused,
    TicketExpired,
    TicketNotification,
    TicketVoided,
    UncertainCall,
    describe_chain,
    describe_deciders,
    loads_strict,
)

Block = dict[str, Any]

MAX_SECTION_TEXT = 3000
MAX_BUTTON_VALUE = 2000
MAX_HEADER_TEXT = 150
MAX_BLOCKS = 50
MAX_MODAL_TITLE = 24
MAX_FALLBACK_TEXT = 3000
MAX_FIELD_TEXT = 2000
MAX_BUTTON_TEXT = 75
MAX_TOOL_DESCRIPTION = 300
"""Characters of a tool's own description a card shows (the rest is cut with "…")."""

ACTION_ALLOW = "signoff.allow"
ACTION_DENY = "signoff.deny"
ACTION_DENY_REASON = "signoff.deny_reason"
ACTION_ANSWER = "signoff.answer"
ACTION_RESOLVE = "signoff.resolve"
ACTION_RETRY = "signoff.retry"
ACTION_ABORT = "signoff.abort"
ACTION_ALLOW_RUN = "signoff.allow_run"
ACTION_ALLOW_THREAD = "signoff.allow_thread"
ACTION_EDIT = "signoff.edit"
"""Opens the modal that changes a call's arguments, then allows it."""
ACTION_ALLOW_ALL = "signoff.allow_all"
ACTION_DENY_ALL = "signoff.deny_all"
BATCH_ACTIONS = (ACTION_ALLOW_ALL, ACTION_DENY_ALL)
"""Buttons of a batch message: their value names the batch's first ticket and its token."""
ACTIONS = (
    ACTION_ALLOW,
    ACTION_DENY,
    ACTION_DENY_REASON,
    ACTION_ANSWER,
    ACTION_RESOLVE,
    ACTION_RETRY,
    ACTION_ABORT,
    ACTION_ALLOW_RUN,
    ACTION_ALLOW_THREAD,
    ACTION_EDIT,
    *BATCH_ACTIONS,
)
"""Every ``action_id`` a signoff button can have."""

ELLIPSIS = "…"
_SLACK_USER = re.compile(r"^[UW][A-Z0-9]+$")
_SLACK_GROUP = re.compile(r"^S[A-Z0-9]+$")
_SLACK_CHANNEL = re.compile(r"^[CG][A-Z0-9]+$")


@dataclass(frozen=True, slots=True)
class TicketRef:
    """What a button or modal carries: the ticket and the token it must echo.

    A modal also carries where its card is (``channel`` and ``thread_ts``), so a refusal
    found when the decision is applied can be told in that thread.
    """

    ticket_id: str
    correlation: str
    channel: str | None = None
    thread_ts: str | None = None


# -- text helpers ----------------------------------------------------------------------


def escape(text: str) -> str:
    """Escape the three characters Slack's mrkdwn treats as control characters."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def truncate(text: str, limit: int) -> str:
    """`text` cut to at most `limit` characters, ending in an ellipsis when cut.

    The cut never splits an HTML entity produced by `escape` (``&amp;`` and friends).
    """
    if limit <= 0:
        return ""
    if len(text) <= limit:
        return text
    cut = text[: limit - len(ELLIPSIS)]
    amp = cut.rfind("&")
    if amp != -1 and ";" not in cut[amp:] and len(cut) - amp < 5:
        cut = cut[:amp]
    return cut + ELLIPSIS


def plain(text: str, limit: int) -> dict[str, Any]:
    """A ``plain_text`` object (no escaping needed), cut to `limit`."""
    return {"type": "plain_text", "text": truncate(text, limit) or " ", "emoji": True}


def mrkdwn(text: str, limit: int = MAX_SECTION_TEXT) -> dict[str, Any]:
    """A ``mrkdwn`` object whose (already escaped) text is cut to `limit`."""
    return {"type": "mrkdwn", "text": truncate(text, limit) or " "}


def code_block(value: Any, limit: int = MAX_SECTION_TEXT) -> str:
    """`value` as pretty JSON in a mrkdwn code block of at most `limit` characters."""
    try:
        pretty = json.dumps(value, indent=2, ensure_ascii=False, default=str)
    except ValueError:  # a circular structure: show its repr
        pretty = repr(value)
    fence = "```"
    return fence + truncate(escape(pretty), limit - 2 * len(fence)) + fence


def user(ref: str | None) -> str:
    """Render a user id: a Slack mention for Slack ids, the escaped id otherwise."""
    if not ref:
        return "someone"
    if _SLACK_USER.match(ref):
        return f"<@{ref}>"
    return f"`{escape(ref)}`"


Groups = Mapping[str, Sequence[str]]
"""Named approver groups mapped to Slack user groups and channels
(``SIGNOFF_SLACK_APPROVER_GROUPS``)."""


def _slack_group(group: str) -> str | None:
    if _SLACK_GROUP.match(group):
        return f"<!subteam^{group}>"
    if _SLACK_CHANNEL.match(group):
        return f"members of <#{group}>"
    return None


def approver(entry: str, groups: Groups | None = None) -> str:
    """Render one approver entry (see "Who may decide" in docs/concepts.md)."""
    if entry == "*":
        return "anyone"
    if entry.startswith("group:"):
        group = entry[len("group:") :]
        mapped = [m for m in (_slack_group(i) for i in (groups or {}).get(group, ())) if m]
        if mapped:
            return " or ".join(mapped)
        return _slack_group(group) or f"group `{escape(group)}`"
    return user(entry)


def who_may_decide(deciders: Sequence[str], four_eyes: bool, groups: Groups | None = None) -> str:
    """Who may decide a ticket, with Slack mentions (see `runtime.describe_deciders`)."""
    return describe_deciders(deciders, four_eyes, lambda entry: approver(entry, groups))


def when(iso: str | None) -> str:
    """A timestamp as Slack's localised date, falling back to the ISO text."""
    if not iso:
        return "unknown time"
    try:
        moment = datetime.fromisoformat(iso)
    except ValueError:
        return escape(iso)
    return f"<!date^{int(moment.timestamp())}^{{date_short_pretty}} at {{time}}|{escape(iso)}>"


# -- buttons ---------------------------------------------------------------------------


def button_value(ticket_id: str, correlation: str) -> str:
    """The ``value`` of a signoff button: the ticket id and its correlation token only.

    Raises:
        ValueError: The two would not fit Slack's 2000-character limit.
    """
    value = json.dumps({"t": ticket_id, "c": correlation}, separators=(",", ":"))
    if len(value) > MAX_BUTTON_VALUE:
        raise ValueError("ticket id and correlation token exceed Slack's button value limit")
    return value


def parse_ref(value: Any) -> TicketRef | None:
    """Read a button value or modal ``private_metadata``; None if it is not ours."""
    if not isinstance(value, str) or len(value) > MAX_SECTION_TEXT:
        return None
    try:
        data = loads_strict(value)
    except (ValueError, RecursionError):
        return None
    if not isinstance(data, dict):
        return None
    ticket_id, correlation = data.get("t"), data.get("c")
    if not isinstance(ticket_id, str) or not isinstance(correlation, str):
        return None
    if not ticket_id or not correlation:
        return None
    channel, thread_ts = data.get("ch"), data.get("th")
    return TicketRef(
        ticket_id,
        correlation,
        channel if isinstance(channel, str) and channel else None,
        thread_ts if isinstance(thread_ts, str) and thread_ts else None,
    )


def button(text: str, action_id: str, value: str, style: str | None = None) -> dict[str, Any]:
    """A button element."""
    element: dict[str, Any] = {
        "type": "button",
        "text": plain(text, MAX_BUTTON_TEXT),
        "action_id": action_id,
        "value": value,
    }
    if style is not None:
        element["style"] = style
    return element


# -- cards -----------------------------------------------------------------------------


def _header(text: str) -> Block:
    return {"type": "header", "text": plain(text, MAX_HEADER_TEXT)}


def _section(text: str) -> Block:
    return {"type": "section", "text": mrkdwn(text)}


def _fields(*pairs: tuple[str, str]) -> Block:
    return {
        "type": "section",
        "fields": [mrkdwn(f"*{label}*\n{value}", MAX_FIELD_TEXT) for label, value in pairs],
    }


def _context(text: str) -> Block:
    return {"type": "context", "elements": [mrkdwn(text)]}


def _details(note: DescribedTicket, groups: Groups | None) -> Block:
    who = who_may_decide(note.deciders, note.four_eyes, groups)
    return _fields(
        ("Agent", agent_label(note)),
        ("Requested by", user(note.requester)),
        ("Who may decide", who),
        ("Deadline", when(note.deadline) if note.deadline else "none"),
    )


def agent_label(note: DescribedTicket) -> str:
    """The asking agent; for a sub-agent's request, with the agents that delegated to it;
    for an agent running elsewhere, ``External agent · <name>``."""
    agent = f"`{escape(note.agent or '?')}`"
    if note.external:
        return f"External agent · {agent}"
    above = describe_chain(note.chain, lambda a: f"`{escape(a)}`")
    return f"{agent}, sub-agent of {above}" if above else agent


def about_tool(note: DescribedTicket) -> Block | None:
    """What the tool says it does (cut short, on one line) and, for an MCP tool, its
    server; None when the note has neither."""
    parts: list[dict[str, Any]] = []
    described = " ".join((note.tool_description or "").split())
    if described:
        parts.append(mrkdwn(escape(truncate(described, MAX_TOOL_DESCRIPTION))))
    if note.tool_server:
        parts.append(mrkdwn(f"MCP server `{escape(truncate(note.tool_server, 100))}`"))
    return {"type": "context", "elements": parts} if parts else None


def _actions(ticket_id: str, buttons: Sequence[dict[str, Any]]) -> Block:
    return {"type": "actions", "block_id": f"signoff:{ticket_id}"[:255], "elements": list(buttons)}


def finish(blocks: list[Block]) -> list[Block]:
    """Keep a message within Slack's block count (the outcome and buttons come last)."""
    if len(blocks) <= MAX_BLOCKS:
        return blocks
    return [*blocks[: MAX_BLOCKS - 2], *blocks[-2:]]


def approval_card(
    note: DescribedTicket,
    ref: TicketRef | None,
    outcome: str | None = None,
    groups: Groups | None = None,
    console_url: str | None = None,
) -> list[Block]:
    """The card of an `ApprovalRequested` notification.

    Args:
        note: The notification (its agent, the tool and its masked arguments, the
            requester, who may decide, the deadline ...).
        ref: The open ticket; None renders the card without buttons.
        outcome: A line saying how it was decided (the decided-state card).
        groups: Named approver groups mapped to Slack ids.
        console_url: The console's base URL: a step-up card links there instead of
            offering the decision (see `step_up_section`).
    """
    tool = note.tool or "?"
    blocks: list[Block] = [
        _header(f"Approval needed: {tool}"),
        _section(
            f"*{escape(note.agent or '?')}*{' (external agent)' if note.external else ''} "
            f"wants to run `{escape(tool)}` with these arguments:"
        ),
        _section(code_block(note.args)),
        _details(note, groups),
    ]
    about = about_tool(note)
    if about is not None:
        blocks.insert(1, about)
    if note.why:
        blocks.append(_context(f"Why: {escape(note.why)}"))
    if outcome is not None:
        blocks.append(_section(outcome))
    if ref is not None and note.decide_in and "slack" not in note.decide_in:
        blocks.append(step_up_section(note, console_url))
    elif ref is not None:
        value = button_value(ref.ticket_id, ref.correlation)
        shown = [
            button("Allow", ACTION_ALLOW, value, "primary"),
            button("Deny", ACTION_DENY, value, "danger"),
            button("Deny with reason", ACTION_DENY_REASON, value),
            *grant_buttons(note, value),
        ]
        if note.editable:
            shown.append(button("Allow with changes…", ACTION_EDIT, value))
        blocks.append(_actions(ref.ticket_id, shown))
    return finish(blocks)


def step_up_section(note: DescribedTicket, console_url: str | None) -> Block:
    """What a step-up card shows instead of buttons: where the call may be decided, with
    a link to its run's page in the console (when the console's URL is known)."""
    where = " or ".join(note.decide_in)
    sso = " after signing in with single sign-on" if note.sso else ""
    if console_url and "console" in note.decide_in:
        link = f"{console_url.rstrip('/')}/runs/{note.run_id}"
        said = f":lock: This call may only be decided in the {where}{sso}"
        return _section(f"{said}: <{link}|Decide in the console>")
    return _section(f":lock: This call may only be decided in the {where}{sso}.")


def grant_buttons(note: DescribedTicket, value: str) -> list[dict[str, Any]]:
    """The buttons that allow a tool beyond this call, as far as the tool allows
    (the note's ``grants``): for the rest of the run, in the thread for some hours."""
    offered = note.grants
    found = []
    if "run" in offered:
        # An external agent's run is one call: its run grant covers the rest of its session.
        where = "session" if note.external else "run"
        found.append(button(f"Allow for the rest of this {where}", ACTION_ALLOW_RUN, value))
    if "thread" in offered:
        found.append(button("Allow in this thread…", ACTION_ALLOW_THREAD, value))
    return found


def granted_text(grant: Any) -> str:
    """ "for the rest of this run (grant `gr_1`)" and the like, from a ``grant`` summary."""
    if not isinstance(grant, Mapping):
        return ""
    where = "in this thread" if grant.get("scope") == "thread" else "for the rest of this run"
    text = f"{where} (grant `{escape(str(grant.get('grant_id') or '?'))}`"
    if grant.get("expires_at"):
        text += f", until {when(str(grant['expires_at']))}"
    return text + ")"


def input_card(
    note: DescribedTicket,
    ref: TicketRef | None,
    outcome: str | None = None,
    groups: Groups | None = None,
) -> list[Block]:
    """The card of an `InputRequested` notification: a button opens the form."""
    tool = note.tool or "?"
    blocks: list[Block] = [
        _header(f"Input needed: {tool}"),
        _section(escape(note.prompt or "The agent asks for input.")),
        _details(note, groups),
    ]
    if outcome is not None:
        blocks.append(_section(outcome))
    if ref is not None:
        value = button_value(ref.ticket_id, ref.correlation)
        blocks.append(
            _actions(
                ref.ticket_id,
                [
                    button("Answer…", ACTION_ANSWER, value, "primary"),
                    button("Deny", ACTION_DENY, value, "danger"),
                    button("Deny with reason", ACTION_DENY_REASON, value),
                ],
            )
        )
    return finish(blocks)


def uncertain_card(
    note: DescribedTicket,
    ref: TicketRef | None,
    outcome: str | None = None,
    groups: Groups | None = None,
) -> list[Block]:
    """The card of an `UncertainCall` notification: record a result, retry or abort."""
    tool = note.tool or "?"
    blocks: list[Block] = [
        _header(f"Did it happen? {tool}"),
        _section(
            f"`{escape(tool)}` was started but its outcome was never recorded (the process "
            "running it stopped). Check what really happened, then record the result, run it "
            "again, or abort it."
        ),
        _section(code_block(note.args)),
        _details(note, groups),
        _context(f"Execution key: `{escape(note.execution_key or '?')}`"),
    ]
    about = about_tool(note)
    if about is not None:
        blocks.insert(1, about)
    if outcome is not None:
        blocks.append(_section(outcome))
    if ref is not None:
        value = button_value(ref.ticket_id, ref.correlation)
        blocks.append(
            _actions(
                ref.ticket_id,
                [
                    button("Record verified result…", ACTION_RESOLVE, value, "primary"),
                    button("Run it again", ACTION_RETRY, value),
                    button("Abort", ACTION_ABORT, value, "danger"),
                ],
            )
        )
    return finish(blocks)


def card(
    note: TicketNotification,
    ref: TicketRef | None,
    outcome: str | None = None,
    groups: Groups | None = None,
    console_url: str | None = None,
) -> list[Block]:
    """The card of a notification that asks for a decision."""
    match note:
        case ApprovalRequested():
            return approval_card(note, ref, outcome, groups, console_url)
        case InputRequested():
            return input_card(note, ref, outcome, groups)
        case UncertainCall():
            return uncertain_card(note, ref, outcome, groups)
        case _:
            assert_never(note)


def card_text(note: TicketNotification) -> str:
    """The notification text (fallback) of a card."""
    tool = note.tool or "a tool"
    agent = note.agent or "an agent"
    match note:
        case ApprovalRequested():
            text = f"{agent} asks to run {tool}"
        case InputRequested():
            text = f"{agent} needs input for {tool}"
        case UncertainCall():
            text = f"{agent}: did {tool} happen? It needs a person to resolve it"
        case _:
            assert_never(note)
    return truncate(escape(text), MAX_FALLBACK_TEXT)


# -- outcomes --------------------------------------------------------------------------

_DECISIONS = {
    "allow": ":white_check_mark: Approved",
    "deny": ":no_entry: Denied",
    "input": ":memo: Answered",
    "resolve": ":white_check_mark: Result recorded",
    "retry": ":repeat: Retry accepted",
    "abort": ":no_entry: Aborted",
    "continue": ":arrow_forward: Resumed",
}


def decided_line(note: Decided) -> str:
    """ "Approved by @user at time" / "Denied by @user: reason", from a `Decided` note;
    an allow with edits says what changed: "Approved with changes by @ana at time: amount
    249.0 → 200.0"."""
    decision = note.decision
    head = _DECISIONS.get(decision, f"Decided ({escape(decision)})")
    edit = note.edit
    if decision == "allow" and edit is not None:
        head += " with changes"
    line = f"{head} by {user(note.actor)} at {when(note.decided_at)}"
    grant = note.grant
    if grant is not None and note.by_grant:
        line += f", with standing grant `{escape(str(grant.get('grant_id') or '?'))}`"
    elif grant:
        line += f", and {granted_text(grant)}"
    if note.reason:
        line += f": {escape(note.reason)}"
    if edit is not None and edit.get("summary"):
        line += f": {escape(str(edit['summary']))}"
    return truncate(line, MAX_SECTION_TEXT)


def expired_line(note: TicketExpired) -> str:
    """ "Expired", with what happened then, from a `TicketExpired` note."""
    if note.action == "escalate":
        to = ", ".join(approver(a) for a in note.escalated_to) or "others"
        return truncate(f":hourglass: Expired without a decision; escalated to {to}", 3000)
    if note.action == "cancel":
        return ":hourglass: Expired without a decision; the run was cancelled"
    return ":hourglass: Expired without a decision; the call was denied"


def voided_line(reason: str | None) -> str:
    """The line of a voided ticket (a `TicketVoided` note's reason)."""
    suffix = f": {escape(reason)}" if reason else ""
    return truncate(f":heavy_multiplication_x: Voided (the run was cancelled){suffix}", 3000)


def outcome_line(note: OutcomeNotification) -> str:
    """The outcome line of a notification that ends a ticket."""
    match note:
        case Decided():
            return decided_line(note)
        case TicketExpired():
            return expired_line(note)
        case TicketVoided():
            return voided_line(note.reason)
        case _:
            assert_never(note)


# -- batches -----------------------------------------------------------------------------


def batch_message(
    note: BatchOffered,
    open_ids: Sequence[str],
    ref: TicketRef | None,
    outcome: str | None = None,
) -> tuple[str, list[Block]]:
    """The message of a `BatchOffered` notification: the turn's open calls, and
    "Allow all N" / "Deny all N" (N = the open ones) whose value names the batch.

    Args:
        note: The notification (its tickets, token and calls).
        open_ids: The batch's tickets still open, in order.
        ref: The batch's first ticket and its token (None: no buttons).
        outcome: A line saying what was done with the batch.
    """
    calls = [c for c in note.calls if c.ticket_id in open_ids]
    count = len(calls)
    raw_agent = note.agent or "the agent"
    agent = escape(raw_agent)
    lines = [
        f"• `{escape(c.tool or '?')}` "
        + truncate(escape(json.dumps(c.args or {}, ensure_ascii=False, default=str)), 300)
        for c in calls
    ]
    text = f"{raw_agent}: {count} calls of one turn wait for a decision"
    blocks: list[Block] = [
        _header(f"{count} calls wait for a decision"),
        _section(f"*{agent}* asked for these in one turn; each has its card above:"),
        _section(truncate("\n".join(lines), MAX_SECTION_TEXT)),
        _context(
            "Deciding all of them decides each on its own: one that cannot be decided "
            "(already decided, not yours to decide) stays as it is."
        ),
    ]
    if outcome is not None:
        blocks.append(_section(outcome))
    if ref is not None and count:
        value = button_value(ref.ticket_id, ref.correlation)
        blocks.append(
            _actions(
                ref.ticket_id,
                [
                    button(f"Allow all {count}", ACTION_ALLOW_ALL, value, "primary"),
                    button(f"Deny all {count}", ACTION_DENY_ALL, value, "danger"),
                ],
            )
        )
    return truncate(escape(text), MAX_FALLBACK_TEXT), finish(blocks)


# -- run messages ------------------------------------------------------------------------


def finished_message(note: RunFinished) -> tuple[str, list[Block]]:
    """The text and blocks of a `RunFinished` notification: the run's final answer."""
    status = note.status or "done"
    agent = escape(note.agent or "The agent")
    if status == "done":
        raw = note.text or "(no answer)"
        # Chunk before escaping so an entity is never split; each chunk still fits.
        step = MAX_SECTION_TEXT - 100
        chunks = [escape(raw[i : i + step]) for i in range(0, len(raw), step)]
        room = MAX_BLOCKS - 1
        if len(chunks) > room:
            chunks = [*chunks[: room - 1], chunks[room - 1] + ELLIPSIS * 3]
        blocks = [_section(chunk) for chunk in chunks]
        blocks.append(_context(f"{agent} finished · run `{escape(note.run_id)}`"))
        return truncate(escape(raw), MAX_FALLBACK_TEXT), blocks
    if status == "failed":
        error = escape(note.error or "unknown error")
        text = f":x: {agent} failed: {error}"
    else:
        reason = note.reason
        text = f":heavy_multiplication_x: {agent} was cancelled" + (
            f": {escape(reason)}" if reason else ""
        )
    text = truncate(text, MAX_SECTION_TEXT)
    return text, [_section(text)]


def paused_message(note: RunPaused) -> tuple[str, list[Block]]:
    """The text and blocks of a `RunPaused` notification."""
    text = (
        f":double_vertical_bar: {escape(note.agent or 'The run')} is paused; "
        "an operator can resume it from the console or with `signoff resume`."
    )
    return text, [_section(text)]


def notice_section(text: str) -> Block:
    """A section of already-escaped mrkdwn `text` (cut to Slack's limit)."""
    return _section(text)


def notice(text: str) -> tuple[str, list[Block]]:
    """A one-section message (help, errors), escaped and cut to Slack's limits."""
    escaped = truncate(escape(text), MAX_SECTION_TEXT)
    return escaped, [_section(escaped)]
