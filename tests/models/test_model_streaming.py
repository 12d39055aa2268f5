"""Streamed answers: the text arrives piece by piece, the turn's response is unchanged.

Every provider model is asked the same scripted turn twice, once without and once with
a text listener (a streamed call, server-sent events from the fake): the responses must
be equal (text, tool calls, usage, stop, provider state), and the pieces must add up to
the text. A stream cut midway is a retryable ``connection`` error.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest
from fake_llm import Call, FakeLLM, Protocol, Turn
from fake_llm_stream import StreamScript

from runtime import ModelError, ModelErrorKind, ModelRequest, ModelResponse

ModelFactory = Callable[..., Any]  # the `models` fixture

PROTOCOLS: list[Protocol] = ["openai", "anthropic", "responses"]

ASK = ModelRequest(
    model="m",
    messages=[{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Refund it"}],
    tools=[
        {
            "type": "function",
            "function": {
                "name": "refund",
                "description": "Refund a charge.",
                "parameters": {
                    "type": "object",
                    "properties": {"charge": {"type": "string"}, "amount": {"type": "number"}},
                    "required": ["charge", "amount"],
                },
            },
        }
    ],
)

# The fake counts prompt tokens from the request's size, which streaming changes.
USAGE = {"prompt_tokens": 40, "completion_tokens": 12, "cached_tokens": 8}


def turns() -> list[Turn]:
    return [
        Turn.say("The duplicate charge of 249 EUR was refunded; nothing else to do.", **USAGE),
        Turn.ask(
            Call("refund", {"charge": "ch_1", "amount": 249.0}, id="call_a"),
            Call("refund", {"charge": "ch_2", "amount": 12.5}, id="call_b"),
            text="Refunding both duplicates.",
            **USAGE,
        ),
        Turn.ask(Call("refund", {"charge": "ch_3", "amount": 1.0}, id="call_c"), **USAGE),
    ]


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("index", [0, 1, 2])
async def test_a_streamed_turn_is_the_unstreamed_turn(
    fake: FakeLLM, models: ModelFactory, protocol: Protocol, index: int
) -> None:
    model = models(protocol)
    turn = turns()[index]
    fake.script(turn, turn)
    plain = await model.complete(ASK)
    pieces: list[str] = []
    streamed = await model.complete(replace(ASK, on_text=pieces.append))
    first, second = fake.requests[-2:]
    assert "stream" not in first.body
    assert second.body["stream"] is True
    if protocol == "openai":
        assert second.body["stream_options"] == {"include_usage": True}
    assert streamed == plain
    assert streamed.usage.prompt_tokens > 0 and streamed.usage.completion_tokens > 0
    assert "".join(pieces) == (plain.text or "")
    if plain.text:
        assert len(pieces) > 1


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_thinking_stays_out_of_the_text(
    fake: FakeLLM, models: ModelFactory, protocol: Protocol
) -> None:
    options = {"thinking_budget": 1024} if protocol == "anthropic" else {"reasoning_effort": "low"}
    if protocol == "openai":
        options = {}
    model = models(protocol, **options)
    turn = Turn.ask(
        Call("refund", {"charge": "ch_1", "amount": 2.0}, id="call_t"),
        text="Refunding.",
        thinking="The user wants the duplicate gone; refund ch_1.",
        **USAGE,
    )
    fake.script(turn, turn)
    plain = await model.complete(ASK)
    pieces: list[str] = []
    streamed = await model.complete(replace(ASK, on_text=pieces.append))
    assert without_ids(streamed) == without_ids(plain)
    assert "".join(pieces) == "Refunding."
    if protocol != "openai":
        assert streamed.provider_state is not None
        assert streamed.reasoning == "The user wants the duplicate gone; refund ch_1."


def without_ids(response: ModelResponse) -> ModelResponse:
    """`response` with the reasoning items' ids and seals the fake numbers per answer."""
    state = response.provider_state
    if state is None or "items" not in state:
        return response
    items = [
        {k: v for k, v in item.items() if k not in ("id", "encrypted_content")}
        for item in state["items"]
    ]
    return replace(response, provider_state={**state, "items": items})


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("cut", [2, 4])
async def test_a_stream_cut_midway_is_a_retryable_error(
    fake: FakeLLM, models: ModelFactory, protocol: Protocol, cut: int
) -> None:
    model = models(protocol)
    fake.script(replace(turns()[1], streaming=StreamScript(cut_after=cut)))
    pieces: list[str] = []
    with pytest.raises(ModelError) as raised:
        await model.complete(replace(ASK, on_text=pieces.append))
    assert raised.value.kind is ModelErrorKind.CONNECTION
    assert raised.value.retryable
    assert "the answer's stream broke off" in str(raised.value)
    assert raised.value.provider in ("openai", "anthropic")
    assert "".join(pieces) != "Refunding both duplicates."


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_a_stream_cut_midway_is_asked_again_without_streaming_when_retries_are_allowed(
    fake: FakeLLM, models: ModelFactory, protocol: Protocol
) -> None:
    model = models(protocol, max_retries=1)
    turn = turns()[1]
    fake.script(turn)
    plain = await model.complete(ASK)
    fake.script(replace(turn, streaming=StreamScript(cut_after=2)), turn)
    pieces: list[str] = []
    again = await model.complete(replace(ASK, on_text=pieces.append))
    cut, asked = fake.requests[-2:]
    assert cut.body["stream"] is True
    assert "stream" not in asked.body
    assert without_ids(again) == without_ids(plain)
    assert "".join(pieces) != "Refunding both duplicates."  # the preview stopped at the cut


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_a_model_told_not_to_stream_does_not(
    fake: FakeLLM, models: ModelFactory, protocol: Protocol
) -> None:
    model = models(protocol, stream=False)
    fake.script(turns()[0])
    pieces: list[str] = []
    response = await model.complete(replace(ASK, on_text=pieces.append))
    assert "stream" not in fake.requests[-1].body
    assert pieces == []
    assert response.text == turns()[0].text


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_an_error_answer_to_a_streamed_call_is_the_same_error(
    fake: FakeLLM, models: ModelFactory, protocol: Protocol
) -> None:
    model = models(protocol)
    fake.script(Turn.fail(429, "slow down"), Turn.fail(429, "slow down"))
    with pytest.raises(ModelError) as plain:
        await model.complete(ASK)
    with pytest.raises(ModelError) as streamed:
        await model.complete(replace(ASK, on_text=lambda _: None))
    assert streamed.value.kind is plain.value.kind is ModelErrorKind.RATE_LIMITED
    assert str(streamed.value) == str(plain.value)


@pytest.mark.parametrize(
    ("protocol", "error"),
    [("openai", "server_error"), ("anthropic", "overloaded_error"), ("responses", "server_error")],
)
async def test_an_error_sent_midway_is_the_error_it_names(
    fake: FakeLLM, models: ModelFactory, protocol: Protocol, error: str
) -> None:
    model = models(protocol)
    fake.script(replace(turns()[1], streaming=StreamScript(cut_after=3, error=error)))
    with pytest.raises(ModelError) as raised:
        await model.complete(replace(ASK, on_text=lambda _: None))
    assert raised.value.kind is ModelErrorKind.SERVER and raised.value.retryable
    assert str(raised.value) == f"The fake stopped this answer ({error})."
