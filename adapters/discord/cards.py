"""Discord messages built from runtime notifications: pure functions returning REST bodies.

- `card`: the message of a pending ticket (`ApprovalRequested`, `InputRequested`,
  `UncertainCall`): an embed with the agent, tool, arguments, requester, who may decide
  and the deadline, and the buttons; with an `Outcome` the same card decided (buttons
  disabled, who decided and when).
- `outcome`: what a `Decided` / `TicketExpired` / `TicketVoided` notification says.
- `finished_message`, `paused_message`, `started_text`: the other messages of a run.
- `pending_embed`, `status_embed`: the ephemeral answers of ``/agent pending|status``.

Everything stays within Discord's limits: 2000 characters of content; per embed a
256-character title, a 4096-character description, at most 25 fields of 1024 characters
and 6000 characters in all; buttons are 80-character labels, five to a row. Arguments
are shown as pretty JSON, cut with a note saying how much was left out. Nothing a person
typed or a model wrote can ping anyone: messages carry explicit ``allowed_mentions``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, assert_never

from adapters.discord.custom_ids import Action, BatchClick, TicketClick
from adapters.discord.forms import clip, fits_modal, form_fields
from runtime import PendingEntry, RunResult
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
)

CONTENT_LENGTH = 2000
TITLE_LENGTH = 256
DESCRIPTION_LENGTH = 4096
FIELD_NAME_LENGTH = 256
FIELD_VALUE_LENGTH = 1024
FOOTER_LENGTH = 2048
EMBED_TOTAL = 6000
EMBED_FIELDS = 25
LABEL_LENGTH = 80
ARGS_LENGTH = 3000
TOOL_DESCRIPTION_LENGTH = 300
"""Characters of a tool's own description a card shows (the rest is cut with "…")."""
"""Room for the arguments' JSON in a card's description."""

COLOR_PENDING = 0xF1C40F
COLOR_ALLOWED = 0x2ECC71
COLOR_DENIED = 0xE74C3C
COLOR_NEUTRAL = 0x95A5A6
COLOR_INFO = 0x3498DB

# Discord button styles: 1 primary, 2 secondary, 3 success, 4 danger, 5 link.
BUTTONS: dict[Action, tuple[int, str]] = {
    Action.ALLOW: (3, "Allow"),
    Action.DENY: (4, "Deny"),
    Action.REASON: (2, "Deny with reason"),
    Action.INPUT: (1, "Answer"),
    Action.RESULT: (1, "Record result"),
    Action.RETRY: (2, "Retry"),
    Action.ABORT: (4, "Abort"),
    Action.GRANT_RUN: (3, "Allow for the rest of this run"),
    Action.GRANT_THREAD: (3, "Allow in this thread…"),
    Action.EDIT: (2, "Allow with changes"),
}
NO_MENTIONS: dict[str, Any] = {"parse": []}

_MARKDOWN = re.compile(r"([\\*_~`|>#\[\]<])")


def escape(text: str) -> str:
    """`text` with Discord markdown and mention syntax neutralised."""
    return _MARKDOWN.sub(r"\\\1", text)


def user(user_id: str | None) -> str:
    """A user as shown: a mention for a Discord id, else the id in code style."""
    if not user_id:
        return "someone"
    if user_id.isdigit():
        return f"<@{user_id}>"
    return code(user_id)


def code(text: str) -> str:
    """Inline code that survives backticks in `text`."""
    return "`" + text.replace("`", "\u02cb") + "`"


def approver(entry: str, role_groups: Mapping[str, Sequence[str]]) -> str:
    """One approver entry as shown: user and role mentions where Discord has them."""
    if entry == "*":
        return "anyone"
    if entry.startswith("group:"):
        group = entry[len("group:") :]
        if group.startswith("role:") and group[5:].isdigit():
            return f"<@&{group[5:]}>"
        roles = role_groups.get(group)
        if roles:
            return " / ".join(f"<@&{role}>" for role in roles)
        return f"group {code(group)}"
    return user(entry)


def agent_label(note: DescribedTicket) -> str:
    """The asking agent; for a sub-agent's request, with the agents that delegated to it;
    for an agent running elsewhere, ``External agent · <name>``."""
    if note.external:
        return f"External agent · {escape(note.agent)}"
    above = describe_chain(note.chain, escape)
    return f"{escape(note.agent)}, sub-agent of {above}" if above else escape(note.agent)


