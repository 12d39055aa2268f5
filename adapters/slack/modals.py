"""Slack modals: deny with a reason, typed input from a JSON schema, an uncertain call's
result, and a call's arguments changed before allowing it.

Every modal carries the ticket id, the correlation token and where its card is (channel
and thread) in ``private_metadata`` (set by us, stored by Slack, returned with the signed
``view_submission``) and nothing else.

Typed input: each property of the ticket's object schema becomes one input block, in the
schema's order: strings, numbers and integers a ``plain_text_input``, enums and booleans
a ``static_select`` (also behind a local ``$ref`` or a nullable ``anyOf``); anything else
a multiline input that takes JSON. What a person typed is converted to JSON types here;
whether it fits the schema is decided by the runtime's one validation
(`runtime.InvalidAnswer`), whose field errors go back with ``response_action: errors``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Literal

from adapters.slack.blocks import (
    MAX_MODAL_TITLE,
    MAX_SECTION_TEXT,
    Block,
    TicketRef,
    code_block,
    escape,
    mrkdwn,
    plain,
    truncate,
)
from runtime import EditForm
from runtime.edges import (
    FieldView,
    NonFiniteNumber,
    SchemaField,
    loads_strict,
    read_typed,
    schema_fields,
)

VIEW_DENY_REASON = "signoff.deny_reason"
VIEW_INPUT = "signoff.input"
VIEW_RESOLVE = "signoff.resolve"
VIEW_GRANT_THREAD = "signoff.grant_thread"
VIEW_EDIT = "signoff.edit"
VIEWS = (VIEW_DENY_REASON, VIEW_INPUT, VIEW_RESOLVE, VIEW_GRANT_THREAD, VIEW_EDIT)
"""Every ``callback_id`` of a signoff modal."""

REASON_BLOCK = "reason"
RESULT_BLOCK = "result"
HOURS_BLOCK = "hours"
DEFAULT_GRANT_HOURS = "8"
VALUE_ACTION = "value"
MAX_LABEL = 2000
MAX_HINT = 2000
MAX_PLACEHOLDER = 150
MAX_INPUT_LENGTH = 3000
MAX_OPTIONS = 100
MAX_OPTION_TEXT = 75
MAX_OPTION_VALUE = 150
MAX_INPUT_BLOCKS = 45
FIELD_BLOCK_PREFIX = "field_"

FieldKind = Literal["text", "number", "integer", "boolean", "select", "json"]


@dataclass(frozen=True, slots=True)
class Field(FieldView):
    """One input of a generated form.

    Attributes:
        block_id: The input block's id (``field_<index>``: property names can be long).
        kind: The element to render.
    """

    block_id: str = ""
    kind: FieldKind = "text"


def _title(text: str) -> dict[str, Any]:
    return plain(text, MAX_MODAL_TITLE)


def _metadata(ref: TicketRef) -> str:
    data = {"t": ref.ticket_id, "c": ref.correlation}
    if ref.channel:
        data["ch"] = ref.channel
    if ref.thread_ts:
        data["th"] = ref.thread_ts
    return json.dumps(data, separators=(",", ":"))


def _modal(
    callback_id: str, title: str, submit: str, ref: TicketRef, blocks: list[Block]
) -> dict[str, Any]:
    return {
        "type": "modal",
        "callback_id": callback_id,
        "title": _title(title),
        "submit": _title(submit),
        "close": _title("Cancel"),
        "private_metadata": _metadata(ref),
        "blocks": blocks[:100],
    }


def _intro(text: str) -> Block:
    return {"type": "section", "text": mrkdwn(text)}


# -- deny with reason ------------------------------------------------------------------


def deny_reason_modal(ref: TicketRef, tool: str) -> dict[str, Any]:
    """The modal behind "Deny with reason"; the reason is what the model will see."""
    return _modal(
        VIEW_DENY_REASON,
        "Deny with reason",
        "Deny",
        ref,
        [
            _intro(f"Deny `{escape(tool)}`. The agent is told your reason."),
            {
                "type": "input",
                "block_id": REASON_BLOCK,
                "label": plain("Reason", MAX_LABEL),
                "element": {
                    "type": "plain_text_input",
                    "action_id": VALUE_ACTION,
                    "multiline": True,
                    "max_length": MAX_INPUT_LENGTH,
                },
            },
        ],
    )


# -- uncertain: record the verified result ---------------------------------------------


def resolve_modal(ref: TicketRef, tool: str, args: Mapping[str, Any]) -> dict[str, Any]:
    """The modal that records what an uncertain call really did."""
    return _modal(
        VIEW_RESOLVE,
        "Record verified result",
        "Record",
        ref,
        [
            _intro(
                f"What did `{escape(tool)}` really do? The agent continues with this as the "
                "call's result; the tool is not run again."
            ),
            {"type": "section", "text": mrkdwn(code_block(dict(args)))},
            {
                "type": "input",
                "block_id": RESULT_BLOCK,
                "label": plain("Verified result (JSON or plain text)", MAX_LABEL),
                "element": {
                    "type": "plain_text_input",
                    "action_id": VALUE_ACTION,
                    "multiline": True,
                    "max_length": MAX_INPUT_LENGTH,
                },
            },
        ],
    )


# -- allow in this thread for some hours ----------------------------------------------


def grant_thread_modal(ref: TicketRef, tool: str) -> dict[str, Any]:
    """The modal behind "Allow in this thread…": allow this call, and the tool's later
    calls in this thread (runs of the same requester) for the hours given."""
    return _modal(
        VIEW_GRANT_THREAD,
        "Allow in this thread",
        "Allow",
        ref,
        [
            _intro(
                f"Allow `{escape(tool)}` now, and let its later calls in this thread (the "
                "requester's runs) go without asking for the hours below. Anyone who may see "
                "the grant can revoke it from the console or with `signoff grants revoke`."
            ),
            {
                "type": "input",
                "block_id": HOURS_BLOCK,
                "label": plain("For how many hours", MAX_LABEL),
                "element": {
                    "type": "plain_text_input",
                    "action_id": VALUE_ACTION,
                    "initial_value": DEFAULT_GRANT_HOURS,
                    "max_length": 10,
                },
            },
        ],
    )


def read_hours(state: Mapping[str, Any], most: float) -> float | str:
    """The hours typed into the grant modal, or what is wrong with them."""
    text = submitted_text(state, HOURS_BLOCK).strip()
    try:
        hours = float(text)
    except ValueError:
        return "Enter a number of hours, e.g. 8 or 0.5."
    if not 0 < hours <= most:
        return f"Enter more than 0 and at most {most:g} hours."
    return hours


# -- typed input -----------------------------------------------------------------------


def _kind(item: SchemaField) -> tuple[FieldKind, tuple[Any, ...]]:
    match item.type:
        case "enum" if len(item.options) <= MAX_OPTIONS:
            return "select", item.options
        case "enum":
            # Too many options for a menu: typed as text (or JSON when not all strings).
            return ("text" if all(isinstance(o, str) for o in item.options) else "json"), ()
        case "string":
            return "text", ()
        case "boolean":
            return "boolean", (True, False)
        case "integer" | "number" | "json":
            return item.type, ()
    raise ValueError(f"unsupported field type {item.type}")


def form_fields(schema: Mapping[str, Any] | None) -> list[Field]:
    """The inputs for an object schema's properties, in the schema's order."""
    fields = []
    for index, item in enumerate(schema_fields(schema)[:MAX_INPUT_BLOCKS]):
        kind, options = _kind(item)
        typed = "string" if kind == "text" else item.type
        source = replace(item, type=typed, options=options)
        fields.append(Field(source, f"{FIELD_BLOCK_PREFIX}{index}", kind))
    return fields


def _option(value: Any) -> dict[str, Any]:
    if value is True:
        shown = "Yes"
    elif value is False:
        shown = "No"
    else:
        shown = value if isinstance(value, str) else json.dumps(value)
    encoded = json.dumps(value, separators=(",", ":"))
    return {"text": plain(shown, MAX_OPTION_TEXT), "value": encoded[:MAX_OPTION_VALUE]}


def _element(item: Field) -> dict[str, Any]:
    if item.kind in ("select", "boolean"):
        element: dict[str, Any] = {
            "type": "static_select",
            "action_id": VALUE_ACTION,
            "placeholder": plain("Choose…", MAX_PLACEHOLDER),
            "options": [_option(v) for v in item.options],
        }
        if item.default is not None and item.default in item.options:
            element["initial_option"] = _option(item.default)
        return element
    element = {
        "type": "plain_text_input",
        "action_id": VALUE_ACTION,
        "multiline": item.kind == "json",
        "max_length": MAX_INPUT_LENGTH,
    }
    if item.default is not None:
        shown = (
            json.dumps(item.default, indent=2)
            if item.kind == "json"
            else str(item.default)
            if not isinstance(item.default, str)
            else item.default
        )
        if len(shown) <= MAX_INPUT_LENGTH:
            element["initial_value"] = shown
    placeholder = {"integer": "A whole number", "number": "A number", "json": "JSON"}.get(item.kind)
    if placeholder:
        element["placeholder"] = plain(placeholder, MAX_PLACEHOLDER)
    return element


def input_modal(
    ref: TicketRef, tool: str, prompt: str, schema: Mapping[str, Any] | None
) -> dict[str, Any]:
    """The form for a typed-input request, built from its JSON schema."""
    blocks: list[Block] = [_intro(truncate(escape(prompt), MAX_SECTION_TEXT))]
    fields = form_fields(schema)
    for item in fields:
        block: Block = {
            "type": "input",
            "block_id": item.block_id,
            "label": plain(item.label, MAX_LABEL),
            "element": _element(item),
            "optional": not item.required,
        }
        if item.description:
            block["hint"] = plain(item.description, MAX_HINT)
        blocks.append(block)
    if not fields:
        blocks.append(
            {
                "type": "input",
                "block_id": f"{FIELD_BLOCK_PREFIX}json",
                "label": plain("Answer (a JSON object)", MAX_LABEL),
                "element": {
                    "type": "plain_text_input",
                    "action_id": VALUE_ACTION,
                    "multiline": True,
                    "max_length": MAX_INPUT_LENGTH,
                },
            }
        )
    return _modal(VIEW_INPUT, truncate(f"Input: {tool}", MAX_MODAL_TITLE), "Submit", ref, blocks)


def _raw(state: Mapping[str, Any], block_id: str) -> Any:
    """The submitted value of a block's ``value`` element (text or selected option)."""
    block = state.get(block_id)
    if not isinstance(block, Mapping):
        return None
    element = block.get(VALUE_ACTION)
    if not isinstance(element, Mapping):
        return None
    if "selected_option" in element:
        option = element.get("selected_option")
        return option.get("value") if isinstance(option, Mapping) else None
    return element.get("value")


