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
from dataclasses import dataclass
from typing import Any, Literal

from runtime.forms import FieldType, parse_number, parse_whole, schema_fields

MAX_FIELDS = 5
"""Text inputs a Discord modal holds."""
LABEL_LENGTH = 45
PLACEHOLDER_LENGTH = 100
VALUE_LENGTH = 4000

FieldKind = Literal["text", "integer", "number", "boolean", "select", "json"]


@dataclass(frozen=True, slots=True)
class FormField:
    """One text input of a generated modal.

    Attributes:
        name: The property name in the answer (also the input's ``custom_id``).
        label: What the person reads (at most 45 characters).
        kind: How the typed text is converted.
        required: Whether the schema requires it.
        description: Help text from the schema.
        options: For ``select``: the allowed values.
        default: The schema's default, pre-filled.
    """

    name: str
    label: str
    kind: FieldKind
    required: bool = False
    description: str | None = None
    options: tuple[Any, ...] = ()
    default: Any = None

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
        FormField(
            name=item.name,
            label=clip(item.label, LABEL_LENGTH),
            kind=_KINDS[item.type],
            required=item.required,
            description=item.description,
            options=item.options,
            default=item.default,
        )
        for item in schema_fields(schema)
    ]


def fits_modal(schema: Mapping[str, Any] | None) -> bool:
    """Whether the schema can be answered in one Discord modal (1 to 5 properties)."""
    return 1 <= len(form_fields(schema)) <= MAX_FIELDS


def read_values(
    fields: Iterable[FormField], values: Mapping[str, str]
) -> tuple[dict[str, Any], dict[str, str]]:
    """Convert what was typed into JSON values.

    Returns:
        The answer data, and a message per field that could not be converted. Empty
        optional fields are left out (the schema's default applies).
    """
    data: dict[str, Any] = {}
    errors: dict[str, str] = {}
    for item in fields:
        text = values.get(item.name, "").strip()
        if not text:
            if item.required:
                errors[item.name] = "This field is required."
            continue
        try:
            data[item.name] = _convert(item, text)
        except ValueError as exc:
            errors[item.name] = str(exc)
    return data, errors


def _convert(item: FormField, text: str) -> Any:
    match item.kind:
        case "text":
            return text
        case "integer":
            return parse_whole(text)
        case "number":
            return parse_number(text)
        case "boolean":
            lowered = text.lower()
            if lowered in ("true", "yes", "y", "1", "on"):
                return True
            if lowered in ("false", "no", "n", "0", "off"):
                return False
            raise ValueError("Enter true or false.")
        case "select":
            for option in item.options:
                if str(option) == text:
                    return option
            choices = ", ".join(str(o) for o in item.options)
            raise ValueError(f"Choose one of: {choices}.")
        case "json":
            try:
                return json.loads(text)
            except (ValueError, RecursionError):
                raise ValueError("Enter valid JSON.") from None
    raise ValueError(f"unsupported field kind {item.kind}")


def parse_result(text: str) -> Any:
    """A recorded result: JSON when it parses as JSON, else the text itself."""
    stripped = text.strip()
    try:
        return json.loads(stripped)
    except (ValueError, RecursionError):
        return stripped


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