def tool_label(tool: str, note: DescribedTicket) -> str:
    """The tool, and for an MCP tool the server it comes from."""
    if note.tool_server:
        return f"{code(tool)} (MCP server {code(clip(note.tool_server, 100))})"
    return code(tool)


def who_may_decide(
    deciders: Sequence[str],
    four_eyes: bool,
    role_groups: Mapping[str, Sequence[str]],
) -> str:
    """Who may decide a ticket, with mentions (see `runtime.describe_deciders`)."""
    return describe_deciders(deciders, four_eyes, lambda entry: approver(entry, role_groups))


def when(iso: str | None) -> str:
    """A timestamp every reader sees in their own time zone, plus how far away it is."""
    if not iso:
        return "—"
    try:
        moment = datetime.fromisoformat(iso)
    except ValueError:
        return escape(iso)
    stamp = int(moment.timestamp())
    return f"<t:{stamp}:f> (<t:{stamp}:R>)"


def args_block(args: Any, limit: int = ARGS_LENGTH) -> str:
    """Arguments as a JSON code block of at most `limit` characters."""
    text = json.dumps(args, indent=2, ensure_ascii=False, default=str)
    text = text.replace("```", "`\u200b`\u200b`")
    fence_open, fence_close = "```json\n", "\n```"
    room = limit - len(fence_open) - len(fence_close)
    if len(text) > room:
        note_room = 40
        cut = max(room - note_room, 0)
        text = f"{text[:cut]}\n… ({len(text) - cut} more characters)"
    return fence_open + text + fence_close


def fit_embed(embed: dict[str, Any]) -> dict[str, Any]:
    """Cut an embed to Discord's per-part and total limits."""
    fitted = dict(embed)
    if "title" in fitted:
        fitted["title"] = clip(str(fitted["title"]), TITLE_LENGTH)
    if "description" in fitted:
        fitted["description"] = clip(str(fitted["description"]), DESCRIPTION_LENGTH)
    fields = [
        {
            **f,
            "name": clip(str(f["name"]), FIELD_NAME_LENGTH) or "\u200b",
            "value": clip(str(f["value"]), FIELD_VALUE_LENGTH) or "\u200b",
        }
        for f in fitted.get("fields", [])[:EMBED_FIELDS]
    ]
    if "fields" in fitted:
        fitted["fields"] = fields
    footer = fitted.get("footer")
    if isinstance(footer, dict) and "text" in footer:
        fitted["footer"] = {**footer, "text": clip(str(footer["text"]), FOOTER_LENGTH)}
    excess = embed_length(fitted) - EMBED_TOTAL
    if excess > 0 and fitted.get("description"):
        description = str(fitted["description"])
        fitted["description"] = clip(description, max(len(description) - excess, 1))
        excess = embed_length(fitted) - EMBED_TOTAL
    while excess > 0 and fitted.get("fields"):
        last = fitted["fields"][-1]
        value = str(last["value"])
        if len(value) - excess >= 1:
            fitted["fields"][-1] = {**last, "value": clip(value, len(value) - excess)}
        else:
            fitted["fields"] = fitted["fields"][:-1]
        excess = embed_length(fitted) - EMBED_TOTAL
    return fitted


def embed_length(embed: Mapping[str, Any]) -> int:
    """The characters Discord counts towards an embed's 6000."""
    total = len(str(embed.get("title", ""))) + len(str(embed.get("description", "")))
    for f in embed.get("fields", []):
        total += len(str(f.get("name", ""))) + len(str(f.get("value", "")))
    footer = embed.get("footer")
    if isinstance(footer, Mapping):
        total += len(str(footer.get("text", "")))
    author = embed.get("author")
    if isinstance(author, Mapping):
        total += len(str(author.get("name", "")))
    return total


def _field(name: str, value: str, inline: bool = True) -> dict[str, Any]:
    return {"name": name, "value": value, "inline": inline}


# An external agent's run is one call: its run grant covers the rest of its session.
SESSION_GRANT_LABEL = "Allow for the rest of this session"


def _button(
    click: TicketClick, *, disabled: bool = False, label: str | None = None
) -> dict[str, Any]:
    style, default = BUTTONS[click.action]
    label = label or default
    return {
        "type": 2,
        "style": style,
        "label": label,
        "custom_id": click.button_id,
        "disabled": disabled,
    }


