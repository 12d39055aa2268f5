"""Pure parts of the provider models: transcript translation, stop reasons, usage and
prices, error classification, specs, the resolver and the settings."""

from __future__ import annotations

import pytest

from adapters.models import (
    ModelOptions,
    ModelResolver,
    OpenAIModel,
    Price,
    canonical,
    parse_spec,
)
from adapters.models.anthropic_transcript import from_message, to_messages, to_tools
from adapters.models.errors import kind_of_status, provider_message
from bot.settings import load_settings
from bot.wiring import model_options, model_resolver, with_model_setting
from runtime import (
    Agent,
    ConfigurationError,
    MemoryStore,
    ModelErrorKind,
    Runtime,
    ScriptedModel,
    StopReason,
    Usage,
    final_reply,
    usage_of_events,
)
from runtime.domain.model import parse_chat_completion


def call(id_: str, name: str, arguments: str) -> dict[str, object]:
    return {"id": id_, "type": "function", "function": {"name": name, "arguments": arguments}}


def test_transcript_to_anthropic_messages() -> None:
    system, messages = to_messages(
        [
            {"role": "system", "content": "Be careful."},
            {"role": "user", "content": "earlier question"},
            {"role": "assistant", "content": ""},  # an empty earlier answer is dropped
            {"role": "user", "content": "Pay both."},
            {
                "role": "assistant",
                "content": "Paying.",
                "tool_calls": [
                    call("call.1", "pay", '{"to": "A"}'),
                    call("call_2", "pay", '{"to": '),  # never valid JSON
                ],
            },
            {"role": "tool", "tool_call_id": "call.1", "content": "paid A"},
            {"role": "tool", "tool_call_id": "call_2", "content": "Error: not valid JSON"},
        ]
    )
    assert system == "Be careful."
    assert messages == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "earlier question"},
                {"type": "text", "text": "Pay both."},
            ],
        },
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Paying."},
                {"type": "tool_use", "id": "call_1", "name": "pay", "input": {"to": "A"}},
                {"type": "tool_use", "id": "call_2", "name": "pay", "input": {}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "call_1", "content": "paid A"},
                {
                    "type": "tool_result",
                    "tool_use_id": "call_2",
                    "content": "Error: not valid JSON",
                    "is_error": True,
                },
            ],
        },
    ]


def test_tools_to_anthropic() -> None:
    spec = {
        "type": "function",
        "function": {"name": "pay", "description": "Pay.", "parameters": {"type": "object"}},
    }
    assert to_tools([spec]) == [
        {"name": "pay", "description": "Pay.", "input_schema": {"type": "object"}}
    ]


@pytest.mark.parametrize(
    ("stop_reason", "calls", "expected"),
    [
        ("end_turn", False, StopReason.END),
        ("tool_use", True, StopReason.TOOL_CALLS),
        ("max_tokens", False, StopReason.LENGTH),
        ("max_tokens", True, StopReason.LENGTH),
        ("refusal", False, StopReason.REFUSAL),
        ("something_new", False, StopReason.END),
        ("something_new", True, StopReason.TOOL_CALLS),
    ],
)
def test_anthropic_stop_reasons(stop_reason: str, calls: bool, expected: StopReason) -> None:
    content: list[dict[str, object]] = [
        {"type": "text", "text": "Hello"},
        {"type": "text", "text": "there"},
    ]
    if calls:
        content.append({"type": "tool_use", "id": "t1", "name": "pay", "input": {"to": "A"}})
    response = from_message({"content": content, "stop_reason": stop_reason, "usage": {}})
    assert response.stop_reason is expected
    assert response.text == "Hello\nthere"
    assert [c.arguments for c in response.tool_calls] == (['{"to": "A"}'] if calls else [])


def test_anthropic_usage_counts_cache_reads_and_writes_as_prompt_tokens() -> None:
    response = from_message(
        {
            "content": [{"type": "text", "text": "ok"}],
            "stop_reason": "end_turn",
            "usage": {
                "input_tokens": 10,
                "output_tokens": 7,
                "cache_read_input_tokens": 300,
                "cache_creation_input_tokens": 50,
            },
        }
    )
    assert response.usage == Usage(
        prompt_tokens=360, completion_tokens=7, cached_tokens=300, cache_write_tokens=50
    )