def submitted_text(state: Mapping[str, Any], block_id: str) -> str:
    """The text typed into a single-input modal's block (reason, result)."""
    value = _raw(state, block_id)
    return value if isinstance(value, str) else ""


def read_input(
    schema: Mapping[str, Any] | None, state: Mapping[str, Any]
) -> tuple[dict[str, Any], dict[str, str]]:
    """Convert a submitted input modal into answer data.

    Args:
        schema: The ticket's JSON schema.
        state: ``view.state.values`` of the submission.

    Returns:
        The answer data and conversion errors by block id (empty when all converted).
    """
    fields = form_fields(schema)
    if not fields:
        text = _raw(state, f"{FIELD_BLOCK_PREFIX}json")
        try:
            whole = loads_strict(text) if isinstance(text, str) else None
        except NonFiniteNumber:
            return {}, {f"{FIELD_BLOCK_PREFIX}json": "Numbers must be finite (no NaN or Infinity)."}
        except (ValueError, RecursionError):
            whole = None
        if not isinstance(whole, dict):
            return {}, {f"{FIELD_BLOCK_PREFIX}json": "Enter a JSON object."}
        return whole, {}
    texts = {}
    for item in fields:
        raw = _raw(state, item.block_id)
        texts[item.name] = raw if isinstance(raw, str) else None
    data, by_name = read_typed([item.source for item in fields], texts)
    blocks = {item.name: item.block_id for item in fields}
    return data, {blocks[name]: message for name, message in by_name.items()}


