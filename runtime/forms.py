"""The typed-input fields of a JSON schema, for edges that build forms from it.

Every edge (console, Slack, Discord) renders a ticket's answer schema as inputs people
type into. What the fields are, and how typed text becomes JSON numbers, is the same
everywhere and lives here; each edge maps a `SchemaField` to its own widget. Whether the
answer then fits the schema is decided once, by `validate_resume`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

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
        return float(text.strip())
    except ValueError:
        raise ValueError("Enter a number.") from None
