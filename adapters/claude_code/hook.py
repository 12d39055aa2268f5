"""Claude Code's ``PreToolUse`` hook, as an external approval: what the hook receives,
the approval request it becomes, and the answer Claude Code reads.

Claude Code sends a hook (a command on stdin, or an HTTP hook as the POST body)::

    {"session_id": "...", "transcript_path": "...", "cwd": "...",
     "permission_mode": "default", "hook_event_name": "PreToolUse",
     "tool_name": "Bash", "tool_input": {"command": "git push"}, "tool_use_id": "toolu_..."}

and reads back::

    {"hookSpecificOutput": {"hookEventName": "PreToolUse",
     "permissionDecision": "allow" | "deny" | "ask" | "defer",
     "permissionDecisionReason": "...", "updatedInput": {...}}}

The call becomes an approval of an external agent (``claude-code`` unless told
otherwise): the tool is ``tool_name``, the arguments ``tool_input``, the session Claude's
``session_id`` (so a grant for the rest of the session covers its later calls), and the
idempotency key is derived from the agent, the session and ``tool_use_id``, so a retried
or resumed hook gets the same approval, never a second card.

The HTTP hook route of ``signoff serve`` (`adapters.claude_code.route`) uses these
functions; the ``signoff hook claude-code`` command checks its input with them and posts it
to that route.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from runtime import ApprovalRequest

DEFAULT_AGENT = "claude-code"
"""The agent a Claude Code call is asked under unless told otherwise."""
DEFAULT_TIMEOUT_SECONDS = 540.0
"""How long the hook waits for a decision: below Claude Code's default hook timeout (600 s)."""
EVENT = "PreToolUse"

PermissionDecision = Literal["allow", "deny", "ask", "defer"]
"""What the hook tells Claude Code: run the call, refuse it, ask in Claude Code's own
prompt, or stop a headless run so it can be resumed later."""
OnTimeout = Literal["defer", "ask", "deny"]
"""The answer when nobody decided in time: ``defer`` keeps the ticket open; ``ask`` and
``deny`` withdraw the request (`runtime.Runtime.withdraw_approval`)."""
ON_TIMEOUT: tuple[OnTimeout, ...] = ("defer", "ask", "deny")
MAX_NAME = 200
"""Longest session id, tool name or tool use id (as the approvals API takes names)."""


class HookInputError(ValueError):
    """What Claude Code sent is not a ``PreToolUse`` hook input; nothing was asked."""


@dataclass(frozen=True)
class PreToolUse:
    """One tool call Claude Code is about to make.

    Attributes:
        session_id: Claude Code's session (``claude --resume <session_id>``).
        tool_name: The tool (``Bash``, ``Read``, ``mcp__server__tool`` ...).
        tool_input: Its arguments.
        tool_use_id: The call's id; the same when the hook is asked again for it.
        cwd: The working directory of the session.
        permission_mode: Claude Code's permission mode (``default``, ``plan`` ...).
        transcript_path: Where the session's transcript is.
    """

    session_id: str
    tool_name: str
    tool_input: dict[str, Any]
    tool_use_id: str | None = None
    cwd: str | None = None
    permission_mode: str | None = None
    transcript_path: str | None = None


def _name(data: Mapping[str, Any], field: str, *, required: bool) -> str | None:
    value = data.get(field)
    if value is None and not required:
        return None
    if not isinstance(value, str) or not value.strip():
        raise HookInputError(f"{field}: a non-empty string is required")
    if len(value) > MAX_NAME:
        raise HookInputError(f"{field}: longer than {MAX_NAME} characters")
    return value


def _text(data: Mapping[str, Any], field: str) -> str | None:
    value = data.get(field)
    if value is None:
        return None
    if not isinstance(value, str):
        raise HookInputError(f"{field}: a string is required")
    return value


def read_pre_tool_use(raw: bytes | str | Mapping[str, Any]) -> PreToolUse:
    """The hook input Claude Code sent, checked.

    Args:
        raw: The JSON text (a command's stdin, an HTTP hook's body) or its decoded object.

    Raises:
        HookInputError: Not JSON, not an object, another hook event, or a field missing or
            of the wrong type; the message names it.
    """
    if isinstance(raw, bytes | str):
        if not raw.strip():
            raise HookInputError("no hook input: expected Claude Code's PreToolUse JSON")
        try:
            data = json.loads(raw)
        except (ValueError, UnicodeDecodeError) as exc:
            raise HookInputError(f"the hook input is not JSON: {exc}") from None
    else:
        data = raw
    if not isinstance(data, Mapping):
        raise HookInputError("the hook input must be a JSON object")
    event = data.get("hook_event_name")
    if event != EVENT:
        raise HookInputError(
            f"hook_event_name: this hook answers {EVENT} only, not {event!r} "
            '(register it under "PreToolUse" in the settings)'
        )
    tool_input = data.get("tool_input")
    if not isinstance(tool_input, Mapping):
        raise HookInputError("tool_input: a JSON object is required")
    return PreToolUse(
        session_id=_name(data, "session_id", required=True) or "",
        tool_name=_name(data, "tool_name", required=True) or "",
        tool_input=dict(tool_input),
        tool_use_id=_name(data, "tool_use_id", required=False),
        cwd=_text(data, "cwd"),
        permission_mode=_text(data, "permission_mode"),
        transcript_path=_text(data, "transcript_path"),
    )