def _link(label: str, url: str, *, disabled: bool = False) -> dict[str, Any]:
    return {
        "type": 2,
        "style": 5,
        "label": clip(label, LABEL_LENGTH),
        "url": url,
        "disabled": disabled,
    }


@dataclass(frozen=True, slots=True)
class Outcome:
    """How a card ended: one line (or a few) and the card's new colour."""

    text: str
    color: int


def card(
    note: TicketNotification,
    correlation: str,
    *,
    role_groups: Mapping[str, Sequence[str]] | None = None,
    console_url: str | None = None,
    outcome: Outcome | None = None,
) -> dict[str, Any]:
    """The message of a pending ticket, or of the same ticket decided (with `outcome`).

    Args:
        note: The notification that asks for a decision.
        correlation: The ticket's correlation token, carried by every button.
        role_groups: Group names mapped to role ids, to show approvers as role mentions.
        console_url: Base URL of the web console for forms too large for a modal.
        outcome: How the ticket ended; its card then shows it and disables the buttons.

    Returns:
        A ``POST /channels/{id}/messages`` (or ``PATCH``) body.
    """
    groups = role_groups or {}
    ticket_id = note.ticket_id
    run_id = note.run_id
    agent = note.agent
    tool = note.tool or ""
    requester = note.requester
    fields = [
        _field("Agent", agent_label(note)),
        _field("Tool", tool_label(tool, note)),
        _field("Requested by", user(requester)),
    ]
    described = " ".join((note.tool_description or "").split())
    if described:
        fields.append(
            _field("What it does", escape(clip(described, TOOL_DESCRIPTION_LENGTH)), inline=False)
        )
    components: list[dict[str, Any]] = []
    # Standing-grant buttons get a row of their own (a row holds at most five).
    granting: list[dict[str, Any]] = []
    disabled = outcome is not None

    def click(action: Action) -> TicketClick:
        return TicketClick(action, ticket_id, correlation)

    match note:
        case InputRequested():
            title, description, buttons, color = _input_body(note, click, disabled, console_url)
        case UncertainCall():
            title, description, buttons, color = _uncertain_body(note, click, disabled, fields)
        case ApprovalRequested():
            title = f"Approval needed: {tool}"
            description = args_block(note.args)
            if note.why:
                fields.append(_field("Why", escape(note.why), inline=False))
            buttons = [
                _button(click(Action.ALLOW), disabled=disabled),
                _button(click(Action.DENY), disabled=disabled),
                _button(click(Action.REASON), disabled=disabled),
            ]
            granting = [
                _button(
                    click(a),
                    disabled=disabled,
                    label=SESSION_GRANT_LABEL if note.external and a is Action.GRANT_RUN else None,
                )
                for a in grant_actions(note)
            ]
            if note.editable:
                buttons.append(_button(click(Action.EDIT), disabled=disabled))
            if note.decide_in and "discord" not in note.decide_in:
                # Step-up: no decision here, only the way to where it may be made.
                fields.append(_field("Where", _step_up_text(note), inline=False))
                buttons, granting = [], []
                if console_url and "console" in note.decide_in:
                    url = f"{console_url.rstrip('/')}/runs/{run_id}"
                    buttons.append(_link("Decide in the console", url, disabled=disabled))
            color = COLOR_PENDING
        case _:
            assert_never(note)
    fields.append(
        _field(
            "Who may decide",
            who_may_decide(note.deciders, note.four_eyes, groups),
            inline=False,
        )
    )
    if note.deadline:
        fields.append(_field("Deadline", when(note.deadline), inline=False))
    if outcome is not None:
        fields.append(_field("Outcome", outcome.text, inline=False))
        color = outcome.color
    components.append({"type": 1, "components": buttons})
    if granting:
        components.append({"type": 1, "components": granting})
    embed = fit_embed(
        {
            "title": title,
            "description": description,
            "color": color,
            "fields": fields,
            "footer": {"text": f"run {run_id} · ticket {ticket_id}"},
        }
    )
    mentions: dict[str, Any] = dict(NO_MENTIONS)
    content = ""
    if requester and requester.isdigit() and outcome is None:
        content = f"<@{requester}> **{escape(agent)}** is waiting for a decision."
        mentions = {"parse": [], "users": [requester]}
    elif outcome is None:
        content = f"**{escape(agent)}** is waiting for a decision."
    else:
        content = f"**{escape(agent)}**: decided."
    return {
        "content": content,
        "embeds": [embed],
        "components": components,
        "allowed_mentions": mentions,
    }


