"""Provider models: OpenAI-compatible Chat Completions, OpenAI Responses, Anthropic Messages.

Each implements `runtime.Model` on its provider's official SDK (the ``openai`` and
``anthropic`` extras) and translates the SDK's errors into `runtime.ModelError`.

- `OpenAIModel`: OpenAI, Azure OpenAI (v1 endpoint), vLLM, Ollama, llama.cpp, LiteLLM ...
- `OpenAIResponsesModel`: OpenAI's Responses API (reasoning effort, strict tools; the
  reasoning items kept with the transcript).
- `AnthropicModel`: Claude models (extended thinking, the thinking blocks kept with the
  transcript).
- `model_from_spec` / `ModelResolver`: ``"openai:gpt-4.1-mini"``,
  ``"openai-responses:gpt-5?reasoning_effort=high"`` and
  ``"anthropic:claude-sonnet-4-5"`` as models, for agents that name their model by spec.
- `Price`: prices per million tokens, for each call's cost.

The SDKs are imported only when a provider model is built, so this package imports
without either extra installed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from adapters.models.pricing import Price, priced
from adapters.models.specs import (
    MODEL_OPTIONS,
    PROVIDERS,
    ModelOptions,
    ModelResolver,
    canonical,
    model_from_spec,
    parse_spec,
    spec_options,
    with_options,
)

if TYPE_CHECKING:
    from adapters.models.anthropic import AnthropicModel
    from adapters.models.openai import OpenAIModel
    from adapters.models.openai_responses import OpenAIResponsesModel


def __getattr__(name: str) -> Any:
    if name == "OpenAIModel":
        from adapters.models.openai import OpenAIModel

        return OpenAIModel
    if name == "OpenAIResponsesModel":
        from adapters.models.openai_responses import OpenAIResponsesModel

        return OpenAIResponsesModel
    if name == "AnthropicModel":
        from adapters.models.anthropic import AnthropicModel

        return AnthropicModel
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "MODEL_OPTIONS",
    "PROVIDERS",
    "AnthropicModel",
    "ModelOptions",
    "ModelResolver",
    "OpenAIModel",
    "OpenAIResponsesModel",
    "Price",
    "canonical",
    "model_from_spec",
    "parse_spec",
    "priced",
    "spec_options",
    "with_options",
]
