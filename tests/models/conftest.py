"""Fixtures of the model tests: the fake LLM provider and real SDK models pointed at it.

`fake` serves `fake_llm.FakeLLM` on 127.0.0.1; `provider` runs a test once per protocol
(``openai`` and ``anthropic``); `models` builds `OpenAIModel` / `AnthropicModel` (and for
``responses``, `OpenAIResponsesModel`) on the official SDKs with their ``base_url`` at the
fake, and closes them after the test.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from fake_llm import API_KEY, FakeLLM, Protocol

from adapters.models import AnthropicModel, OpenAIModel, OpenAIResponsesModel
from runtime import Model

_STRAY = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY")


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """No proxies, no real keys or endpoints, no SIGNOFF_* settings from the outside."""
    for name in list(os.environ):
        upper = name.upper()
        if (
            upper in _STRAY
            or upper.startswith(("OPENAI_", "ANTHROPIC_", "SIGNOFF_", "SLACK_"))
            or upper == "AZURE_OPENAI_API_KEY"
        ):
            monkeypatch.delenv(name, raising=False)


@pytest.fixture
async def fake() -> AsyncIterator[FakeLLM]:
    server = FakeLLM()
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


@pytest.fixture(params=["openai", "anthropic"])
def provider(request: pytest.FixtureRequest) -> Protocol:
    value: Protocol = request.param
    return value


ModelFactory = Callable[..., Model]


@pytest.fixture
async def models(fake: FakeLLM) -> AsyncIterator[ModelFactory]:
    """``models(protocol, **options)``: a real SDK model talking to the fake."""
    made: list[OpenAIModel | OpenAIResponsesModel | AnthropicModel] = []

    def build(protocol: Protocol, **options: Any) -> Model:
        options.setdefault("api_key", API_KEY)
        options.setdefault("base_url", fake.base_url(protocol))
        options.setdefault("max_retries", 0)
        options.setdefault("timeout", 10.0)
        model: OpenAIModel | OpenAIResponsesModel | AnthropicModel
        if protocol == "openai":
            model = OpenAIModel("gpt-test", **options)
        elif protocol == "responses":
            model = OpenAIResponsesModel("gpt-test", **options)
        else:
            model = AnthropicModel("claude-test", **options)
        made.append(model)
        return model

    try:
        yield build
    finally:
        for model in made:
            await model.aclose()
