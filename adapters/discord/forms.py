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


def _resolve(prop: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    """Follow a local ``$ref`` and unwrap ``anyOf [X, null]`` / a single ``allOf``."""
    ref = prop.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        target = defs.get(ref[len("#/$defs/") :], {})
        merged = {**target, **{k: v for k, v in prop.items() if k != "$ref"}}
        return _resolve(merged, defs)
    for key in ("anyOf", "oneOf", "allOf"):
        variants = prop.get(key)
        if isinstance(variants, list):
            real = [v for v in variants if isinstance(v, dict) and v.get("type") != "null"]
            if len(real) == 1:
                outer = {k: v for k, v in prop.items() if k != key}
                return _resolve({**real[0], **outer}, defs)
    return prop


def _kind(prop: dict[str, Any]) -> tuple[FieldKind, tuple[Any, ...]]:
    if isinstance(prop.get("enum"), list):
        return "select", tuple(prop["enum"])
    if "const" in prop:
        return "select", (prop["const"],)
    match prop.get("type"):
        case "string":
            return "text", ()
        case "integer":
            return "integer", ()
        case "number":
            return "number", ()
        case "boolean":
            return "boolean", ()
        case _:
            return "json", ()


def form_fields(schema: Mapping[str, Any] | None) -> list[FormField]:
    """The inputs for an object schema's properties, in the schema's order."""
    if not schema:
        return []
    defs = schema.get("$defs") or {}
    required = set(schema.get("required") or [])
    fields = []
    for name, raw in (schema.get("properties") or {}).items():
        prop = _resolve(raw if isinstance(raw, dict) else {}, defs)
        kind, options = _kind(prop)
        label = prop.get("title") or str(name).replace("_", " ").capitalize()
        fields.append(
            FormField(
                name=str(name),
                label=clip(str(label), LABEL_LENGTH),
                kind=kind,
                required=name in required,
                description=prop.get("description"),
                options=options,
                default=prop.get("default"),
            )
        )
    return fields


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
            try:
                return int(text)
            except ValueError:
                raise ValueError("Enter a whole number.") from None
        case "number":
            try:
                return float(text)
            except ValueError:
                raise ValueError("Enter a number.") from None
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
            except ValueError:
                raise ValueError("Enter valid JSON.") from None
    raise ValueError(f"unsupported field kind {item.kind}")


def parse_result(text: str) -> Any:
    """A recorded result: JSON when it parses as JSON, else the text itself."""
    stripped = text.strip()
    try:
        return json.loads(stripped)
    except ValueError:
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
