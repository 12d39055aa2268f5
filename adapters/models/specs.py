"""Model specs (``"openai:gpt-4.1-mini"``) and the resolver a `runtime.Runtime` is given.

A spec is ``<provider>:<model>``; the model part is passed on as it is, so names with a
colon of their own (Ollama's ``llama3.1:8b``) work: ``openai:llama3.1:8b``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal, get_args

from adapters.models.pricing import Price
from runtime import ConfigurationError, Model

Provider = Literal["openai", "anthropic"]
PROVIDERS: tuple[str, ...] = get_args(Provider)


@dataclass(frozen=True, slots=True)
class ModelOptions:
    """How provider models are built from specs.

    Attributes:
        openai_api_key: Key for ``openai:`` models (``None``: the SDK reads
            ``OPENAI_API_KEY``).
        openai_base_url: Endpoint of ``openai:`` models (``None``: OpenAI's).
        anthropic_api_key: Key for ``anthropic:`` models (``None``: the SDK reads
            ``ANTHROPIC_API_KEY``).
        anthropic_base_url: Endpoint of ``anthropic:`` models (``None``: Anthropic's).
        timeout_seconds: Seconds one HTTP attempt may take.
        max_retries: Retries of rate limits, server errors and timeouts by the SDK.
        max_tokens: Output token limit per answer (``None``: OpenAI-compatible servers
            use their default, Anthropic 4096).
        prices: Prices per million tokens by spec (``"openai:gpt-4.1-mini"``).
    """

    openai_api_key: str | None = None
    openai_base_url: str | None = None
    anthropic_api_key: str | None = None
    anthropic_base_url: str | None = None
    timeout_seconds: float = 60.0
    max_retries: int = 2
    max_tokens: int | None = None
    prices: Mapping[str, Price] = field(default_factory=dict)


def parse_spec(spec: str) -> tuple[Provider, str]:
    """Split ``"openai:gpt-4.1-mini"`` into its provider and model name.

    Raises:
        ConfigurationError: The spec has no provider, an unknown one, or no model name.
    """
    provider, sep, model = spec.strip().partition(":")
    provider = provider.strip().lower()
    model = model.strip()
    choices = ", ".join(f"{p}:<model>" for p in PROVIDERS)
    if not sep or not model:
        raise ConfigurationError(
            f"model {spec!r}: expected <provider>:<model>, e.g. openai:gpt-4.1-mini ({choices})"
        )
    if provider == "openai":
        return "openai", model
    if provider == "anthropic":
        return "anthropic", model
    raise ConfigurationError(f"model {spec!r}: unknown provider {provider!r} ({choices})")


def canonical(spec: str) -> str:
    """The spec as ``provider:model`` with the provider in lower case."""
    provider, model = parse_spec(spec)
    return f"{provider}:{model}"


def model_from_spec(spec: str, options: ModelOptions | None = None) -> Model:
    """Build the provider model a spec names.

    Raises:
        ConfigurationError: A bad spec, a provider whose extra is not installed
            (``pip install 'signoff[openai]'``), or no API key.
    """
    chosen = options or ModelOptions()
    provider, model = parse_spec(spec)
    price = chosen.prices.get(f"{provider}:{model}")
    if provider == "openai":
        try:
            from adapters.models.openai import OpenAIModel
        except ImportError as exc:
            raise ConfigurationError(
                f"model {spec!r} needs the openai SDK: pip install 'signoff[openai]' ({exc})"
            ) from exc
        return OpenAIModel(
            model,
            api_key=chosen.openai_api_key,
            base_url=chosen.openai_base_url,
            timeout=chosen.timeout_seconds,
            max_retries=chosen.max_retries,
            max_tokens=chosen.max_tokens,
            price=price,
        )
    try:
        from adapters.models.anthropic import DEFAULT_MAX_TOKENS, AnthropicModel
    except ImportError as exc:
        raise ConfigurationError(
            f"model {spec!r} needs the anthropic SDK: pip install 'signoff[anthropic]' ({exc})"
        ) from exc
    return AnthropicModel(
        model,
        api_key=chosen.anthropic_api_key,
        base_url=chosen.anthropic_base_url,
        timeout=chosen.timeout_seconds,
        max_retries=chosen.max_retries,
        max_tokens=chosen.max_tokens or DEFAULT_MAX_TOKENS,
        price=price,
    )


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