def test_chat_completion_stop_reasons_and_cached_tokens() -> None:
    payload = final_reply("partial")
    payload["choices"][0]["finish_reason"] = "length"
    payload["usage"]["prompt_tokens_details"] = {"cached_tokens": 12}
    response = parse_chat_completion(payload)
    assert response.stop_reason is StopReason.LENGTH
    assert response.usage.cached_tokens == 12
    payload["choices"][0]["finish_reason"] = "content_filter"
    assert parse_chat_completion(payload).stop_reason is StopReason.REFUSAL
    payload["choices"][0]["finish_reason"] = "stop"
    payload["choices"][0]["message"]["refusal"] = "No."
    refused = parse_chat_completion(payload)
    assert (refused.stop_reason, refused.refusal) == (StopReason.REFUSAL, "No.")


def test_prices() -> None:
    price = Price(input=3.0, output=15.0, cached_input=0.3, cache_write=3.75)
    usage = Usage(
        prompt_tokens=1_000_000,
        completion_tokens=100_000,
        cached_tokens=600_000,
        cache_write_tokens=100_000,
    )
    # 300k plain * 3 + 600k * 0.3 + 100k * 3.75 + 100k * 15, per million
    assert price.cost(usage) == pytest.approx(0.9 + 0.18 + 0.375 + 1.5)
    assert Price(input=1.0, output=2.0).cost(Usage(100, 50, cached_tokens=100)) == 0.0002
    with pytest.raises(ConfigurationError):
        Price(input=-1.0, output=1.0)


def test_usage_of_events_sums_model_calls_only() -> None:
    events = [
        {"kind": "model_call", "data": {"prompt_tokens": 10, "completion_tokens": 2, "cost": 0.5}},
        {"kind": "tool_completed", "data": {"prompt_tokens": 999}},
        {"kind": "model_call", "data": {"prompt_tokens": 5, "cached_tokens": 4, "cost": None}},
    ]
    assert usage_of_events(events) == Usage(15, 2, cached_tokens=4, cost=0.5)
    assert usage_of_events([]).cost is None


@pytest.mark.parametrize(
    ("status", "message", "body", "kind"),
    [
        (401, "bad key", None, ModelErrorKind.AUTHENTICATION),
        (403, "no", None, ModelErrorKind.PERMISSION),
        (404, "no such model", None, ModelErrorKind.NOT_FOUND),
        (408, "slow", None, ModelErrorKind.TIMEOUT),
        (429, "slow down", None, ModelErrorKind.RATE_LIMITED),
        (500, "oops", None, ModelErrorKind.SERVER),
        (529, "Overloaded", None, ModelErrorKind.SERVER),
        (400, "x", {"code": "context_length_exceeded"}, ModelErrorKind.CONTEXT_LENGTH),
        (400, "prompt is too long: 3 > 2", None, ModelErrorKind.CONTEXT_LENGTH),
        (400, "This model's maximum context length is 8192", None, ModelErrorKind.CONTEXT_LENGTH),
        (413, "request too large", None, ModelErrorKind.CONTEXT_LENGTH),
        (422, "bad field", None, ModelErrorKind.BAD_REQUEST),
    ],
)
def test_error_classification(
    status: int, message: str, body: object, kind: ModelErrorKind
) -> None:
    assert kind_of_status(status, message, body) is kind
    assert kind.retryable == (
        kind in {ModelErrorKind.RATE_LIMITED, ModelErrorKind.SERVER, ModelErrorKind.TIMEOUT}
    )


def test_provider_messages() -> None:
    assert provider_message({"error": {"message": "too\nlong"}}, "x") == "too long"
    assert provider_message({"type": "error", "error": {"message": "m"}}, "x") == "m"
    assert provider_message("plain text", "x") == "plain text"
    assert provider_message(None, "Error code: 500") == "Error code: 500"


def test_specs() -> None:
    assert parse_spec("openai:gpt-4.1-mini") == ("openai", "gpt-4.1-mini")
    assert parse_spec(" Anthropic : claude-sonnet-4-5 ") == ("anthropic", "claude-sonnet-4-5")
    assert parse_spec("openai:llama3.1:8b") == ("openai", "llama3.1:8b")
    assert canonical("OPENAI:gpt-x") == "openai:gpt-x"
    for bad in ("gpt-4", "openai:", "mistral:large", ":x"):
        with pytest.raises(ConfigurationError):
            parse_spec(bad)


async def test_resolver_shares_one_model_per_spec_and_closes_them() -> None:
    resolver = ModelResolver(ModelOptions(openai_api_key="k", anthropic_api_key="k"))
    first = resolver("openai:gpt-x")
    assert resolver("OPENAI:gpt-x") is first
    assert resolver("anthropic:claude-x") is not first
    assert first.name == "openai:gpt-x"
    assert sorted(resolver.models) == ["anthropic:claude-x", "openai:gpt-x"]
    await resolver.aclose()
    assert resolver.models == {}


