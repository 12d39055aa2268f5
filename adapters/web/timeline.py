"""A run's flight recorder as lines a person reads (the console's timeline)."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

MAX_SHOWN = 4000


def pretty(value: Any, limit: int = MAX_SHOWN) -> str:
    """Indented JSON (strings as they are), cut safely at `limit` characters."""
    text = (
        value
        if isinstance(value, str)
        else json.dumps(value, indent=2, ensure_ascii=False, default=str)
    )
    if len(text) > limit:
        return text[:limit] + f"\n… ({len(text) - limit} more characters)"
    return text


@dataclass(frozen=True, slots=True)
class TimelineItem:
    """One event of the timeline.

    Attributes:
        at: ISO time.
        kind: The event kind (``model_call``, ``ticket_decided`` ...).
        title: One line saying what happened.
        actor: Who acted, if a person did.
        details: ``(label, text)`` blocks shown under the title.
        tone: ``info``, ``ok``, ``warn``, ``bad`` or ``muted`` (colour only).
    """

    at: str
    kind: str
    title: str
    actor: str | None = None
    details: list[tuple[str, str]] = field(default_factory=list)
    tone: str = "info"


Described = tuple[str, list[tuple[str, Any]], str]


def _d(data: dict[str, Any], key: str, default: Any = "?") -> Any:
    value = data.get(key)
    return default if value is None else value


def _model_call(d: dict[str, Any], actor: str | None) -> Described:
    title = (
        f"Model call, turn {_d(d, 'turn')} ({_d(d, 'model')}): "
        f"{_d(d, 'prompt_tokens', 0)} prompt + {_d(d, 'completion_tokens', 0)} completion tokens"
    )
    if d.get("cached_tokens"):
        title += f" ({d['cached_tokens']} cached)"
    if d.get("cost") is not None:
        title += f", cost {float(d['cost']):.4f}"
    if d.get("stop") in ("length", "refusal"):
        title += f"; stopped: {d['stop']}"
    details: list[tuple[str, Any]] = []
    if d.get("text"):
        details.append(("said", d["text"]))
    if d.get("tool_calls"):
        details.append(("asked for", ", ".join(map(str, d["tool_calls"]))))
    return title, details, "info"


def _ticket_opened(d: dict[str, Any], actor: str | None) -> Described:
    target = d.get("target") or {}
    if target.get("kind") == "child":
        title = f"Waiting on the sub-agent {_d(target, 'agent')} (run {_d(target, 'child_run_id')})"
        return title, [("task", _d(target, "task_key")), ("ticket", _d(d, "ticket_id"))], "warn"
    what = target.get("tool") or target.get("kind", "a decision")
    title = f"Waiting for a decision on {what}; who may decide: {_d(d, 'who_may_decide')}"
    if d.get("deadline"):
        title += f"; deadline {d['deadline']}"
    # The call's arguments are shown once, where it was proposed.
    details: list[tuple[str, Any]] = [("ticket", _d(d, "ticket_id"))]
    if target.get("prompt"):
        details.append(("asks", target["prompt"]))
    return title, details, "warn"


def _ticket_decided(d: dict[str, Any], actor: str | None) -> Described:
    who = d.get("actor_name") or d.get("actor") or actor or "?"
    decision = _d(d, "decision")
    title = (
        f"{str(decision).capitalize()}: {_d(d, 'tool', 'ticket')} by {who} via {_d(d, 'platform')}"
    )
    details: list[tuple[str, Any]] = []
    if d.get("reason"):
        details.append(("reason", d["reason"]))
    grant = d.get("grant")
    if isinstance(grant, dict):
        if d.get("by_grant"):
            title += f", with grant {_d(grant, 'grant_id')}"
        else:
            title += f", and {_granted(grant)}"
    edit = d.get("edit")
    if isinstance(edit, dict) and edit.get("summary"):
        # Approve with edits: "amount 249.0 → 200.0 by ana", and what the call runs with.
        title = title.replace(f"{str(decision).capitalize()}:", "Allow with changes:", 1)
        details.append(("changed", f"{edit['summary']} by {edit.get('by') or who}"))
        details.append(("runs with", edit.get("args", {})))
    tone = "bad" if decision in ("deny", "abort") else "ok"
    return title, details, tone


def _granted(grant: dict[str, Any]) -> str:
    """``granted it for the rest of the run (grant gr_1)`` and the like."""
    where = "in this thread" if grant.get("scope") == "thread" else "for the rest of the run"
    text = f"granted it {where} (grant {_d(grant, 'grant_id')})"
    if grant.get("expires_at"):
        text += f" until {grant['expires_at']}"
    return text


def _grant_created(d: dict[str, Any], actor: str | None) -> Described:
    where = "the rest of this run" if d.get("scope") == "run" else "this thread"
    title = f"Grant {_d(d, 'grant_id')}: {_d(d, 'tool')} runs without asking for {where}"
    if d.get("expires_at"):
        title += f", until {d['expires_at']}"
    details: list[tuple[str, Any]] = []
    if d.get("constraint"):
        details.append(("only with arguments", d["constraint"]))
    return title, details, "ok"


def _is_rule(described: Any) -> bool:
    """Whether a recorded permission source is a rule (not a fixed permission)."""
    return isinstance(described, str) and not described.startswith("permission ")


_SIMPLE: dict[str, Callable[[dict[str, Any], str | None], Described]] = {
    "run_started": lambda d, a: (
        f"Run of {_d(d, 'agent')} started by {a or 'someone'}",
        [("input", _d(d, "input", ""))],
        "info",
    ),
    "run_claimed": lambda d, a: (f"Picked up by worker {_d(d, 'worker')}", [], "muted"),
    "model_call": _model_call,
    "model_failed": lambda d, a: (
        f"Model call failed, turn {_d(d, 'turn')} ({_d(d, 'model')}): "
        f"{_d(d, 'failure')}" + (f" (HTTP {d['status']})" if d.get("status") is not None else ""),
        [("provider said", d.get("message", ""))],
        "bad",
    ),
    "model_interrupted": lambda d, a: (
        f"Model call interrupted; attempt {_d(d, 'attempt')} of turn {_d(d, 'turn')}",
        [],
        "warn",
    ),
    "tool_proposed": lambda d, a: (
        f"Tool call {_d(d, 'tool')} proposed (permission: {_d(d, 'permission')}"
        + (f", by the tool's {d['rule']})" if _is_rule(d.get("rule")) else ")"),
        [("arguments", d.get("args", {}))],
        "info",
    ),
    "ticket_opened": _ticket_opened,
    "ticket_decided": _ticket_decided,
    "grant_created": _grant_created,
    "grant_applied": lambda d, a: (
        f"Allowed by grant {_d(d, 'grant_id')} (given by {_d(d, 'granted_by')}): "
        f"{_d(d, 'tool')} runs without asking",
        [],
        "ok",
    ),
    "grant_revoked": lambda d, a: (
        f"Grant {_d(d, 'grant_id')} of {_d(d, 'tool')} revoked by {a or '?'}",
        [],
        "warn",
    ),
    "tool_dispatched": lambda d, a: (
        f"Tool {_d(d, 'tool')} running (attempt {_d(d, 'attempt')})",
        [],
        "muted",
    ),
    "tool_completed": lambda d, a: (
        f"Tool {_d(d, 'tool')} completed",
        [("result", d.get("result"))],
        "ok",
    ),
    "tool_failed": lambda d, a: (
        f"Tool {_d(d, 'tool')} failed",
        [("error", d.get("error"))],
        "bad",
    ),
    "tool_denied": lambda d, a: (f"Tool {_d(d, 'tool')} denied: {_d(d, 'reason')}", [], "bad"),
    "input_requested": lambda d, a: (
        f"Tool {_d(d, 'tool')} asks for input",
        [("prompt", _d(d, "prompt", ""))],
        "warn",
    ),
    "tool_uncertain": lambda d, a: (
        f"Outcome of {_d(d, 'tool')} unknown after {_d(d, 'attempts')} attempt(s); "
        "a person must resolve it",
        [],
        "bad",
    ),
    "tool_replayed": lambda d, a: (
        f"Tool {_d(d, 'tool')} replayed ({_d(d, 'policy')})",
        [],
        "warn",
    ),
    "ticket_expired": lambda d, a: (
        f"Ticket {_d(d, 'ticket_id')} expired; action: {_d(d, 'action')}",
        [],
        "bad",
    ),
    "ticket_voided": lambda d, a: (f"Ticket {_d(d, 'ticket_id')} voided", [], "muted"),
    "run_awaiting": lambda d, a: ("Waiting for people", [], "warn"),
    "run_ready": lambda d, a: ("All decisions are in; ready to continue", [], "info"),
    "run_done": lambda d, a: ("Done", [("answer", _d(d, "text", ""))], "ok"),
    "run_failed": lambda d, a: ("Failed", [("error", _d(d, "error", ""))], "bad"),
    "run_paused": lambda d, a: ("Paused", [], "warn"),
    "run_resumed": lambda d, a: ("Resumed", [], "info"),
    "run_cancelled": lambda d, a: (f"Cancelled: {_d(d, 'reason', '')}", [], "bad"),
    "pause_requested": lambda d, a: ("Pause requested", [], "warn"),
    "cancel_requested": lambda d, a: ("Cancel requested", [], "warn"),
    "child_started": lambda d, a: (
        f"Handed task {_d(d, 'task_key')} to the sub-agent {_d(d, 'agent')} "
        f"(run {_d(d, 'child_run_id')})",
        [],
        "info",
    ),
    "child_reattached": lambda d, a: (
        f"Task {_d(d, 'task_key')} is the sub-agent run {_d(d, 'child_run_id')} "
        f"({_d(d, 'status')}); no new run started",
        [],
        "muted",
    ),
    "child_finished": lambda d, a: (
        f"Sub-agent {_d(d, 'agent')} {_d(d, 'status')} (task {_d(d, 'task_key')})",
        [("error", d.get("error", ""))],
        "ok" if d.get("status") == "done" else "bad",
    ),
}


def timeline(events: list[dict[str, Any]]) -> list[TimelineItem]:
    """Turn flight-recorder events (as `runtime.Runtime.events` gives them) into items."""
    items = []
    for event in events:
        data = event.get("data") or {}
        kind = str(event.get("kind"))
        actor = event.get("actor")
        describe = _SIMPLE.get(kind)
        if describe is None:
            title, raw_details, tone = kind.replace("_", " ").capitalize(), [("data", data)], "info"
        else:
            title, raw_details, tone = describe(data, actor)
        items.append(
            TimelineItem(
                at=str(event.get("at", "")),
                kind=kind,
                title=title,
                actor=actor,
                details=[(label, pretty(value)) for label, value in raw_details if value != ""],
                tone=tone,
            )
        )
    return items


# -- calls, one card each ------------------------------------------------------------------


@dataclass(slots=True)
class CallSummary:
    """One tool call of a run as its card on the run page shows it, once nobody needs to
    decide it any more.

    Attributes:
        call_id: The call.
        tool: The tool.
        arguments: Its arguments as shown (secret ones masked), pretty and cut.
        proposed_at: When the model asked for it (ISO).
        outcome: How it was let through or stopped: who decided, or what allowed it
            without asking (the tool's permission or rule, or a standing grant).
        decided_by: Who decided it, if a person did.
        decided_at: When it was decided (ISO), if it was.
        reason: The reason given with the decision.
        changed: For an allow with changes, what changed.
        state: ``proposed``, ``waiting``, ``allowed``, ``running``, ``completed``,
            ``failed``, ``denied``, ``uncertain``, ``expired`` or ``withdrawn``.
        result: The result or error, pretty and cut (an image's data left out).
        images: ``data:`` URLs of the result's images (PNG, JPEG, GIF or WebP), shown
            under it.
        tone: ``ok``, ``bad``, ``warn``, ``info`` or ``muted`` (colour only).
    """

    call_id: str
    tool: str
    arguments: str
    proposed_at: str
    outcome: str = ""
    decided_by: str | None = None
    decided_at: str | None = None
    reason: str | None = None
    changed: str | None = None
    state: str = "proposed"
    result: str | None = None
    images: tuple[str, ...] = ()
    tone: str = "info"
    _rule: str | None = field(default=None, repr=False)

    @property
    def waiting(self) -> bool:
        """Whether it still waits for a person (its card with buttons shows it)."""
        return self.state == "waiting"


MAX_RESULT_SHOWN = 1000
SHOWN_IMAGE_TYPES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})


def shown_result(value: Any) -> tuple[str, tuple[str, ...]]:
    """A tool result as the run page shows it: the text (each image block's data replaced
    by its size) and the images as ``data:`` URLs (an MCP tool's result may hold
    ``{"type": "image", "mimeType": ..., "data": <base64>}`` blocks)."""
    if not isinstance(value, list):
        return pretty(value, MAX_RESULT_SHOWN), ()
    images: list[str] = []
    shown: list[Any] = []
    for block in value:
        if (
            isinstance(block, dict)
            and block.get("type") == "image"
            and isinstance(block.get("data"), str)
        ):
            data = block["data"]
            size = max(1, round(len(data) * 3 / 4 / 1024))
            mime = str(block.get("mimeType"))
            if mime in SHOWN_IMAGE_TYPES:
                images.append(f"data:{mime};base64,{data}")
                block = {**block, "data": f"<image {len(images)}, {size} KB, shown below>"}
            else:
                block = {**block, "data": f"<{size} KB, not shown>"}
        shown.append(block)
    return pretty(shown, MAX_RESULT_SHOWN), tuple(images)


_VERBS = {"allow": "Allowed", "deny": "Denied", "input": "Answered", "resolve": "Resolved"}


def _decided_words(d: dict[str, Any], actor: str | None) -> str:
    who = d.get("actor_name") or d.get("actor") or actor or "someone"
    decision = str(d.get("decision") or "decided")
    verb = _VERBS.get(decision, decision.capitalize())
    edit = d.get("edit")
    if decision == "allow" and isinstance(edit, dict) and edit.get("summary"):
        verb = "Allowed with changes"
    text = f"{verb} by {who}"
    if d.get("platform"):
        text += f" via {d['platform']}"
    grant = d.get("grant")
    if isinstance(grant, dict):
        if d.get("by_grant"):
            text += f", with the standing grant {_d(grant, 'grant_id')} that {who} gave"
        else:
            text += f", and {_granted(grant)}"
    return text


def calls(events: list[dict[str, Any]]) -> list[CallSummary]:
    """Each tool call of a run, in the order the model asked for them, as the flight
    recorder tells it (see `CallSummary`)."""
    found: dict[str, CallSummary] = {}
    by_ticket: dict[str, CallSummary] = {}
    for event in events:
        data = event.get("data") or {}
        kind = str(event.get("kind"))
        at = str(event.get("at", ""))
        call_id = data.get("call_id")
        summary = found.get(call_id) if isinstance(call_id, str) else None
        match kind:
            case "tool_proposed" if isinstance(call_id, str):
                summary = CallSummary(
                    call_id=call_id,
                    tool=str(_d(data, "tool")),
                    arguments=pretty(data.get("args", {})),
                    proposed_at=at,
                    _rule=data.get("rule"),
                )
                if data.get("permission") == "allow":
                    allowed_by = data.get("rule") or "its permission (allow)"
                    summary.outcome = f"Ran without asking: allowed by the tool's {allowed_by}"
                    summary.state, summary.tone = "allowed", "ok"
                found[call_id] = summary
            case "grant_applied" if summary is not None:
                summary.outcome = (
                    f"Ran without asking: allowed by the standing grant "
                    f"{_d(data, 'grant_id')} (given by {_d(data, 'granted_by')})"
                )
                summary.state, summary.tone = "allowed", "ok"
            case "ticket_opened":
                target = data.get("target") or {}
                opened = found.get(str(target.get("call_id")))
                if opened is not None:
                    opened.state = "waiting"
                    opened.outcome = (
                        f"Waiting for a decision; who may decide: {_d(data, 'who_may_decide')}"
                    )
                    opened.tone = "warn"
                    by_ticket[str(data.get("ticket_id"))] = opened
            case "ticket_decided":
                decided = by_ticket.get(str(data.get("ticket_id")))
                if decided is not None:
                    actor = event.get("actor")
                    decided.outcome = _decided_words(data, actor)
                    decided.decided_by = data.get("actor_name") or data.get("actor") or actor
                    decided.decided_at = data.get("decided_at") or at
                    decided.reason = data.get("reason")
                    edit = data.get("edit")
                    if isinstance(edit, dict) and edit.get("summary"):
                        decided.changed = str(edit["summary"])
                    denied = data.get("decision") in ("deny", "abort")
                    decided.state = "denied" if denied else "allowed"
                    decided.tone = "bad" if denied else "ok"
            case "ticket_expired":
                expired = by_ticket.get(str(data.get("ticket_id")))
                if expired is not None:
                    expired.state = "expired"
                    expired.outcome = (
                        f"Not decided in time; the ticket expired ({_d(data, 'action')})"
                    )
                    expired.decided_at = at
                    expired.tone = "bad"
            case "ticket_voided":
                voided = by_ticket.get(str(data.get("ticket_id")))
                if voided is not None and voided.state == "waiting":
                    voided.state = "withdrawn"
                    voided.outcome = "Withdrawn before anyone decided (the run was cancelled)"
                    voided.tone = "muted"
            case "tool_dispatched" if summary is not None:
                summary.state = "running"
            case "tool_completed" if summary is not None:
                summary.state = "completed"
                summary.result, summary.images = shown_result(data.get("result"))
            case "tool_failed" if summary is not None:
                summary.state = "failed"
                summary.result = pretty(data.get("error"), MAX_RESULT_SHOWN)
                summary.tone = "bad"
            case "tool_denied" if summary is not None:
                summary.state = "denied"
                if not summary.outcome or summary.outcome.startswith("Waiting"):
                    summary.outcome = f"Refused: {_d(data, 'reason')}"
                    if summary._rule:
                        summary.outcome += f" ({summary._rule})"
                summary.tone = "bad"
            case "tool_uncertain" if summary is not None:
                summary.state = "uncertain"
                summary.tone = "bad"
            case _:
                pass
    return list(found.values())
