"""Model specs with options, and the agents file's ``model_options``.

``openai-responses:gpt-5?reasoning_effort=high`` builds an `OpenAIResponsesModel` with
that option; an agents file's ``model_options`` table becomes the agent's spec (the
``model_options`` block of docs/agents-file.md loads as printed); bad options are refused
naming where they are. Chat Completions never sends another provider's opaque state.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from fake_llm import FakeLLM, Turn

from adapters.models import (
    AnthropicModel,
    ModelOptions,
    ModelResolver,
    OpenAIModel,
    OpenAIResponsesModel,
    Price,
    canonical,
    model_from_spec,
    parse_spec,
    spec_options,
    with_options,
)
from bot.agents_file import load_agents_file
from bot.settings import Settings
from bot.wiring import SettingsModelResolver, model_options
from runtime import ConfigurationError, ModelRequest

ModelFactory = Callable[..., Any]  # the `models` fixture

REPO = Path(__file__).resolve().parents[2]
KEYS = ModelOptions(openai_api_key="sk-test", anthropic_api_key="sk-ant-test")


def test_a_spec_carries_typed_options_in_a_canonical_order() -> None:
    spec = "OpenAI-Responses:gpt-5?strict_tools=TRUE&reasoning_effort=high&max_tokens=900"
    assert parse_spec(spec) == ("openai-responses", "gpt-5")
    assert spec_options(spec) == {
        "strict_tools": True,
        "reasoning_effort": "high",
        "max_tokens": 900,
    }
    assert canonical(spec) == (
        "openai-responses:gpt-5?max_tokens=900&reasoning_effort=high&strict_tools=true"
    )
    assert canonical("openai:llama3.1:8b") == "openai:llama3.1:8b"
    assert with_options("anthropic:claude-x?max_tokens=8192", {"thinking_budget": 2048}) == (
        "anthropic:claude-x?max_tokens=8192&thinking_budget=2048"
    )
    assert spec_options("openai:gpt-4.1?temperature=0.5") == {"temperature": 0.5}


@pytest.mark.parametrize(
    ("spec", "said"),
    [
        ("anthropic:c?reasoning_effort=high", "anthropic models have no option 'reasoning_effort'"),
        ("openai-responses:g?reasoning_effort=ultra", "reasoning_effort must be one of none,"),
        ("openai-responses:g?strict_tools=yes", "strict_tools must be true or false"),
        ("anthropic:c?thinking_budget=lots", "thinking_budget must be a whole number"),
        ("anthropic:c?thinking_budget", "expected name=value options"),
        ("anthropic:c?max_tokens=1&max_tokens=2", "option max_tokens is given twice"),
        ("openai-chat:gpt-4.1", "unknown provider 'openai-chat'"),
    ],
)
def test_bad_options_are_refused_naming_the_spec(spec: str, said: str) -> None:
    with pytest.raises(ConfigurationError, match=re.escape(said)):
        canonical(spec)


def test_a_spec_builds_its_model_with_its_options() -> None:
    prices = {"openai:gpt-5": Price(input=1.25, output=10.0)}
    options = ModelOptions(
        openai_api_key="sk-test", anthropic_api_key="sk-ant-test", max_tokens=500, prices=prices
    )
    model = model_from_spec(
        "openai-responses:gpt-5?reasoning_effort=low&strict_tools=true&max_tokens=900", options
    )
    assert isinstance(model, OpenAIResponsesModel)
    assert (model.reasoning_effort, model.strict_tools, model.max_tokens) == ("low", True, 900)
    assert model.name == "openai-responses:gpt-5"
    assert model.price == prices["openai:gpt-5"]  # the same model through either API

    claude = model_from_spec("anthropic:claude-x?thinking_budget=2048&max_tokens=8192", KEYS)
    assert isinstance(claude, AnthropicModel)
    assert (claude.thinking_budget, claude.max_tokens) == (2048, 8192)

    chat = model_from_spec("openai:gpt-4.1?temperature=0.5", options)
    assert isinstance(chat, OpenAIModel) and chat.temperature == 0.5 and chat.max_tokens == 500

    with pytest.raises(ConfigurationError, match="below max_tokens"):
        model_from_spec("anthropic:claude-x?thinking_budget=4096", KEYS)


async def test_agents_with_the_same_options_share_a_model() -> None:
    resolver = ModelResolver(KEYS)
    try:
        high = resolver("openai-responses:gpt-5?reasoning_effort=high")
        assert resolver("OPENAI-RESPONSES:gpt-5?reasoning_effort=high") is high
        assert resolver("openai-responses:gpt-5?reasoning_effort=low") is not high
        assert resolver("openai-responses:gpt-5") is not high
    finally:
        await resolver.aclose()


def test_the_settings_name_the_key_a_responses_model_needs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in ("OPENAI_API_KEY", "SIGNOFF_OPENAI_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    settings = Settings(model="openai-responses:gpt-5?reasoning_effort=high")
    assert settings.model == "openai-responses:gpt-5?reasoning_effort=high"
    resolver = SettingsModelResolver(model_options(settings))
    with pytest.raises(ConfigurationError, match="SIGNOFF_OPENAI_API_KEY is not set"):
        resolver("openai-responses:gpt-5")


def _documented_block() -> str:
    page = (REPO / "docs" / "agents-file.md").read_text(encoding="utf-8")
    [block] = [
        code
        for code in re.findall(r"^```toml\n(.*?)^```$", page, re.S | re.M)
        if "model_options" in code and "[servers." not in code
    ]
    return str(block)


def test_the_documented_model_options_load(tmp_path: Path) -> None:
    path = tmp_path / "agents.toml"
    path.write_text(_documented_block())
    agents = {agent.name: agent for agent in load_agents_file(path).agents}
    assert agents["payments"].model == (
        "openai-responses:gpt-5?reasoning_effort=high&reasoning_summary=auto&strict_tools=true"
    )
    assert agents["reviewer"].model == (
        "anthropic:claude-sonnet-4-5?max_tokens=16000&thinking_budget=4096"
    )
    model = model_from_spec(str(agents["reviewer"].model), KEYS)
    assert isinstance(model, AnthropicModel) and model.thinking_budget == 4096


@pytest.mark.parametrize(
    ("model", "options", "said"),
    [
        (
            "openai:gpt-4.1",
            "{ reasoning_effort = 'high' }",
            "agents.a.model_options (line 4): model 'openai:gpt-4.1': openai models have no "
            "option 'reasoning_effort'",
        ),
        (
            "anthropic:claude-x",
            "{ thinking_budget = 'big' }",
            "agents.a.model_options (line 4): model 'anthropic:claude-x': option "
            "thinking_budget must be a whole number",
        ),
        (
            "runtime:ScriptedModel",
            "{ max_tokens = 10 }",
            "agents.a.model_options (line 4): only provider:model specs take model options",
        ),
    ],
)
def test_bad_model_options_in_the_agents_file_name_their_key(
    tmp_path: Path, model: str, options: str, said: str
) -> None:
    path = tmp_path / "agents.toml"
    path.write_text(
        f'[agents.a]\ninstructions = "x"\nmodel = "{model}"\nmodel_options = {options}\n'
    )
    with pytest.raises(ConfigurationError) as caught:
        load_agents_file(path)
    assert said in str(caught.value)


async def test_chat_completions_leave_other_providers_state_out(
    fake: FakeLLM, models: ModelFactory
) -> None:
    model = models("openai")
    fake.script(Turn.say("Still here."))
    transcript: list[dict[str, Any]] = [
        {"role": "user", "content": "Hi"},
        {
            "role": "assistant",
            "content": "Hello.",
            "provider_state": {"provider": "anthropic", "blocks": [{"type": "thinking"}]},
        },
        {"role": "user", "content": "Still there?"},
    ]
    answer = await model.complete(ModelRequest(model=model.name, messages=transcript, tools=[]))
    assert answer.text == "Still here."
    [seen] = fake.requests
    assert seen.problem is None
    assert all("provider_state" not in m for m in seen.messages)
    assert "provider_state" in transcript[1]  # the run's transcript keeps it
