"""Canary: what the official SDKs put on the wire, as the fake provider received it.

If an SDK upgrade changes a path, an auth header, the API version header or the body's
shape, these fail first and say what moved (the rest of the suite trusts the fake).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest
from fake_llm import API_KEY, Call, FakeLLM, Turn

from runtime import Agent, MemoryStore, RunStatus, Runtime, tool

ModelFactory = Callable[..., Any]  # the `models` fixture

pytestmark = pytest.mark.timeout(60)


def agent(model: Any) -> Agent:
    @tool(permission="allow", replay_policy="safe")
    async def lookup(order_id: str, verbose: bool = False) -> dict[str, Any]:
        """Look an order up."""
        return {"order_id": order_id, "total": 249.0}

    return Agent("shop", "You answer questions about orders.", model, tools=[lookup])


async def two_turns(model: Any, fake: FakeLLM) -> None:
    fake.script(
        Turn.ask(Call("lookup", {"order_id": "A1"}, id="call_1"), text="Checking."),
        Turn.say("A1 totals 249.00."),
    )
    runtime = Runtime(MemoryStore(), [agent(model)])
    done = await runtime.start("shop", "How much was A1?", requester="U1")
    assert done.status is RunStatus.DONE


LOOKUP_SCHEMA = {
    "additionalProperties": False,
    "properties": {
        "order_id": {"title": "Order Id", "type": "string"},
        "verbose": {"default": False, "title": "Verbose", "type": "boolean"},
    },
    "required": ["order_id"],
    "type": "object",
}


async def test_openai_chat_completions_on_the_wire(fake: FakeLLM, models: ModelFactory) -> None:
    await two_turns(models("openai", max_tokens=300), fake)
    first, second = fake.requests
    for request in (first, second):
        assert (request.method, request.path) == ("POST", "/v1/chat/completions")
        assert request.headers["authorization"] == f"Bearer {API_KEY}"
        assert request.headers["content-type"] == "application/json"
        assert "x-api-key" not in request.headers
        assert set(request.body) == {"model", "messages", "tools", "max_completion_tokens"}
        assert request.body["model"] == "gpt-test"
        assert request.body["max_completion_tokens"] == 300
        assert request.body["tools"] == [
            {
                "type": "function",
                "function": {
                    "name": "lookup",
                    "description": "Look an order up.",
                    "parameters": LOOKUP_SCHEMA,
                },
            }
        ]
    assert first.body["messages"] == [
        {"role": "system", "content": "You answer questions about orders."},
        {"role": "user", "content": "How much was A1?"},
    ]
    assert second.body["messages"][2:] == [
        {
            "role": "assistant",
            "content": "Checking.",
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "lookup", "arguments": '{"order_id": "A1"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": '{"order_id": "A1", "total": 249.0}'},
    ]


async def test_anthropic_messages_on_the_wire(fake: FakeLLM, models: ModelFactory) -> None:
    await two_turns(models("anthropic", max_tokens=300), fake)
    first, second = fake.requests
    for request in (first, second):
        assert (request.method, request.path) == ("POST", "/v1/messages")
        # Older SDKs send `x-api-key`, newer ones a bearer token; the key is the same.
        sent = request.headers.get("x-api-key") or request.headers["authorization"]
        assert sent in (API_KEY, f"Bearer {API_KEY}")
        assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", request.headers["anthropic-version"])
        assert request.headers["content-type"] == "application/json"
        assert set(request.body) == {"model", "max_tokens", "messages", "system", "tools"}
        assert request.body["model"] == "claude-test"
        assert request.body["max_tokens"] == 300
        assert request.body["system"] == [
            {"type": "text", "text": "You answer questions about orders."}
        ]
        assert request.body["tools"] == [
            {"name": "lookup", "description": "Look an order up.", "input_schema": LOOKUP_SCHEMA}
        ]
    assert first.body["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "How much was A1?"}]}
    ]
    assert second.body["messages"][1:] == [
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Checking."},
                {"type": "tool_use", "id": "call_1", "name": "lookup", "input": {"order_id": "A1"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "call_1",
                    "content": '{"order_id": "A1", "total": 249.0}',
                }
            ],
        },
    ]


async def test_anthropic_prompt_caching_marks_system_and_tools(
    fake: FakeLLM, models: ModelFactory
) -> None:
    await two_turns(models("anthropic", cache_prompt=True), fake)
    body = fake.requests[0].body
    assert body["system"][0]["cache_control"] == {"type": "ephemeral"}
    assert body["tools"][-1]["cache_control"] == {"type": "ephemeral"}
    assert body["max_tokens"] == 4096  # the default; the Messages API requires one
