"""Typed-input forms for Discord modals: fields from a JSON schema, typed values back.

A Discord modal holds at most five text inputs, so only object schemas with one to five
properties become a modal; anything larger is answered in the web console. Each
property is typed as text; what the person typed is converted to the property's JSON
type here (numbers, booleans, enum options, JSON for the rest), and whether the data
fits the schema is left to the runtime's one validation (`runtime.InvalidAnswer`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Literal

from runtime import EditForm
from runtime.edges import FieldType, FieldView, read_typed, schema_fields

MAX_FIELDS = 5
"""Text inputs a Discord modal holds."""
LABEL_LENGTH = 45
PLACEHOLDER_LENGTH = 100
VALUE_LENGTH = 4000

FieldKind = Literal["text", "integer", "number", "boolean", "select", "json"]


@dataclass(frozen=True, slots=True)
class FormField(FieldView):
    """One text input of a generated modal (its label cut to 45 characters).

    Attributes:
        kind: How the typed text is converted.
    """

    kind: FieldKind = "text"

    @property
    def placeholder(self) -> str:
        """A hint of what to type (at most 100 characters)."""
        match self.kind:
            case "select":
                hint = "one of: " + ", ".join(str(o) for o in self.options)
            case "integer":
                hint = "a whole number"
            case "number":
                hint = "a number"
            case "boolean":
                hint = "true or false"
            case "json":
                hint = "JSON"
            case _:
                hint = self.description or ""
        return clip(hint, PLACEHOLDER_LENGTH)

    @property
    def initial(self) -> str | None:
        """The pre-filled text, if the schema gives a default."""
        if self.default is None:
            return None
        if self.kind == "json":
            return json.dumps(self.default, ensure_ascii=False)
        if self.kind == "boolean":
            return "true" if self.default else "false"
        return str(self.default)


def clip(text: str, limit: int) -> str:
    """`text`, cut to `limit` characters with an ellipsis when longer."""
    return text if len(text) <= limit else text[: max(limit - 1, 0)] + "…"


_KINDS: dict[FieldType, FieldKind] = {
    "string": "text",
    "integer": "integer",
    "number": "number",
    "boolean": "boolean",
    "enum": "select",
    "json": "json",
}


def form_fields(schema: Mapping[str, Any] | None) -> list[FormField]:
    """The inputs for an object schema's properties, in the schema's order."""
    return [
        FormField(replace(item, label=clip(item.label, LABEL_LENGTH)), _KINDS[item.type])
        for item in schema_fields(schema)
    ]


def edit_fields(form: EditForm) -> list[FormField]:
    """The inputs of an edit modal: the first `MAX_FIELDS` editable arguments (schema
    order), pre-filled with their current values; the others keep theirs."""
    return [
        FormField(
            replace(item, label=clip(item.label, LABEL_LENGTH), default=form.values.get(item.name)),
            _KINDS[item.type],
        )
        for item in form.fields[:MAX_FIELDS]
    ]


def fits_modal(schema: Mapping[str, Any] | None) -> bool:
    """Whether the schema can be answered in one Discord modal (1 to 5 properties)."""
    return 1 <= len(form_fields(schema)) <= MAX_FIELDS


def read_values(
    fields: Iterable[FormField], values: Mapping[str, str]
) -> tuple[dict[str, Any], dict[str, str]]:
    """Convert what was typed into JSON values (see `runtime.domain.forms.read_typed`).

    Returns:
        The answer data, and a message per field that could not be converted. Empty
        optional fields are left out (the schema's default applies).
    """
    return read_typed([item.source for item in fields], values)


def submitted_values(components: Any) -> dict[str, str]:
    """The ``custom_id -> value`` pairs of a modal submission.

    Walks action rows (``components``) and labels (``component``) alike, so both the
    classic and the newer modal layouts are read.
    """
    found: dict[str, str] = {}

    def walk(node: Any) -> None:
        if isinstance(node, list):
            for child in node:
                walk(child)
        elif isinstance(node, dict):
            custom_id = node.get("custom_id")
            if isinstance(custom_id, str) and isinstance(node.get("value"), str):
                found[custom_id] = node["value"]
            walk(node.get("components"))
            walk(node.get("component"))

    walk(components)
    return found
