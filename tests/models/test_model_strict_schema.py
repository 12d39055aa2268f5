"""Strict tool schemas for the Responses API, and its transcript translation, as pure
functions on recorded shapes."""

from __future__ import annotations

import json
from typing import Any

import pytest

from adapters.models.openai_responses_transcript import (
    drop_optional_nulls,
    from_response,
    strict_parameters,
    to_input,
)
from runtime import ConfigurationError, StopReason, tool


def test_a_pydantic_schema_becomes_strict() -> None:
    @tool
    async def refund(
        order_id: str, amount: float, reason: str | None = None, notify: bool = True
    ) -> str:
        """Refund an order."""
        return "ok"

    strict = strict_parameters("refund", refund.parameters)
    assert strict["additionalProperties"] is False
    assert strict["required"] == ["order_id", "amount", "reason", "notify"]
    props = strict["properties"]
    assert props["order_id"]["type"] == "string" and props["amount"]["type"] == "number"
    # Already nullable: left as it is (its default is left out).
    assert props["reason"]["anyOf"] == [{"type": "string"}, {"type": "null"}]
    assert "default" not in props["reason"]
    # Optional and not nullable: null is allowed, then dropped for the tool's default.
    assert props["notify"]["type"] == ["boolean", "null"]
    assert "default" not in props["notify"]


def test_nested_objects_arrays_refs_and_narrowing_keywords() -> None:
    schema: dict[str, Any] = {
        "type": "object",
        "properties": {
            "lines": {
                "type": "array",
                "minItems": 1,
                "items": {"$ref": "#/$defs/Line", "description": "a line"},
            },
            "code": {"type": "string", "minLength": 3, "maxLength": 8, "pattern": "^[A-Z]+$"},
            "kind": {"oneOf": [{"const": "a"}, {"const": "b"}]},
            "level": {"enum": ["low", "high"]},
        },
        "required": ["lines"],
        "$defs": {
            "Line": {
                "type": "object",
                "properties": {"sku": {"type": "string"}, "qty": {"type": "integer"}},
                "required": ["sku"],
            }
        },
    }
    strict = strict_parameters("order", schema)
    assert strict["properties"]["lines"] == {
        "type": "array",
        "minItems": 1,
        "items": {"$ref": "#/$defs/Line"},
    }
    assert strict["properties"]["code"] == {"type": ["string", "null"], "pattern": "^[A-Z]+$"}
    assert strict["properties"]["kind"] == {
        "anyOf": [{"anyOf": [{"const": "a"}, {"const": "b"}]}, {"type": "null"}]
    }
    assert strict["properties"]["level"] == {"anyOf": [{"enum": ["low", "high"]}, {"type": "null"}]}
    line = strict["$defs"]["Line"]
    assert line["required"] == ["sku", "qty"] and line["additionalProperties"] is False
    assert line["properties"]["qty"]["type"] == ["integer", "null"]

    arguments = json.dumps(
        {"lines": [{"sku": "A", "qty": None}], "code": None, "kind": "a", "level": None}
    )
    assert json.loads(drop_optional_nulls(arguments, schema)) == {
        "lines": [{"sku": "A"}],
        "kind": "a",
    }


@pytest.mark.parametrize(
    ("schema", "said"),
    [
        (
            {"type": "object", "properties": {"tags": {"type": "object"}}},
            "at tags: an object must name all its properties",
        ),
        (
            {"type": "object", "properties": {"x": {}}},
            "at x: a value of any type is not supported",
        ),
        (
            {
                "type": "object",
                "properties": {"m": {"type": "object", "additionalProperties": {"type": "string"}}},
            },
            "at m: an object must name all its properties",
        ),
        (
            {"type": "object", "properties": {"v": {"type": "array"}}},
            "at v: an array must say what its items are",
        ),
        (
            {"type": "object", "properties": {"n": {"type": "string", "not": {"const": ""}}}},
            "at n: 'not' is not supported",
        ),
        (
            {"type": "object", "properties": {"a": {"allOf": [{"type": "string"}, {}]}}},
            "'allOf' with several parts",
        ),
        ({"type": "object", "additionalProperties": True}, "an object must name all its"),
        ({"type": "string"}, "the parameters must be an object"),
    ],
)
def test_schemas_strict_mode_cannot_express_are_refused(schema: dict[str, Any], said: str) -> None:
    with pytest.raises(ConfigurationError) as caught:
        strict_parameters("t", schema)
    assert said in str(caught.value)
    assert str(caught.value).startswith("tool 't' cannot have a strict schema")


def test_the_transcript_as_input_items() -> None:
    reasoning = {"id": "rs_1", "type": "reasoning", "summary": [], "encrypted_content": "e"}
    plain = {"id": "rs_2", "type": "reasoning", "summary": []}
    transcript: list[dict[str, Any]] = [
        {"role": "system", "content": "Be careful."},
        {"role": "user", "content": "Pay."},
        {
            "role": "assistant",
            "content": "Paying.",
            "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "pay", "arguments": "{}"}}
            ],
            "provider_state": {"provider": "openai-responses", "items": [reasoning, plain]},
        },
        {"role": "tool", "tool_call_id": "call_1", "content": ""},
        {
            "role": "assistant",
            "content": "Done.",
            "provider_state": {"provider": "anthropic", "blocks": [{"type": "thinking"}]},
        },
    ]
    instructions, items = to_input(transcript)
    assert instructions == "Be careful."
    assert items == [
        {"role": "user", "content": "Pay."},
        reasoning,  # without store, one without encrypted content cannot be found again
        {"role": "assistant", "content": "Paying."},
        {"type": "function_call", "call_id": "call_1", "name": "pay", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "call_1", "output": "(no output)"},
        {"role": "assistant", "content": "Done."},
    ]
    _, stored = to_input(transcript, stored_reasoning=True)
    assert stored[1:3] == [reasoning, plain]


def test_an_answer_with_reasoning_and_a_refusal() -> None:
    answer = from_response(
        {
            "status": "completed",
            "output": [
                {
                    "id": "rs_1",
                    "type": "reasoning",
                    "summary": [{"type": "summary_text", "text": "Thinking."}],
                    "encrypted_content": "secret",
                },
                {"type": "message", "content": [{"type": "refusal", "refusal": "No."}]},
            ],
            "usage": {"input_tokens": 7, "output_tokens": 30, "input_tokens_details": {}},
        }
    )
    assert answer.stop is StopReason.REFUSAL and answer.refusal == "No."
    assert answer.reasoning == "Thinking." and "secret" not in (answer.stated_reason or "")
    assert answer.usage.completion_tokens == 30
    assert answer.as_message()["provider_state"]["items"][0]["encrypted_content"] == "secret"
