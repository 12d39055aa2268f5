"""The typed-input fields of a JSON schema, for edges that build forms from it.

Every edge (console, Slack, Discord) renders a ticket's answer schema as inputs people
type into. What the fields are, and how typed text becomes JSON numbers, is the same
everywhere and lives here; each edge maps a `SchemaField` to its own widget. Whether the
answer then fits the schema is decided once, by `validate_resume`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from runtime.domain.jsontext import NonFiniteNumber, loads_strict

FieldType = Literal["string", "integer", "number", "boolean", "enum", "json"]
"""How a property is typed in: free text, a whole number, a number, yes/no, one of a
list, or JSON for anything else (objects, arrays, unions)."""

_MAX_DEPTH = 10


@dataclass(frozen=True, slots=True)
class SchemaField:
    """One property of an object schema, as a form input.

    Attributes:
        name: The property name in the answer.
        label: The schema's title, or the name made readable.
        type: How it is typed in.
        required: Whether the schema requires it.
        description: The schema's description (help text).
        options: For ``enum``: the allowed values, in order.
        default: The schema's default, if any.
    """

    name: str
    label: str
    type: FieldType
    required: bool = False
    description: str | None = None
    options: tuple[Any, ...] = ()
    default: Any = None


@dataclass(frozen=True, slots=True)
class FieldView:
    """An edge's input for one `SchemaField`; edges add how it is rendered.

    Attributes:
        source: The schema field.
    """

    source: SchemaField

    @property
    def name(self) -> str:
        """The property name in the answer."""
        return self.source.name

    @property
    def label(self) -> str:
        """What the person reads."""
        return self.source.label

    @property
    def required(self) -> bool:
        """Whether the schema requires it."""
        return self.source.required

    @property
    def description(self) -> str | None:
        """Help text."""
        return self.source.description

    @property
    def options(self) -> tuple[Any, ...]:
        """The allowed values, for a choice."""
        return self.source.options

    @property
    def default(self) -> Any:
        """The schema's default, pre-filled."""
        return self.source.default


def resolve_property(
    prop: Mapping[str, Any], defs: Mapping[str, Any], depth: int = 0
) -> dict[str, Any]:
    """Follow a local ``$ref`` and unwrap ``anyOf [X, null]`` or a single ``allOf``."""
    resolved = dict(prop)
    if depth > _MAX_DEPTH:
        return resolved
    ref = resolved.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        target = defs.get(ref[len("#/$defs/") :], {})
        merged = {**target, **{k: v for k, v in resolved.items() if k != "$ref"}}
        return resolve_property(merged, defs, depth + 1)
    for key in ("anyOf", "oneOf", "allOf"):
        variants = resolved.get(key)
        if isinstance(variants, list):
            real = [v for v in variants if isinstance(v, dict) and v.get("type") != "null"]
            if len(real) == 1:
                outer = {k: v for k, v in resolved.items() if k != key}
                return resolve_property({**real[0], **outer}, defs, depth + 1)
    return resolved


def _type_of(prop: Mapping[str, Any]) -> tuple[FieldType, tuple[Any, ...]]:
    if isinstance(prop.get("enum"), list) and prop["enum"]:
        return "enum", tuple(prop["enum"])
    if "const" in prop:
        return "enum", (prop["const"],)
    match prop.get("type"):
        case "string":
            return "string", ()
        case "integer":
            return "integer", ()
        case "number":
            return "number", ()
        case "boolean":
            return "boolean", ()
        case _:
            return "json", ()


def schema_fields(schema: Mapping[str, Any] | None) -> list[SchemaField]:
    """The fields of an object schema's properties, in the schema's order."""
    if not schema:
        return []
    defs = schema.get("$defs") or {}
    required = set(schema.get("required") or [])
    fields = []
    for name, raw in (schema.get("properties") or {}).items():
        prop = resolve_property(raw if isinstance(raw, dict) else {}, defs)
        kind, options = _type_of(prop)
        label = prop.get("title") or str(name).replace("_", " ").capitalize()
        description = prop.get("description")
        fields.append(
            SchemaField(
                name=str(name),
                label=str(label),
                type=kind,
                required=name in required,
                description=str(description) if description else None,
                options=options,
                default=prop.get("default"),
            )
        )
    return fields


def parse_whole(text: str) -> int:
    """Typed text as a whole number.

    Raises:
        ValueError: With a message for the person typing.
    """
    try:
        return int(text.strip())
    except ValueError:
        raise ValueError("Enter a whole number.") from None


def parse_number(text: str) -> float:
    """Typed text as a number.

    Raises:
        ValueError: With a message for the person typing.
    """
    try:
        value = float(text.strip())
    except ValueError:
        raise ValueError("Enter a number.") from None
    if not math.isfinite(value):
        raise ValueError("Enter a finite number (not NaN or Infinity).")
    return value


_TRUE = frozenset({"true", "yes", "y", "1", "on"})
_FALSE = frozenset({"false", "no", "n", "0", "off"})


def parse_typed(field: SchemaField, text: str) -> Any:
    """What a person typed (or chose) for `field`, as its JSON value.

    Strings stay as typed; numbers and whole numbers are read as such; yes/no answers
    become booleans; an option is matched by its text or its JSON; anything else is
    read as JSON.

    Raises:
        ValueError: With a message for the person typing.
    """
    match field.type:
        case "string":
            return text
        case "integer":
            return parse_whole(text)
        case "number":
            return parse_number(text)
        case "boolean":
            lowered = text.strip().lower()
            if lowered in _TRUE:
                return True
            if lowered in _FALSE:
                return False
            raise ValueError("Answer yes or no.")
        case "enum":
            for option in field.options:
                if text in (str(option), json.dumps(option, separators=(",", ":"))):
                    return option
            raise ValueError("Choose one of the options.")
        case "json":
            try:
                return loads_strict(text)
            except NonFiniteNumber:
                raise ValueError("Enter JSON with finite numbers (no NaN).") from None
            except (ValueError, RecursionError):
                raise ValueError("Enter valid JSON.") from None
    raise ValueError(f"unsupported field type {field.type}")


def read_typed(
    fields: Iterable[SchemaField], texts: Mapping[str, str | None]
) -> tuple[dict[str, Any], dict[str, str]]:
    """Convert typed answers (by field name) into answer data.

    Returns:
        The data, and a message per field name that is missing or could not be
        converted. Empty optional fields are left out (the schema's default applies).
    """
    data: dict[str, Any] = {}
    errors: dict[str, str] = {}
    for item in fields:
        text = texts.get(item.name)
        if text is None or not text.strip():
            if item.required:
                errors[item.name] = "This field is required."
            continue
        try:
            data[item.name] = parse_typed(item, text.strip() if item.type != "string" else text)
        except ValueError as exc:
            errors[item.name] = str(exc)
    return data, errors


def parse_result(text: str) -> Any:
    """A verified result someone recorded: JSON when it reads as JSON, else the text."""
    stripped = text.strip()
    try:
        return loads_strict(stripped)
    except (ValueError, RecursionError):
        return stripped
