"""Model specs (``"openai:gpt-4.1-mini"``) and the resolver a `runtime.Runtime` is given.

A spec is ``<provider>:<model>``; the model part is passed on as it is, so names with a
colon of their own (Ollama's ``llama3.1:8b``) work: ``openai:llama3.1:8b``. Providers:

- ``openai``: Chat Completions (`OpenAIModel`), any OpenAI-compatible server;
- ``openai-responses``: OpenAI's Responses API (`OpenAIResponsesModel`);
- ``anthropic``: the Messages API (`AnthropicModel`).

Model options follow a ``?``, as ``name=value`` pairs joined by ``&``:
``openai-responses:gpt-5?reasoning_effort=high&strict_tools=true``,
``anthropic:claude-sonnet-4-5?thinking_budget=4096``. `MODEL_OPTIONS` lists each
provider's; `with_options` adds a table of them to a spec (the agents file's
``model_options``). A spec's canonical form lists them sorted, so two agents with the same
model and options share one model.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal, get_args

from adapters.models.openai_responses_transcript import EFFORTS, SUMMARIES, TOOL_CHOICES
from adapters.models.pricing import Price
from runtime import ConfigurationError, Model

Provider = Literal["openai", "openai-responses", "anthropic"]
PROVIDERS: tuple[str, ...] = get_args(Provider)

OptionValue = str | int | float | bool

MODEL_OPTIONS: dict[str, dict[str, type]] = {
    "openai": {"max_tokens": int, "temperature": float, "tool_images": bool},
    "openai-responses": {
        "max_tokens": int,
        "temperature": float,
        "reasoning_effort": str,
        "reasoning_summary": str,
        "strict_tools": bool,
        "tool_choice": str,
        "parallel_tool_calls": bool,
        "store": bool,
        "tool_images": bool,
    },
    "anthropic": {
        "max_tokens": int,
        "temperature": float,
        "thinking_budget": int,
        "cache_prompt": bool,
        "tool_images": bool,
    },
}
"""The options a spec may give each provider's model, with their types (the keyword
arguments of `OpenAIModel`, `OpenAIResponsesModel` and `AnthropicModel`)."""


@dataclass(frozen=True, slots=True)
class ModelOptions:
    """How provider models are built from specs.

    Attributes:
        openai_api_key: Key for ``openai:`` and ``openai-responses:`` models (``None``:
            the SDK reads ``OPENAI_API_KEY``).
        openai_base_url: Endpoint of ``openai:`` and ``openai-responses:`` models
            (``None``: OpenAI's).
        anthropic_api_key: Key for ``anthropic:`` models (``None``: the SDK reads
            ``ANTHROPIC_API_KEY``).
        anthropic_base_url: Endpoint of ``anthropic:`` models (``None``: Anthropic's).
        timeout_seconds: Seconds one HTTP attempt may take.
        max_retries: Retries of rate limits, server errors and timeouts by the SDK.
        max_tokens: Output token limit per answer (``None``: OpenAI-compatible servers
            use their default, Anthropic 4096); a spec's own ``max_tokens`` option wins.
        prices: Prices per million tokens by spec (``"openai:gpt-4.1-mini"``).
        stream: Whether models stream their answers when the runtime asks for the
            text as it arrives (``ModelRequest.on_text``).
    """

    openai_api_key: str | None = None
    openai_base_url: str | None = None
    anthropic_api_key: str | None = None
    anthropic_base_url: str | None = None
    timeout_seconds: float = 60.0
    max_retries: int = 2
    max_tokens: int | None = None
    prices: Mapping[str, Price] = field(default_factory=dict)
    stream: bool = True


def parse_spec(spec: str) -> tuple[Provider, str]:
    """Split ``"openai:gpt-4.1-mini"`` into its provider and model name (without the
    options, see `spec_options`).

    Raises:
        ConfigurationError: The spec has no provider, an unknown one, or no model name.
    """
    provider, sep, rest = spec.strip().partition(":")
    provider = provider.strip().lower()
    model = rest.partition("?")[0].strip()
    choices = ", ".join(f"{p}:<model>" for p in PROVIDERS)
    if not sep or not model:
        raise ConfigurationError(
            f"model {spec!r}: expected <provider>:<model>, e.g. openai:gpt-4.1-mini ({choices})"
        )
    for known in get_args(Provider):
        if provider == known:
            return known, model
    raise ConfigurationError(f"model {spec!r}: unknown provider {provider!r} ({choices})")


def spec_options(spec: str) -> dict[str, OptionValue]:
    """The model options a spec gives (``?name=value&...``), typed and checked.

    Raises:
        ConfigurationError: A bad spec, an option its provider does not have, or a value
            of the wrong type.
    """
    provider, _ = parse_spec(spec)
    query = spec.strip().partition(":")[2].partition("?")[2].strip()
    raw: dict[str, str] = {}
    for pair in query.split("&") if query else []:
        name, sep, value = pair.partition("=")
        name = name.strip()
        if not sep or not name:
            raise ConfigurationError(f"model {spec!r}: expected name=value options after '?'")
        if name in raw:
            raise ConfigurationError(f"model {spec!r}: option {name} is given twice")
        raw[name] = value.strip()
    return check_options(provider, raw, f"model {spec!r}")


def check_options(
    provider: str, options: Mapping[str, object], where: str
) -> dict[str, OptionValue]:
    """`options` of a `provider` model, typed (text is read as its type) and checked.

    Raises:
        ConfigurationError: An option the provider's model does not have, or a value of
            the wrong type.
    """
    known = MODEL_OPTIONS.get(provider, {})
    checked: dict[str, OptionValue] = {}
    for name, value in options.items():
        kind = known.get(name)
        if kind is None:
            names = ", ".join(sorted(known)) or "none"
            raise ConfigurationError(
                f"{where}: {provider} models have no option {name!r} (options: {names})"
            )
        checked[name] = _typed(name, value, kind, where)
    return checked


def _typed(name: str, value: object, kind: type, where: str) -> OptionValue:
    problem = f"{where}: option {name} must be {_KIND_NAMES[kind]} (not {value!r})"
    if kind is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false"):
            return value.lower() == "true"
        raise ConfigurationError(problem)
    if isinstance(value, bool):
        raise ConfigurationError(problem)
    if kind is int:
        if isinstance(value, int):
            return value
        if isinstance(value, str) and value.strip().lstrip("-").isdigit():
            return int(value)
        raise ConfigurationError(problem)
    if kind is float:
        if isinstance(value, int | float):
            return float(value)
        if isinstance(value, str):
            try:
                return float(value)
            except ValueError:
                raise ConfigurationError(problem) from None
        raise ConfigurationError(problem)
    choices = _CHOICES.get(name)
    if choices is not None:
        if value in choices:
            return str(value)
        raise ConfigurationError(f"{where}: option {name} must be one of {', '.join(choices)}")
    raise ConfigurationError(problem)


_CHOICES: dict[str, tuple[str, ...]] = {
    "reasoning_effort": EFFORTS,
    "reasoning_summary": SUMMARIES,
    "tool_choice": TOOL_CHOICES,
}

_KIND_NAMES: dict[type, str] = {
    bool: "true or false",
    int: "a whole number",
    float: "a number",
    str: "a word",
}


def _render(value: OptionValue) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return f"{value:g}" if isinstance(value, float) else str(value)


def with_options(spec: str, options: Mapping[str, object]) -> str:
    """`spec` with `options` added (over the spec's own), in canonical form.

    Raises:
        ConfigurationError: As `spec_options` and `check_options`.
    """
    provider, model = parse_spec(spec)
    merged: dict[str, OptionValue] = {
        **spec_options(spec),
        **check_options(provider, options, f"model {spec!r}"),
    }
    query = "&".join(f"{name}={_render(merged[name])}" for name in sorted(merged))
    return f"{provider}:{model}" + (f"?{query}" if query else "")


def canonical(spec: str) -> str:
    """The spec as ``provider:model`` with the provider in lower case, and its options
    (if any) checked and sorted.

    Raises:
        ConfigurationError: As `spec_options`.
    """
    return with_options(spec, {})


def model_from_spec(spec: str, options: ModelOptions | None = None) -> Model:
    """Build the provider model a spec names, with the spec's own options.

    Raises:
        ConfigurationError: A bad spec or option, a provider whose extra is not installed
            (``pip install 'signoff[openai]'``), or no API key.
    """
    chosen = options or ModelOptions()
    provider, model = parse_spec(spec)
    own = spec_options(spec)
    price = chosen.prices.get(f"{provider}:{model}")
    common: dict[str, object] = {
        "timeout": chosen.timeout_seconds,
        "max_retries": chosen.max_retries,
        "stream": chosen.stream,
    }
    if provider in ("openai", "openai-responses"):
        common |= {"api_key": chosen.openai_api_key, "base_url": chosen.openai_base_url}
        if provider == "openai-responses":
            # The same model costs the same through either OpenAI API.
            price = price or chosen.prices.get(f"openai:{model}")
        common |= {"max_tokens": chosen.max_tokens, "price": price, **own}
        try:
            if provider == "openai":
                from adapters.models.openai import OpenAIModel

                return OpenAIModel(model, **common)  # type: ignore[arg-type]
            from adapters.models.openai_responses import OpenAIResponsesModel

            return OpenAIResponsesModel(model, **common)  # type: ignore[arg-type]
        except ImportError as exc:
            raise ConfigurationError(
                f"model {spec!r} needs the openai SDK: pip install 'signoff[openai]' ({exc})"
            ) from exc
    try:
        from adapters.models.anthropic import DEFAULT_MAX_TOKENS, AnthropicModel
    except ImportError as exc:
        raise ConfigurationError(
            f"model {spec!r} needs the anthropic SDK: pip install 'signoff[anthropic]' ({exc})"
        ) from exc
    common |= {
        "api_key": chosen.anthropic_api_key,
        "base_url": chosen.anthropic_base_url,
        "max_tokens": chosen.max_tokens or DEFAULT_MAX_TOKENS,
        "price": price,
        **own,
    }
    return AnthropicModel(model, **common)  # type: ignore[arg-type]


class ModelResolver:
    """Turns specs into models for `runtime.Runtime(model_resolver=...)`, one per spec.

    Agents naming the same spec share one model (one HTTP connection pool). Close the
    models with `aclose` when the process is done with them.

    Args:
        options: How models are built.
    """

    def __init__(self, options: ModelOptions | None = None) -> None:
        self.options = options or ModelOptions()
        self._models: dict[str, Model] = {}

    def __call__(self, spec: str) -> Model:
        """The model for `spec` (built on first use).

        Raises:
            ConfigurationError: As `model_from_spec`.
        """
        key = canonical(spec)
        model = self._models.get(key)
        if model is None:
            model = model_from_spec(key, self.options)
            self._models[key] = model
        return model

    @property
    def models(self) -> dict[str, Model]:
        """The models built so far, by spec."""
        return dict(self._models)

    async def aclose(self) -> None:
        """Close every model built so far."""
        models, self._models = list(self._models.values()), {}
        for model in models:
            close = getattr(model, "aclose", None)
            if close is not None:
                await close()
