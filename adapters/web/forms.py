"""HTML forms generated from a ticket's JSON schema, and the typed answers read back.

Only the shapes people type are rendered as inputs: strings, numbers, integers,
booleans and enums (also behind ``$ref`` / nullable ``anyOf``); anything else becomes a
JSON text area. What the form sends is converted to JSON types here; whether the data
fits the schema is decided by the runtime's one validation (`runtime.InvalidAnswer`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from runtime import EditForm
from runtime.edges import FieldType, FieldView, read_typed, schema_fields

FieldKind = Literal["text", "number", "integer", "checkbox", "select", "json"]
FIELD_PREFIX = "field."


@dataclass(frozen=True, slots=True)
class FormField(FieldView):
    """One input of a generated form.

    Attributes:
        kind: The input to render.
    """

    kind: FieldKind = "text"

    @property
    def input_name(self) -> str:
        """The HTML name of the input."""
        return FIELD_PREFIX + self.name

    def shown(self, value: Any) -> str:
        """A value as the input shows it."""
        if value is None:
            return ""
        if self.kind == "json":
            return (
                value if isinstance(value, str) else json.dumps(value, indent=2, ensure_ascii=False)
            )
        return str(value)

    def initial(self) -> str:
        """The pre-filled text (the default, if any)."""
        return self.shown(self.default)


@dataclass(slots=True)
class FormState:
    """What a person typed into one ticket's forms, and what was wrong with it.

    Attributes:
        values: Raw text per field (input forms), ``reason`` and ``result`` (others).
        errors: Messages per field name.
        general: Messages not about one field.
    """

    values: dict[str, str] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    general: list[str] = field(default_factory=list)


_KINDS: dict[FieldType, FieldKind] = {
    "string": "text",
    "integer": "integer",
    "number": "number",
    "boolean": "checkbox",
    "enum": "select",
    "json": "json",
}


def form_fields(schema: dict[str, Any] | None) -> list[FormField]:
    """The inputs for an object schema's properties, in the schema's order."""
    return [FormField(item, _KINDS[item.type]) for item in schema_fields(schema)]


def read_fields(fields: list[FormField], form: Any) -> tuple[dict[str, Any], FormState]:
    """Convert submitted text into JSON values; conversion problems go into the state.

    Args:
        fields: The form's inputs.
        form: The posted form (a multidict).

    Returns:
        The answer data and the form state (raw values plus any errors).
    """
    state = FormState()
    texts: dict[str, str | None] = {}
    for item in fields:
        raw = form.get(item.input_name)
        if item.kind == "checkbox":
            # A checkbox sends its value only when ticked: unticked is an answer too.
            texts[item.name] = "true" if raw is not None else "false"
            state.values[item.name] = "true" if raw is not None else ""
            continue
        text = str(raw) if raw is not None else ""
        state.values[item.name] = text
        texts[item.name] = text
    data, state.errors = read_typed([item.source for item in fields], texts)
    return data, state


def apply_errors(state: FormState, errors: list[dict[str, Any]], fields: list[FormField]) -> None:
    """Place the runtime's validation errors next to the fields they are about."""
    names = {item.name for item in fields}
    for error in errors:
        path = str(error.get("path") or "")
        head = path.split("/", 1)[0]
        message = str(error.get("message") or "invalid")
        if head in names:
            state.errors.setdefault(head, message)
        else:
            state.general.append(message)


def edit_form_fields(form: EditForm | None) -> list[FormField]:
    """The inputs of an "allow with changes" form: each argument an approver may change,
    pre-filled with its current value (secret ones are never among them). Every input
    is optional: one left empty keeps its value."""
    if form is None:
        return []
    return [
        FormField(replace(item, default=form.values.get(item.name)), _KINDS[item.type])
        for item in form.fields
    ]