async def test_runtime_closes_the_models_its_resolver_built() -> None:
    resolver = ModelResolver(ModelOptions(openai_api_key="k", anthropic_api_key="k"))
    given = ScriptedModel([final_reply("hi")])
    runtime = Runtime(
        MemoryStore(),
        [Agent("shop", "Sell.", "openai:gpt-x"), Agent("mine", "Mine.", given)],
        model_resolver=resolver,
    )
    built = resolver.models["openai:gpt-x"]
    assert isinstance(built, OpenAIModel)
    assert not built.client.is_closed()
    await runtime.aclose()
    assert built.client.is_closed()
    assert resolver.models == {}


def test_agents_naming_a_spec_need_a_resolver() -> None:
    agent = Agent("shop", "Sell.", "openai:gpt-x")
    assert agent.model_name == "openai:gpt-x"
    with pytest.raises(ConfigurationError, match=r"agent 'shop'.*model_resolver"):
        Runtime(MemoryStore(), [agent])
    with pytest.raises(ConfigurationError, match="the model spec is empty"):
        Agent("shop", "Sell.", " ")


def test_with_model_copies_the_agent() -> None:
    scripted = ScriptedModel([final_reply("hi")])
    agent = Agent("shop", "Sell.", scripted)
    other = agent.with_model("anthropic:claude-x")
    assert agent.model is scripted and other.model == "anthropic:claude-x"
    assert other.name == agent.name and other.tools == agent.tools
    assert other.tools is not agent.tools


def test_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SIGNOFF_MODEL", "Anthropic:claude-x")
    monkeypatch.setenv("SIGNOFF_ANTHROPIC_API_KEY", "sk-secret-value")
    monkeypatch.setenv("SIGNOFF_MODEL_PRICES", '{"ANTHROPIC:claude-x": {"input": 3, "output": 15}}')
    settings = load_settings()
    assert settings.model == "anthropic:claude-x"
    options = model_options(settings)
    assert options.anthropic_api_key == "sk-secret-value"
    assert options.prices == {"anthropic:claude-x": Price(input=3.0, output=15.0)}
    [agent] = with_model_setting(settings, [Agent("a", "b", ScriptedModel([]))])
    assert agent.model == "anthropic:claude-x"
    model = model_resolver(settings)(agent.model)
    assert getattr(model, "price", None) == Price(input=3.0, output=15.0)

    monkeypatch.setenv("SIGNOFF_OPENAI_API_KEY", "")
    with pytest.raises(ConfigurationError) as caught:
        load_settings()
    assert str(caught.value).startswith("SIGNOFF_OPENAI_API_KEY: ")
    assert "sk-" not in str(caught.value)
    monkeypatch.delenv("SIGNOFF_OPENAI_API_KEY")

    for name, value, needle in [
        ("SIGNOFF_MODEL", "gpt-4", "SIGNOFF_MODEL: model 'gpt-4': expected <provider>:<model>"),
        ("SIGNOFF_OPENAI_BASE_URL", "localhost:11434", "SIGNOFF_OPENAI_BASE_URL: expected an http"),
        ("SIGNOFF_MODEL_MAX_RETRIES", "-1", "SIGNOFF_MODEL_MAX_RETRIES: "),
        ("SIGNOFF_MODEL_PRICES", '{"x": {"input": 1, "output": 1}}', "SIGNOFF_MODEL_PRICES: "),
        (
            "SIGNOFF_MODEL_PRICES",
            '{"openai:x": {"input": -1, "output": 1}}',
            "SIGNOFF_MODEL_PRICES",
        ),
    ]:
        with monkeypatch.context() as patch:
            patch.setenv(name, value)
            with pytest.raises(ConfigurationError) as caught:
                load_settings()
            assert str(caught.value).startswith(needle), str(caught.value)


def test_the_sdk_key_variables_are_the_fallback(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-the-sdk")
    monkeypatch.setenv("SIGNOFF_ANTHROPIC_API_KEY", "sk-signoff")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ignored")
    options = model_options(load_settings())
    assert options.openai_api_key == "sk-from-the-sdk"
    assert options.anthropic_api_key == "sk-signoff"
    monkeypatch.delenv("OPENAI_API_KEY")
    with pytest.raises(ConfigurationError, match="SIGNOFF_OPENAI_API_KEY is not set"):
        model_resolver(load_settings())("openai:gpt-x")
