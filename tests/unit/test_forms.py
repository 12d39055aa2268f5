"""Form fields from answer schemas, shared by every edge."""

from __future__ import annotations

from typing import Literal

import pytest
from pydantic import BaseModel, Field

from runtime.domain.forms import SchemaField, parse_number, parse_whole, schema_fields


class Plan(BaseModel):
    service: str = Field(title="Service name", description="What to roll back")
    replicas: int = 2
    ratio: float | None = None
    dry_run: bool
    strategy: Literal["redeploy", "scale_down"]
    extra: dict[str, int] = {}


def test_fields_follow_the_schema_in_order() -> None:
    fields = schema_fields(Plan.model_json_schema())
    assert [(f.name, f.type) for f in fields] == [
        ("service", "string"),
        ("replicas", "integer"),
        ("ratio", "number"),
        ("dry_run", "boolean"),
        ("strategy", "enum"),
        ("extra", "json"),
    ]
    service = fields[0]
    assert service == SchemaField(
        name="service",
        label="Service name",
        type="string",
        required=True,
        description="What to roll back",
    )
    assert fields[1].default == 2 and not fields[1].required
    assert fields[1].label == "Replicas"
    assert fields[4].options == ("redeploy", "scale_down")


def test_refs_and_nullable_unions_are_followed() -> None:
    schema = {
        "$defs": {"Level": {"enum": ["low", "high"], "type": "string"}},
        "properties": {
            "level": {"$ref": "#/$defs/Level"},
            "note": {"anyOf": [{"type": "string"}, {"type": "null"}], "title": "Note"},
            "loop": {"$ref": "#/$defs/Loop"},
        },
        "required": ["level"],
    }
    schema["$defs"]["Loop"] = {"$ref": "#/$defs/Loop"}
    fields = {f.name: f for f in schema_fields(schema)}
    assert fields["level"].type == "enum" and fields["level"].options == ("low", "high")
    assert fields["note"].type == "string" and fields["note"].label == "Note"
    assert fields["loop"].type == "json"  # a self-reference ends instead of looping


def test_no_schema_means_no_fields() -> None:
    assert schema_fields(None) == []
    assert schema_fields({}) == []


def test_typed_numbers() -> None:
    assert parse_whole(" 7 ") == 7
    assert parse_number("2.5") == 2.5
    with pytest.raises(ValueError, match="whole number"):
        parse_whole("7.5")
    with pytest.raises(ValueError, match="Enter a number"):
        parse_number("seven")