def idempotency_key(call: PreToolUse, agent: str = DEFAULT_AGENT) -> str | None:
    """The idempotency key of `call`: the same for every hook asked about the same tool use
    of the same session (None without a ``tool_use_id``: each hook then asks anew)."""
    if call.tool_use_id is None:
        return None
    parts = json.dumps(["claude-code", agent, call.session_id, call.tool_use_id])
    return hashlib.sha256(parts.encode("utf-8")).hexdigest()


def approval_request(
    call: PreToolUse,
    *,
    agent: str = DEFAULT_AGENT,
    on_behalf_of: str | None = None,
    resume: Mapping[str, Any] | None = None,
) -> ApprovalRequest:
    """The approval request of `call` under `agent`.

    The card's description is the tool's own ``description`` argument when it has one
    (Claude Code gives one for ``Bash``): only what the call itself holds, so asking again
    for the same tool use is the same request. `resume` is where the session is resumed
    if the hook defers (`adapters.claude_code.resume.destination`).
    """
    described = call.tool_input.get("description")
    return ApprovalRequest(
        agent=agent,
        tool=call.tool_name,
        arguments=dict(call.tool_input),
        description=described if isinstance(described, str) and described.strip() else None,
        session_id=call.session_id,
        on_behalf_of=on_behalf_of,
        resume=dict(resume) if resume is not None else None,
    )


class Answered(Protocol):
    """An approval as the hook last read it: the server's `runtime.Approval` or the
    client's `adapters.client.Decision`, which share these names."""

    @property
    def approval_id(self) -> str: ...
    @property
    def status(self) -> str: ...
    @property
    def arguments(self) -> dict[str, Any]: ...
    @property
    def requested_arguments(self) -> dict[str, Any]: ...
    @property
    def reason(self) -> str | None: ...
    @property
    def basis(self) -> str | None: ...
    @property
    def decided_by(self) -> str | None: ...
    @property
    def ticket_id(self) -> str | None: ...


def answer(
    decision: PermissionDecision, reason: str, updated_input: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The JSON Claude Code reads from a ``PreToolUse`` hook."""
    output: dict[str, Any] = {
        "hookEventName": EVENT,
        "permissionDecision": decision,
        "permissionDecisionReason": reason,
    }
    if updated_input is not None:
        output["updatedInput"] = dict(updated_input)
    return {"hookSpecificOutput": output}


def _by(approval: Answered) -> str:
    return f" by {approval.decided_by}" if approval.decided_by else ""


def hook_answer(
    approval: Answered,
    *,
    on_timeout: OnTimeout = "ask",
    waited: float | None = None,
    resumed: bool = False,
) -> dict[str, Any]:
    """Claude Code's answer for `approval` as it stands.

    - allowed: ``allow``, with ``updatedInput`` when a person changed the arguments;
    - denied: ``deny`` with why (the approver's reason, the rule, or the deadline);
    - still pending: `on_timeout`: ``defer`` names the ticket that stays open (and says
      signoff resumes the session when `resumed`); ``ask`` and ``deny`` say the request
      was withdrawn.
    """
    ref = f"approval {approval.approval_id}"
    match approval.status:
        case "allowed":
            edited = approval.arguments != approval.requested_arguments
            if edited:
                why = f"Allowed in signoff with changed arguments{_by(approval)} ({ref})"
                return answer("allow", why, approval.arguments)
            if approval.basis == "decision":
                return answer("allow", f"Allowed in signoff{_by(approval)} ({ref})")
            detail = f": {approval.reason}" if approval.reason else ""
            return answer("allow", f"Allowed by signoff's rules{detail} ({ref})")
        case "denied":
            if approval.basis == "expiry":
                why = "Denied by signoff: nobody decided before the deadline"
            elif approval.basis == "decision":
                reason = f": {approval.reason}" if approval.reason else ""
                why = f"Denied in signoff{_by(approval)}{reason}"
            else:
                reason = f": {approval.reason}" if approval.reason else ""
                why = f"Denied by signoff{reason}"
            return answer("deny", f"{why} ({ref})")
        case _:
            within = f" within {waited:g} s" if waited is not None else ""
            if on_timeout != "defer":
                why = f"No decision in signoff{within}; the request was withdrawn ({ref})"
                return answer(on_timeout, why)
            ticket = f"ticket {approval.ticket_id}, " if approval.ticket_id else ""
            then = (
                "signoff resumes this session once someone decides"
                if resumed
                else "it stays open for a person to decide"
            )
            return answer("defer", f"No decision in signoff{within}; {then} ({ticket}{ref})")


def unreachable_answer(why: str) -> dict[str, Any]:
    """The answer when signoff cannot be reached: ``ask``, so Claude Code falls back to
    its own permission prompt (nothing runs without someone's yes)."""
    return answer("ask", f"signoff could not be reached ({why}); asking here instead")


def refused_answer(why: str) -> dict[str, Any]:
    """The answer when signoff refused the request (a bad token, an agent it does not
    accept ...): ``deny`` with signoff's reason, so a misconfiguration is seen."""
    return answer("deny", f"signoff refused to ask about this call: {why}")


__all__ = [
    "DEFAULT_AGENT",
    "DEFAULT_TIMEOUT_SECONDS",
    "ON_TIMEOUT",
    "Answered",
    "HookInputError",
    "OnTimeout",
    "PermissionDecision",
    "PreToolUse",
    "answer",
    "approval_request",
    "hook_answer",
    "idempotency_key",
    "read_pre_tool_use",
    "refused_answer",
    "unreachable_answer",
]
