"""Approve with edits: an approver changes a call's arguments before allowing it.

An ``Allow(args={...})`` answer to a `ToolPermission` ticket carries the changes, merged
over the call's arguments: an argument it does not name keeps its value. Before anything
changes the edit is checked (`check_edit`, part of the one validation every decision
passes, on every edge alike):

- secret arguments are never shown to an editor and never changed: one given as its
  mask is left as it is, one given as anything else is refused first, before any other
  check and with the same refusal whatever the value (so a refusal tells nothing about
  the secret) — `NotEditable`;
- the tool must allow edits (``editable``) and every changed argument must be one it
  lets change — `NotEditable`;
- the merged arguments must fit the tool's argument schema — `InvalidEdit`, with one
  ``{"path", "message"}`` per problem;
- the tool's permission rule runs again on them: ``deny`` refuses the edit
  (`EditDenied`); ``ask`` and ``allow`` keep this approval.

Once applied the call runs with the changed arguments. The decision records what changed
(``amount 249.0 → 200.0``), who changed it and the digests of the arguments before and
after (`args_digest`); the flight recorder, the card and the console show it; and the
model reads `model_note` in front of the call's result, since a provider transcript
keeps the call exactly as the model asked for it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from runtime.domain.agent import Agent
from runtime.domain.errors import EditDenied, InvalidEdit, NotEditable
from runtime.domain.forms import SchemaField, schema_fields
from runtime.domain.tickets import ResumeTicket, ToolPermission
from runtime.domain.tools import MASK, Permission, Tool

MAX_SHOWN = 60
"""Characters of one value in a change summary (longer ones are cut)."""


def args_digest(args: Mapping[str, Any]) -> str:
    """A digest of a call's arguments (``sha256:<hex>``), to bind a decision to them.

    Canonical JSON (sorted keys, no spaces), so equal arguments always give one digest.
    """
    blob = json.dumps(
        dict(args), sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str
    )
    return "sha256:" + hashlib.sha256(blob.encode()).hexdigest()


def shown_value(value: Any) -> str:
    """A value as a change summary writes it: JSON, cut to `MAX_SHOWN` characters."""
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= MAX_SHOWN else text[: MAX_SHOWN - 1] + "…"


@dataclass(frozen=True, slots=True)
class Change:
    """One argument an approver changed.

    Attributes:
        name: The argument.
        before: Its value as the model asked for it.
        after: Its value now.
    """

    name: str
    before: Any
    after: Any

    @property
    def text(self) -> str:
        """``amount 249.0 → 200.0``."""
        return f"{self.name} {shown_value(self.before)} → {shown_value(self.after)}"


@dataclass(frozen=True, slots=True)
class Edit:
    """A checked edit: the arguments the call will run with and what changed.

    Attributes:
        args: The call's arguments after the edit (validated; secret ones included).
        changes: What changed, in the schema's order (empty: nothing did).
        digest: `args_digest` of `args`.
        previous_digest: `args_digest` of the arguments the model asked for.
    """

    args: dict[str, Any]
    changes: tuple[Change, ...]
    digest: str
    previous_digest: str

    @property
    def summary(self) -> str:
        """What changed, e.g. ``amount 249.0 → 200.0; memo "x" → "y"``."""
        return "; ".join(change.text for change in self.changes)

    def record(self, by: str | None, shown_args: Mapping[str, Any]) -> dict[str, Any]:
        """The edit as the call, the flight recorder and notifications keep it.

        Args:
            by: Who changed the arguments (a display name or id).
            shown_args: The changed arguments as a person may see them (secrets masked).
        """
        return {
            "by": by,
            "summary": self.summary,
            "changes": [
                {"name": c.name, "before": c.before, "after": c.after} for c in self.changes
            ],
            "args": dict(shown_args),
            "digest": self.digest,
            "previous_digest": self.previous_digest,
        }


def _problem(name: str, message: str) -> dict[str, Any]:
    return {"path": name, "message": message}


def check_edit(tool: Tool | None, target: ToolPermission, given: Mapping[str, Any]) -> Edit:
    """Check an approver's changes to the call `target` waits on; nothing changes here.

    Args:
        tool: The tool as loaded now.
        target: The permission request (its ``args`` are the call's arguments).
        given: The changes: argument names and their new values.

    Returns:
        The edit (its ``changes`` are empty when nothing really changed).

    Raises:
        NotEditable: The tool forbids edits, or an argument may not be changed.
        InvalidEdit: The merged arguments do not fit the tool's schema.
        EditDenied: The tool's permission rule denies the call with them.
    """
    original = dict(target.args)
    if tool is None:
        raise NotEditable(f"tool {target.tool!r} is not loaded, so its call cannot be edited")
    secret = tool.secret
    # A secret argument is never shown to an editor: its mask sent back by a form means
    # "keep it". Any other value is refused before anything looks at it, so the answer
    # is the same whether it guesses the secret right or wrong.
    guessed = sorted(name for name, value in given.items() if name in secret and value != MASK)
    if guessed:
        raise NotEditable(
            f"{tool.name}: {', '.join(repr(n) for n in guessed)} may not be changed "
            "(secret: it is never shown or changed; send it as its mask or leave it out)",
            [_problem(name, "secret: it is never shown or changed") for name in guessed],
        )
    kept = {name: value for name, value in given.items() if name not in secret}
    touched = [
        name for name, value in kept.items() if name not in original or original[name] != value
    ]
    if touched and tool.editable is False:
        raise NotEditable(
            f"{tool.name} does not allow its arguments to be changed; allow or deny it as it is",
            [_problem(name, "this tool's arguments cannot be changed") for name in touched],
        )
    properties = tool.parameters.get("properties")
    known = set(properties) if isinstance(properties, dict) else None
    unknown = [name for name in touched if known is not None and name not in known]
    if unknown:
        raise InvalidEdit(
            f"{tool.name} has no argument {', '.join(repr(n) for n in unknown)}",
            [_problem(name, "no such argument") for name in unknown],
        )
    allowed = set(tool.editable_for(original))
    refused = [name for name in touched if name not in allowed]
    if refused:
        raise NotEditable(
            f"{tool.name}: {', '.join(repr(n) for n in refused)} may not be changed "
            f"(changeable: {', '.join(sorted(allowed)) or 'none'})",
            [_problem(name, "may not be changed") for name in refused],
        )
    parsed, errors = tool.check_arguments({**original, **kept})
    if parsed is None:
        listed = "; ".join(f"{e['path'] or 'arguments'}: {e['message']}" for e in errors)
        raise InvalidEdit(f"the changed arguments do not fit {tool.name}: {listed}", errors)
    try:
        permission = tool.permission_for(parsed)
    except Exception as exc:  # a rule that cannot judge the new arguments refuses them
        # The rule's own text may quote any argument, secret ones too.
        what = type(exc).__name__ if secret else f"{type(exc).__name__}: {exc}"
        raise EditDenied(
            f"the permission rule of {tool.name} failed on the changed arguments: {what}"
        ) from None
    if permission is Permission.DENY:
        raise EditDenied(
            f"the permission rule of {tool.name} denies the call with the changed arguments; "
            "nothing was changed"
        )
    order = list(properties) if isinstance(properties, dict) else sorted(parsed)
    names = [n for n in order if n in parsed] + [n for n in parsed if n not in order]
    changes = tuple(
        Change(name, original.get(name), parsed[name])
        for name in names
        if name not in original or original[name] != parsed[name]
    )
    return Edit(
        args=parsed,
        changes=changes,
        digest=args_digest(parsed),
        previous_digest=args_digest(original),
    )


def model_note(edit: Mapping[str, Any]) -> str:
    """What the model reads in front of an edited call's result.

    A provider transcript keeps the tool call as the model made it, so the result says
    that the call ran with other arguments, which, and who changed them.
    """
    who = edit.get("by") or "an approver"
    summary = edit.get("summary") or "its arguments"
    ran = json.dumps(edit.get("args") or {}, ensure_ascii=False, default=str)
    return (
        f"[Note: before allowing this call, {who} changed its arguments ({summary}); "
        f"it ran with {ran}.]"
    )


@dataclass(frozen=True, slots=True)
class EditForm:
    """What an edge needs to offer "allow with edits" for one ticket.

    Attributes:
        tool: The tool's name.
        fields: The arguments that may change, as form fields (schema order). Every one
            is optional: a field left empty keeps its value.
        values: Their current values (never a secret one).
    """

    tool: str
    fields: tuple[SchemaField, ...]
    values: dict[str, Any]


def edit_form(tool: Tool | None, target: ToolPermission) -> EditForm | None:
    """The form for editing the call `target` waits on; None when nothing may change."""
    if tool is None:
        return None
    allowed = tool.editable_for(target.args)
    if not allowed:
        return None
    fields = tuple(
        replace(item, required=False)
        for item in schema_fields(tool.parameters_for(target.args))
        if item.name in allowed
    )
    if not fields:
        return None
    values = {f.name: target.args[f.name] for f in fields if f.name in target.args}
    return EditForm(tool.name, fields, values)


def ticket_edit_form(agents: Mapping[str, Agent], ticket: ResumeTicket) -> EditForm | None:
    """The edit form of a ticket, with its tool as loaded now (None: not editable, or
    not a permission request)."""
    target = ticket.target
    if not isinstance(target, ToolPermission):
        return None
    agent = agents.get(ticket.agent)
    return edit_form(agent.tools.get(target.tool) if agent is not None else None, target)


__all__ = [
    "Change",
    "Edit",
    "EditForm",
    "args_digest",
    "check_edit",
    "edit_form",
    "model_note",
    "ticket_edit_form",
]