_Body = tuple[str, str, list[dict[str, Any]], int]
"""A card's title, description, buttons and colour."""


def _input_body(
    note: InputRequested,
    click: Callable[[Action], TicketClick],
    disabled: bool,
    console_url: str | None,
) -> _Body:
    """An input request's card: the form's fields, and a button that opens it (or a link
    to the console when it does not fit a Discord form)."""
    tool = note.tool or ""
    ticket_id = note.ticket_id
    schema = note.form_schema
    listed = form_fields(schema)
    lines = [
        f"• **{escape(f.label)}**{' (required)' if f.required else ''}: {escape(f.placeholder)}"
        for f in listed
    ]
    description = escape((note.prompt or "")[:1500])
    if lines:
        description += "\n\n" + "\n".join(lines[:20])
    buttons = []
    if fits_modal(schema):
        buttons.append(_button(click(Action.INPUT), disabled=disabled))
    else:
        where = f"/runs/{note.run_id}"
        description += (
            f"\n\nThis form has {len(listed)} fields, more than a Discord form holds: "
            f"answer it in the web console at {code(where)}, or with "
            f"{code(f'signoff answer {ticket_id} --data JSON')}."
        )
        if console_url:
            url = console_url.rstrip("/") + where
            buttons.append(_link("Answer in the console", url, disabled=disabled))
    buttons.append(_button(click(Action.DENY), disabled=disabled))
    return f"Input needed: {tool}", description, buttons, COLOR_INFO


def _step_up_text(note: TicketNotification) -> str:
    where = " or ".join(note.decide_in)
    sso = " after signing in with single sign-on" if note.sso else ""
    return f"🔒 This call may only be decided in the {where}{sso}."


def _uncertain_body(
    note: UncertainCall,
    click: Callable[[Action], TicketClick],
    disabled: bool,
    fields: list[dict[str, Any]],
) -> _Body:
    """An uncertain call's card: record what happened, run it again or give up (its
    execution key joins `fields`)."""
    description = (
        "The bot stopped while this call was running, so nobody knows whether it "
        "took effect. Check the system it acts on, then record what happened, run it "
        "again, or give up.\n" + args_block(note.args)
    )
    if note.execution_key:
        fields.append(_field("Execution key", code(note.execution_key), inline=False))
    buttons = [
        _button(click(Action.RESULT), disabled=disabled),
        _button(click(Action.RETRY), disabled=disabled),
        _button(click(Action.ABORT), disabled=disabled),
    ]
    return f"Did it happen? {note.tool or ''}", description, buttons, COLOR_PENDING


def grant_actions(note: DescribedTicket) -> list[Action]:
    """The grant buttons a card offers: as far as its tool allows (the note's
    ``grants``), for the rest of the run and in the thread for some hours."""
    offered = note.grants
    found = []
    if "run" in offered:
        found.append(Action.GRANT_RUN)
    if "thread" in offered:
        found.append(Action.GRANT_THREAD)
    return found


def granted_text(note: Decided) -> str:
    """How a `Decided` note's standing grant reads on its card ("" without one)."""
    grant = note.grant
    if grant is None:
        return ""
    grant_id = code(str(grant.get("grant_id") or "?"))
    if note.by_grant:
        return f"\nWith standing grant {grant_id}"
    where = "in this thread" if grant.get("scope") == "thread" else "for the rest of this run"
    text = f"\nAnd {where} (grant {grant_id}"
    if grant.get("expires_at"):
        text += f", until {when(str(grant['expires_at']))}"
    return text + ")"


def _by(note: Decided) -> str:
    who = user(note.actor)
    platform = note.platform
    if platform and platform != "discord":
        who += f" via {escape(platform)}"
    return f"{who} · {when(note.decided_at)}"


def outcome(
    note: OutcomeNotification, role_groups: Mapping[str, Sequence[str]] | None = None
) -> Outcome:
    """What a notification that ends a ticket says."""
    match note:
        case Decided():
            return _decided(note)
        case TicketExpired():
            return _expired(note, role_groups or {})
        case TicketVoided():
            text = "✖️ Withdrawn" + (f": {escape(note.reason)}" if note.reason else "")
            return Outcome(clip(text, FIELD_VALUE_LENGTH), COLOR_NEUTRAL)
        case _:
            assert_never(note)