def field_errors(schema: Mapping[str, Any] | None, errors: list[dict[str, Any]]) -> dict[str, str]:
    """The runtime's validation errors (``path`` + ``message``) as errors by block id.

    An error not about one field (e.g. a missing required property reported at the
    root) is shown on the field it names, or else on the first input.
    """
    fields = form_fields(schema)
    by_name = {item.name: item.block_id for item in fields}
    first = fields[0].block_id if fields else f"{FIELD_BLOCK_PREFIX}json"
    shown: dict[str, str] = {}
    for error in errors:
        path = str(error.get("path") or "")
        message = truncate(str(error.get("message") or "invalid"), MAX_LABEL)
        head = path.split("/", 1)[0]
        block = by_name.get(head)
        if block is None:
            named = [name for name in by_name if f"'{name}'" in message]
            block = by_name[named[0]] if named else first
        shown.setdefault(block, message)
    return shown


# -- allow with changes ----------------------------------------------------------------


def edit_fields(form: EditForm) -> list[Field]:
    """The inputs of an edit modal: each editable argument, pre-filled with its value."""
    fields = []
    for index, item in enumerate(form.fields[:MAX_INPUT_BLOCKS]):
        kind, options = _kind(item)
        typed = "string" if kind == "text" else item.type
        current = form.values.get(item.name)
        source = replace(item, type=typed, options=options, default=current)
        fields.append(Field(source, f"{FIELD_BLOCK_PREFIX}{index}", kind))
    return fields


