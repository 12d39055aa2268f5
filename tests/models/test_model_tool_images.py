"""Images in tool results reach each provider the way its API takes them, as the fake
provider records what was sent: Chat Completions and Responses in a user message after
the batch's tool outputs (``image_url`` / ``input_image`` parts), Anthropic as ``image``
blocks inside the ``tool_result``."""

from __future__ import annotations

import base64
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from fake_llm import Call, FakeLLM, Protocol, Turn

from adapters.models.tool_images import split
from runtime import Agent, RunStatus, Runtime, tool
from runtime.store.sql import SQLStore

ModelFactory = Callable[..., Any]

pytestmark = pytest.mark.timeout(60)

PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\0" * 32).decode()


def camera(model: Any) -> Agent:
    @tool(permission="allow", replay_policy="safe")
    async def snapshot(view: str) -> list[dict[str, Any]]:
        """A screenshot of a dashboard (as an MCP tool records one)."""
        return [
            {"type": "text", "text": f"the {view} dashboard"},
            {"type": "image", "mimeType": "image/png", "data": PNG},
            {"type": "image", "mimeType": "image/tiff", "data": PNG},
        ]

    @tool(permission="allow", replay_policy="safe")
    async def uptime(service: str) -> str:
        """A service's uptime."""
        return f"{service}: 99.9%"

    return Agent("cam", "Look at dashboards.", model, tools=[snapshot, uptime])


@pytest.fixture
async def store(tmp_path: Path) -> Any:
    sql = SQLStore.sqlite(tmp_path / "signoff.db")
    await sql.migrate()
    try:
        yield sql
    finally:
        await sql.close()


@pytest.mark.parametrize("protocol", ["openai", "responses", "anthropic"])
async def test_a_tool_results_image_is_sent_in_the_providers_format(
    fake: FakeLLM, models: ModelFactory, store: SQLStore, protocol: Protocol
) -> None:
    runtime = Runtime(store, [camera(models(protocol))])
    fake.script(
        Turn.ask(Call("snapshot", {"view": "orders"}), Call("uptime", {"service": "api"})),
        Turn.say("Orders look fine."),
    )

    done = await runtime.start("cam", "How do orders look?", requester="U1")

    assert done.status is RunStatus.DONE and done.text == "Orders look fine."
    assert all(r.problem is None for r in fake.requests), [r.problem for r in fake.requests]
    body = fake.requests[1].body
    url = f"data:image/png;base64,{PNG}"
    if protocol == "openai":
        messages = body["messages"]
        tools = [m for m in messages if m["role"] == "tool"]
        assert tools[0]["content"].startswith("the orders dashboard\n[image 1: image/png]")
        assert "'image/tiff': not shown to the model" in tools[0]["content"]
        assert tools[1]["content"] == "api: 99.9%"
        # after the batch's last tool message, not between the two
        assert messages[-1] == {
            "role": "user",
            "content": [
                {"type": "text", "text": "The images of the tool results above, in order."},
                {"type": "image_url", "image_url": {"url": url}},
            ],
        }
    elif protocol == "responses":
        items = body["input"]
        outputs = [i for i in items if i.get("type") == "function_call_output"]
        assert outputs[0]["output"].startswith("the orders dashboard\n[image 1: image/png]")
        assert items[-1] == {
            "role": "user",
            "content": [
                {"type": "input_text", "text": "The images of the tool results above, in order."},
                {"type": "input_image", "image_url": url},
            ],
        }
    else:
        results = [
            block
            for message in body["messages"]
            if isinstance(message["content"], list)
            for block in message["content"]
            if block.get("type") == "tool_result"
        ]
        content = results[0]["content"]
        assert content[0]["type"] == "text"
        assert content[0]["text"].startswith("the orders dashboard\n[image 1: image/png]")
        assert content[1] == {
            "type": "image",
            "source": {"type": "base64", "media_type": "image/png", "data": PNG},
        }
        assert len(content) == 2  # the TIFF stays a line of text
        assert results[1]["content"] == "api: 99.9%"


def test_text_without_images_and_other_json_are_left_alone() -> None:
    assert split("plain text") is None
    assert split('[{"type": "text", "text": "no image"}]') is None
    assert split('{"type": "image"}') is None  # not a list of blocks
    assert split('[{"type": "image", "mimeType": "image/bmp", "data": "AA=="}]') is None
    block = '{"type": "image", "mimeType": "image/png", "data": "AA=="}'
    edited = f"Note: the approver changed view.\n[{block}]"
    text, images = split(edited) or ("", [])
    assert text == "Note: the approver changed view.\n[image 1: image/png]"
    assert [i.data_url for i in images] == ["data:image/png;base64,AA=="]


@pytest.mark.parametrize("protocol", ["openai", "responses", "anthropic"])
async def test_a_model_without_image_input_gets_a_line_of_text_instead(
    fake: FakeLLM, models: ModelFactory, store: SQLStore, protocol: Protocol
) -> None:
    runtime = Runtime(store, [camera(models(protocol, tool_images=False))])
    fake.script(Turn.ask(Call("snapshot", {"view": "orders"})), Turn.say("Seen."))

    done = await runtime.start("cam", "How do orders look?", requester="U1")

    assert done.status is RunStatus.DONE
    assert all(r.problem is None for r in fake.requests)
    sent = str(fake.requests[1].body)
    assert PNG not in sent  # no image data at all
    assert "[image 1: image/png, not shown to this model]" in sent
    assert "[image 2: image/tiff, not shown to this model]" in sent
    assert "image_url" not in sent and "input_image" not in sent and "'base64'" not in sent


def test_the_spec_option_turns_images_off() -> None:
    from adapters.models.specs import spec_options

    for spec in (
        "openai:gpt-4.1?tool_images=false",
        "openai-responses:gpt-5?tool_images=false",
        "anthropic:claude-sonnet-4-5?tool_images=false",
    ):
        assert spec_options(spec) == {"tool_images": False}