def _decided(note: Decided) -> Outcome:
    decision = note.decision
    reason = note.reason
    shown = {
        "allow": ("✅ Allowed by", COLOR_ALLOWED),
        "deny": ("⛔ Denied by", COLOR_DENIED),
        "input": ("📝 Answered by", COLOR_ALLOWED),
        "resolve": ("📝 Result recorded by", COLOR_ALLOWED),
        "retry": ("🔁 Retry accepted by", COLOR_ALLOWED),
        "abort": ("🛑 Aborted by", COLOR_DENIED),
    }.get(decision, (f"Decided ({escape(decision)}) by", COLOR_NEUTRAL))
    edit = note.edit
    head = shown[0]
    if decision == "allow" and edit is not None:
        head = "✅ Allowed with changes by"
    text = f"{head} {_by(note)}{granted_text(note)}"
    if reason:
        text += f"\nReason: {escape(reason)}"
    if edit is not None and edit.get("summary"):
        text += f"\nChanged: {escape(str(edit['summary']))}"
    return Outcome(clip(text, FIELD_VALUE_LENGTH), shown[1])


def _expired(note: TicketExpired, groups: Mapping[str, Sequence[str]]) -> Outcome:
    if note.action == "escalate":
        to = ", ".join(approver(e, groups) for e in note.escalated_to)
        return Outcome(f"⏰ Expired without a decision; escalated to {to}", COLOR_NEUTRAL)
    if note.action == "cancel":
        return Outcome("⏰ Expired without a decision; the run was cancelled", COLOR_DENIED)
    return Outcome("⏰ Expired without a decision; the call was denied", COLOR_DENIED)


def batch_message(
    note: BatchOffered, open_ids: Sequence[str], *, settled: str | None = None
) -> dict[str, Any]:
    """The message of a `BatchOffered` notification: the turn's open calls with "Allow
    all N" and "Deny all N" (N = the open ones), or, `settled`, what was done with it
    (buttons disabled)."""
    calls = [c for c in note.calls if c.ticket_id in open_ids]
    count = len(calls)
    ticket_id = (note.ticket_ids or [""])[0]
    token = note.token
    lines = [
        f"• {code(c.tool or '')} "
        + code(clip(json.dumps(c.args or {}, ensure_ascii=False, default=str), 200))
        for c in calls
    ]
    description = (
        f"**{escape(note.agent)}** asked for these in one turn; each has "
        "its card above.\n" + "\n".join(lines) + "\n\nDeciding all of them decides each on "
        "its own: one that cannot be decided (already decided, not yours) stays as it is."
    )
    fields = []
    if settled is not None:
        fields.append(_field("Outcome", settled, inline=False))
    embed = fit_embed(
        {
            "title": f"{count} calls wait for a decision",
            "description": description,
            "color": COLOR_NEUTRAL if settled is not None else COLOR_PENDING,
            "fields": fields,
            "footer": {"text": f"run {note.run_id} · batch {ticket_id}"},
        }
    )
    disabled = settled is not None
    buttons = [
        {
            "type": 2,
            "style": style,
            "label": f"{label} all {count}",
            "custom_id": BatchClick(decision, ticket_id, token).button_id,
            "disabled": disabled,
        }
        for decision, style, label in (("allow", 3, "Allow"), ("deny", 4, "Deny"))
    ]
    return {
        "content": "",
        "embeds": [embed],
        "components": [{"type": 1, "components": buttons}],
        "allowed_mentions": NO_MENTIONS,
    }


def outcome_message(note: OutcomeNotification, result: Outcome) -> dict[str, Any]:
    """A new message saying how a ticket ended (when its card cannot be edited)."""
    ticket = note.ticket_id
    embed = fit_embed(
        {
            "title": f"{note.agent}: ticket {ticket}",
            "description": result.text,
            "color": result.color,
            "footer": {"text": f"run {note.run_id} · ticket {ticket}"},
        }
    )
    return {"content": "", "embeds": [embed], "allowed_mentions": NO_MENTIONS}