def edit_modal(ref: TicketRef, form: EditForm) -> dict[str, Any]:
    """The modal behind "Allow with changes…": the call's editable arguments, pre-filled.

    Secret arguments are never shown; a field left empty keeps its value.
    """
    blocks: list[Block] = [
        _intro(
            f"Change the arguments of `{escape(form.tool)}`, then allow it. A field left "
            "empty keeps its value; secret arguments are not shown and keep theirs. The "
            "agent is told what you changed."
        )
    ]
    for item in edit_fields(form):
        block: Block = {
            "type": "input",
            "block_id": item.block_id,
            "label": plain(item.label, MAX_LABEL),
            "element": _element(item),
            "optional": True,
        }
        if item.description:
            block["hint"] = plain(item.description, MAX_HINT)
        blocks.append(block)
    title = truncate(f"Change {form.tool}", MAX_MODAL_TITLE)
    return _modal(VIEW_EDIT, title, "Allow", ref, blocks)


def read_edit(form: EditForm, state: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    """The changed arguments of a submitted edit modal (empty fields are left out).

    Returns:
        The arguments and conversion errors by block id (empty when all converted).
    """
    fields = edit_fields(form)
    texts = {}
    for item in fields:
        raw = _raw(state, item.block_id)
        texts[item.name] = raw if isinstance(raw, str) else None
    data, by_name = read_typed([item.source for item in fields], texts)
    blocks = {item.name: item.block_id for item in fields}
    return data, {blocks[name]: message for name, message in by_name.items()}


def edit_errors(form: EditForm, errors: list[dict[str, Any]]) -> dict[str, str]:
    """The runtime's refusal of an edit (``path`` + ``message``) as errors by block id;
    an error about no field shown is put on the first one."""
    fields = edit_fields(form)
    by_name = {item.name: item.block_id for item in fields}
    first = fields[0].block_id if fields else f"{FIELD_BLOCK_PREFIX}0"
    shown: dict[str, str] = {}
    for error in errors:
        head = str(error.get("path") or "").split(".", 1)[0]
        message = truncate(str(error.get("message") or "invalid"), MAX_LABEL)
        shown.setdefault(by_name.get(head, first), message)
    return shown


# -- notices ---------------------------------------------------------------------------


def notice_view(title: str, text: str) -> dict[str, Any]:
    """A view that replaces a modal to say why its submission was refused."""
    return {
        "type": "modal",
        "title": _title(title),
        "close": _title("Close"),
        "blocks": [_intro(truncate(escape(text), MAX_SECTION_TEXT))],
    }
