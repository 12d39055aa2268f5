"""`OpenAIModel`: Chat Completions with tools on the official ``openai`` SDK.

It speaks to OpenAI, and through ``base_url`` to every server with the same API: Azure
OpenAI's v1 endpoint (``https://<resource>.openai.azure.com/openai/v1/``), vLLM, Ollama
(``http://localhost:11434/v1``), llama.cpp's server, a LiteLLM proxy. The run's
transcript is already in this API's shape, so requests carry it as it is (without the
opaque state other providers' models keep on assistant messages).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import openai

from adapters.models import streaming
from adapters.models.errors import (
    connection_error,
    invalid_response,
    status_error,
    timeout_error,
)
from adapters.models.pricing import Price, priced
from adapters.models.tool_images import with_chat_images
from runtime import ConfigurationError, ModelError, ModelRequest, ModelResponse
from runtime.edges import TextSink, chat_messages, parse_chat_completion

PROVIDER = "openai"


def openai_client(
    here: str,
    *,
    api_key: str | None,
    base_url: str | None,
    timeout: float,
    max_retries: int,
    default_headers: Mapping[str, str] | None,
) -> openai.AsyncOpenAI:
    """The SDK's client for one model (`here` names it in the error).

    Raises:
        ConfigurationError: No API key was given and ``OPENAI_API_KEY`` is not set.
    """
    try:
        return openai.AsyncOpenAI(
            api_key=api_key,
            base_url=base_url,
            timeout=timeout,
            max_retries=max_retries,
            default_headers=dict(default_headers) if default_headers else None,
        )
    except openai.OpenAIError as exc:
        raise ConfigurationError(f"{here}: no API key: pass api_key or set OPENAI_API_KEY") from exc


class OpenAIModel:
    """A chat model behind an OpenAI-compatible Chat Completions endpoint.

    Args:
        model: The model (Azure: the deployment) name, e.g. ``gpt-4.1-mini``.
        api_key: The API key; by default the SDK reads ``OPENAI_API_KEY``. Servers that
            check none still need some value.
        base_url: Another endpoint than OpenAI's, e.g. ``http://localhost:11434/v1``.
        timeout: Seconds one HTTP attempt may take.
        max_retries: How often the SDK retries a 408, 409, 429, 5xx, timeout or dropped
            connection (with backoff, honouring ``Retry-After``) before the run fails.
        max_tokens: Output token limit of one answer (``max_completion_tokens``); the
            server's default when ``None``.
        temperature: Sampling temperature; the server's default when ``None``.
        price: Prices per million tokens, to record each call's cost.
        default_headers: Extra headers on every request (a gateway's, an org id ...).
        name: The name recorded with every call (default ``openai:<model>``).
        stream: Stream the answer (``stream_options.include_usage``) when the runtime
            asks for its text as it arrives (`ModelRequest.on_text`); off, every call
            waits for the whole answer.
        tool_images: Send tool results' images to the model (else each is a line of
            text saying it is not shown; for a model without image input).

    Raises:
        ConfigurationError: No API key was given and ``OPENAI_API_KEY`` is not set.
    """

    def __init__(
        self,
        model: str,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        timeout: float = 60.0,
        max_retries: int = 2,
        max_tokens: int | None = None,
        temperature: float | None = None,
        price: Price | None = None,
        default_headers: Mapping[str, str] | None = None,
        name: str | None = None,
        stream: bool = True,
        tool_images: bool = True,
    ) -> None:
        if not model.strip():
            raise ConfigurationError("OpenAIModel needs a model name")
        self.model = model.strip()
        self.name = name or f"{PROVIDER}:{self.model}"
        self.max_tokens = max_tokens
        self.temperature = temperature
        self.price = price
        self.stream = stream
        self.tool_images = tool_images
        self._timeout = timeout
        self.client = openai_client(
            f"OpenAIModel({self.model!r})",
            api_key=api_key,
            base_url=base_url,
            timeout=timeout,
            max_retries=max_retries,
            default_headers=default_headers,
        )

    def request_body(self, request: ModelRequest) -> dict[str, Any]:
        """The Chat Completions parameters for one turn."""
        messages = with_chat_images(chat_messages(request.messages), images=self.tool_images)
        body: dict[str, Any] = {"model": self.model, "messages": messages}
        if request.tools:
            body["tools"] = request.tools
        if self.max_tokens is not None:
            body["max_completion_tokens"] = self.max_tokens
        if self.temperature is not None:
            body["temperature"] = self.temperature
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
        except openai.APIError as exc:
            raise _translate(exc, self._timeout) from exc
        try:
            response = parse_chat_completion(payload)
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise invalid_response(PROVIDER, str(exc) or type(exc).__name__) from exc
        if self.price is None:
            return response
        return replace(response, usage=priced(response.usage, self.price))

    async def _plain(self, body: dict[str, Any]) -> dict[str, Any]:
        """The completion of a call without streaming."""
        completion = await self.client.chat.completions.create(**body)
        payload: dict[str, Any] = completion.model_dump(mode="json")
        return payload

    async def _streamed(self, body: dict[str, Any], on_text: TextSink) -> dict[str, Any]:
        """The completion of a streamed call, its text passed to `on_text` meanwhile."""
        streamed = {**body, "stream": True, "stream_options": {"include_usage": True}}
        chunks: openai.AsyncStream[Any] = await self.client.chat.completions.create(**streamed)
        async with chunks:
            try:
                return await streaming.chat_completion(chunks, on_text, PROVIDER)
            except (openai.APITimeoutError, openai.APIStatusError):
                raise
            except streaming.transport_errors(openai.APIConnectionError) as exc:
                raise streaming.broken_stream(PROVIDER, str(exc) or type(exc).__name__) from exc
            except openai.APIError as exc:
                # An error chunk in place of the rest of the answer.
                raise streaming.error_event(PROVIDER, exc.body, exc.message) from exc

    async def aclose(self) -> None:
        """Close the HTTP client (its connection pool)."""
        await self.client.close()

    def __repr__(self) -> str:
        return f"OpenAIModel({self.model!r}, base_url={str(self.client.base_url)!r})"


def _translate(exc: openai.APIError, timeout: float) -> ModelError:
    if isinstance(exc, openai.APITimeoutError):
        return timeout_error(PROVIDER, timeout)
    if isinstance(exc, openai.APIConnectionError):
        cause = exc.__cause__
        return connection_error(PROVIDER, str(cause) if cause is not None else exc.message)
    if isinstance(exc, openai.APIStatusError):
        return status_error(
            PROVIDER,
            exc.status_code,
            exc.body,
            exc.message,
            getattr(exc, "request_id", None),
        )
    return invalid_response(PROVIDER, exc.message)
