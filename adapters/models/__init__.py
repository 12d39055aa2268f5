"""Provider models: OpenAI-compatible Chat Completions and Anthropic Messages.

Each implements `runtime.Model` on its provider's official SDK (the ``openai`` and
``anthropic`` extras) and translates the SDK's errors into `runtime.ModelError`.

- `OpenAIModel`: OpenAI, Azure OpenAI (v1 endpoint), vLLM, Ollama, llama.cpp, LiteLLM ...
- `AnthropicModel`: Claude models.
- `model_from_spec` / `ModelResolver`: ``"openai:gpt-4.1-mini"`` and
  ``"anthropic:claude-sonnet-4-5"`` as models, for agents that name their model by spec.
- `Price`: prices per million tokens, for each call's cost.

The SDKs are imported only when a provider model is built, so this package imports
without either extra installed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from adapters.models.pricing import Price, priced
from adapters.models.specs import (
    PROVIDERS,
    ModelOptions,
    ModelResolver,
    canonical,
    model_from_spec,
    parse_spec,
)

if TYPE_CHECKING:
    from adapters.models.anthropic import AnthropicModel
    from adapters.models.openai import OpenAIModel


def __getattr__(name: str) -> Any:
    if name == "OpenAIModel":
        from adapters.models.openai import OpenAIModel

        return OpenAIModel
    if name == "AnthropicModel":
        from adapters.models.anthropic import AnthropicModel

        return AnthropicModel
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "PROVIDERS",
    "AnthropicModel",
    "ModelOptions",
    "ModelResolver",
    "OpenAIModel",
    "Price",
    "canonical",
    "model_from_spec",
    "parse_spec",
    "priced",
]