def finished_message(note: RunFinished) -> dict[str, Any]:
    """The message of a finished run: its answer, its error, or why it was cancelled."""
    agent = escape(note.agent)
    run_id = note.run_id
    status = note.status
    if status == "done":
        embed = {
            "title": f"{note.agent} finished",
            "description": note.text or "(no answer)",
            "color": COLOR_ALLOWED,
            "footer": {"text": f"run {run_id}"},
        }
        content = f"✅ **{agent}** finished · run {code(run_id)}"
    elif status == "failed":
        embed = {
            "title": f"{note.agent} failed",
            "description": escape(note.error or "unknown error"),
            "color": COLOR_DENIED,
            "footer": {"text": f"run {run_id}"},
        }
        content = f"❌ **{agent}** failed · run {code(run_id)}"
    else:
        reason = note.reason
        embed = {
            "title": f"{note.agent} was cancelled",
            "description": escape(reason) if reason else "Cancelled.",
            "color": COLOR_NEUTRAL,
            "footer": {"text": f"run {run_id}"},
        }
        content = f"⏹ **{agent}** was cancelled · run {code(run_id)}"
    return {"content": content, "embeds": [fit_embed(embed)], "allowed_mentions": NO_MENTIONS}


def paused_message(note: RunPaused) -> dict[str, Any]:
    """The message of a paused run."""
    run_id = note.run_id
    text = (
        f"⏸ **{escape(note.agent)}** is paused · run {code(run_id)}. "
        f"Resume it from the console or with {code(f'signoff resume {run_id}')}."
    )
    return {"content": clip(text, CONTENT_LENGTH), "allowed_mentions": NO_MENTIONS}


def started_text(user_id: str, agent: str, run_id: str, prompt: str) -> str:
    """What the channel reads when someone starts a run."""
    quoted = "\n".join("> " + line for line in clip(prompt, 1500).splitlines() or [""])
    text = f"▶️ {user(user_id)} started **{escape(agent)}** · run {code(run_id)}\n{quoted}"
    return clip(text, CONTENT_LENGTH)


def jump_url(guild_id: str | None, channel_id: str, message_id: str) -> str:
    """The link that opens a message in Discord."""
    return f"https://discord.com/channels/{guild_id or '@me'}/{channel_id}/{message_id}"


def pending_embed(entries: Sequence[tuple[PendingEntry, str | None]], total: int) -> dict[str, Any]:
    """The ``/agent pending`` answer: open tickets the caller may decide, with links."""
    if not entries:
        return {
            "title": "Nothing waits for you",
            "description": "No open request is yours to decide.",
            "color": COLOR_NEUTRAL,
        }
    lines = []
    for entry, link in entries:
        ticket = entry.ticket
        kind = {"approval": "approve", "input": "answer", "uncertain": "resolve"}[entry.status]
        line = (
            f"• **{escape(ticket.agent)}** · {code(entry.call.name)} · {kind} · "
            f"run {code(ticket.run_id)}"
        )
        if ticket.deadline is not None:
            line += f" · due <t:{int(ticket.deadline.timestamp())}:R>"
        if link:
            line += f" · [open]({link})"
        lines.append(line)
    description = "\n".join(lines)
    if total > len(entries):
        description += f"\n… and {total - len(entries)} more"
    return fit_embed(
        {
            "title": f"{total} request{'s' if total != 1 else ''} wait for you",
            "description": description,
            "color": COLOR_PENDING,
        }
    )


def status_embed(result: RunResult) -> dict[str, Any]:
    """The ``/agent status`` answer for one run."""
    fields = [
        _field("Status", str(result.status)),
        _field("Agent", escape(result.agent)),
        _field("Requested by", user(result.requester)),
        _field("Turns", str(result.turns)),
        _field("Tokens", str(result.total_tokens)),
    ]
    for entry in result.pending[:10]:
        fields.append(
            _field(
                f"Waiting: {entry.status}",
                f"{code(entry.call.name)} · ticket {code(entry.ticket_id)}",
                inline=False,
            )
        )
    description = ""
    if result.text:
        description = result.text
    elif result.error:
        description = escape(result.error)
    color = {"done": COLOR_ALLOWED, "failed": COLOR_DENIED, "awaiting": COLOR_PENDING}.get(
        str(result.status), COLOR_INFO
    )
    embed: dict[str, Any] = {"title": f"Run {result.run_id}", "color": color, "fields": fields}
    if description:
        embed["description"] = description
    return fit_embed(embed)


def clip_content(text: str) -> str:
    """Message content cut to Discord's 2000 characters."""
    return clip(text, CONTENT_LENGTH)
