"""`AnthropicModel`: the Messages API with tools on the official ``anthropic`` SDK.

The run's transcript stays OpenAI-shaped inside signoff; `adapters.models.
anthropic_transcript` translates it into Messages (system prompt, ``tool_use`` and
``tool_result`` blocks) and the answer back. With extended thinking
(``thinking_budget``), the answer's thinking blocks are kept with the transcript and sent
back unchanged with their turn, so a run parked between a tool call and its result
continues on any process.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import anthropic

from adapters.models import streaming
from adapters.models.anthropic_transcript import from_message, to_messages, to_tools
from adapters.models.errors import (
    connection_error,
    invalid_response,
    status_error,
    timeout_error,
)
from adapters.models.pricing import Price, priced
from runtime import ConfigurationError, ModelError, ModelRequest, ModelResponse
from runtime.edges import TextSink

PROVIDER = "anthropic"
DEFAULT_MAX_TOKENS = 4096
MIN_THINKING_BUDGET = 1024


class AnthropicModel:
    """A Claude model behind the Messages API.

    Args:
        model: The model name, e.g. ``claude-sonnet-4-5``.
        api_key: The API key; by default the SDK reads ``ANTHROPIC_API_KEY``.
        base_url: Another endpoint than Anthropic's (a gateway, a test fake).
        timeout: Seconds one HTTP attempt may take.
        max_retries: How often the SDK retries a 408, 409, 429, 5xx (529 "overloaded"),
            timeout or dropped connection (with backoff, honouring ``Retry-After``).
        max_tokens: Output token limit of one answer (the API requires one).
        temperature: Sampling temperature; the API's default when ``None``.
        price: Prices per million tokens, to record each call's cost.
        cache_prompt: Mark the system prompt and the tool definitions for Anthropic's
            prompt cache (``cache_control: ephemeral``): later turns read them at the
            cached price.
        thinking_budget: Turn extended thinking on with this many tokens for it
            (``thinking: {"type": "enabled", "budget_tokens": N}``): at least 1024 and
            below `max_tokens`. The API then takes no `temperature`.
        default_headers: Extra headers on every request (a beta flag, a gateway's ...).
        name: The name recorded with every call (default ``anthropic:<model>``).
        stream: Stream the answer (server-sent events) when the runtime asks for its
            text as it arrives (`ModelRequest.on_text`); thinking never goes there.
        tool_images: Send tool results' images to the model (else each is a line of
            text saying it is not shown; for a model without image input).

    Raises:
        ConfigurationError: No API key was given and ``ANTHROPIC_API_KEY`` is not set, or
            a thinking budget the API would refuse.
    """

    def __init__(
        self,
        model: str,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        timeout: float = 60.0,
        max_retries: int = 2,
        max_tokens: int = DEFAULT_MAX_TOKENS,
        temperature: float | None = None,
        price: Price | None = None,
        cache_prompt: bool = False,
        thinking_budget: int | None = None,
        default_headers: Mapping[str, str] | None = None,
        name: str | None = None,
        stream: bool = True,
        tool_images: bool = True,
    ) -> None:
        if not model.strip():
            raise ConfigurationError("AnthropicModel needs a model name")
        if max_tokens < 1:
            raise ConfigurationError("AnthropicModel: max_tokens must be at least 1")
        if thinking_budget is not None:
            if not MIN_THINKING_BUDGET <= thinking_budget < max_tokens:
                raise ConfigurationError(
                    f"AnthropicModel: thinking_budget must be at least {MIN_THINKING_BUDGET} "
                    f"and below max_tokens ({max_tokens}), not {thinking_budget}"
                )
            if temperature is not None and temperature != 1:
                raise ConfigurationError(
                    "AnthropicModel: extended thinking takes no temperature (leave it unset)"
                )
        self.model = model.strip()
        self.name = name or f"{PROVIDER}:{self.model}"
        self.max_tokens = max_tokens
        self.temperature = temperature
        self.price = price
        self.stream = stream
        self.tool_images = tool_images
        self.cache_prompt = cache_prompt
        self.thinking_budget = thinking_budget
        self._timeout = timeout
        try:
            self.client = anthropic.AsyncAnthropic(
                api_key=api_key,
                base_url=base_url,
                timeout=timeout,
                max_retries=max_retries,
                default_headers=dict(default_headers) if default_headers else None,
            )
        except anthropic.AnthropicError as exc:
            raise ConfigurationError(
                f"AnthropicModel({self.model!r}): no API key: pass api_key or set ANTHROPIC_API_KEY"
            ) from exc
        if not (getattr(self.client, "api_key", None) or getattr(self.client, "auth_token", None)):
            raise ConfigurationError(
                f"AnthropicModel({self.model!r}): no API key: pass api_key or set ANTHROPIC_API_KEY"
            )

    def request_body(self, request: ModelRequest) -> dict[str, Any]:
        """The Messages API parameters for one turn."""
        system, messages = to_messages(request.messages, images=self.tool_images)
        body: dict[str, Any] = {
            "model": self.model,
            "max_tokens": self.max_tokens,
            "messages": messages,
        }
        if system:
            block: dict[str, Any] = {"type": "text", "text": system}
            if self.cache_prompt:
                block["cache_control"] = {"type": "ephemeral"}
            body["system"] = [block]
        if request.tools:
            tools = to_tools(request.tools)
            if self.cache_prompt:
                tools[-1] = {**tools[-1], "cache_control": {"type": "ephemeral"}}
            body["tools"] = tools
        if self.temperature is not None:
            body["temperature"] = self.temperature
        if self.thinking_budget is not None:
            body["thinking"] = {"type": "enabled", "budget_tokens": self.thinking_budget}
        return body

    async def complete(self, request: ModelRequest) -> ModelResponse:
        """Answer one turn.

        Raises:
            ModelError: The provider refused the call, or kept failing after the retries.
        """
        body = self.request_body(request)
        try:
            if request.on_text is not None and self.stream:
                on_text = request.on_text
                payload = await streaming.streamed_or_plain(
                    lambda: self._streamed(body, on_text),
                    lambda: self._plain(body),
                    self.client.max_retries,
                )
            else:
                payload = await self._plain(body)
        except anthropic.APIError as exc:
            raise _translate(exc, self._timeout) from exc
        try:
            response = from_message(payload)
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise invalid_response(PROVIDER, str(exc) or type(exc).__name__) from exc
        if self.price is None:
            return response
        return replace(response, usage=priced(response.usage, self.price))

    async def _plain(self, body: dict[str, Any]) -> dict[str, Any]:
        """The message of a call without streaming."""
        message = await self.client.messages.create(**body)
        payload: dict[str, Any] = message.model_dump(mode="json")
        return payload

    async def _streamed(self, body: dict[str, Any], on_text: TextSink) -> dict[str, Any]:
        """The message of a streamed call, its text passed to `on_text` meanwhile."""
        events: anthropic.AsyncStream[Any] = await self.client.messages.create(**body, stream=True)
        async with events:
            try:
                return await streaming.anthropic_message(events, on_text, PROVIDER)
            except anthropic.APITimeoutError:
                raise
            except anthropic.APIStatusError as exc:
                if exc.status_code != 200:
                    raise
                # An error event in place of the rest of the answer.
                raise streaming.error_event(PROVIDER, exc.body, exc.message) from exc
            except streaming.transport_errors(anthropic.APIConnectionError) as exc:
                raise streaming.broken_stream(PROVIDER, str(exc) or type(exc).__name__) from exc

    async def aclose(self) -> None:
        """Close the HTTP client (its connection pool)."""
        await self.client.close()

    def __repr__(self) -> str:
        return f"AnthropicModel({self.model!r}, base_url={str(self.client.base_url)!r})"


def _translate(exc: anthropic.APIError, timeout: float) -> ModelError:
    if isinstance(exc, anthropic.APITimeoutError):
        return timeout_error(PROVIDER, timeout)
    if isinstance(exc, anthropic.APIConnectionError):
        cause = exc.__cause__
        return connection_error(PROVIDER, str(cause) if cause is not None else exc.message)
    if isinstance(exc, anthropic.APIStatusError):
        return status_error(
            PROVIDER,
            exc.status_code,
            exc.body,
            exc.message,
            getattr(exc, "request_id", None),
        )
    return invalid_response(PROVIDER, exc.message)
