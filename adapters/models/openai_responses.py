"""`OpenAIResponsesModel`: the Responses API with tools on the official ``openai`` SDK.

The run's transcript stays OpenAI-shaped inside signoff; `adapters.models.
openai_responses_transcript` translates it into input items (reasoning items,
``function_call`` and ``function_call_output``) and the answer back. The model's
reasoning items are kept with the transcript and sent back unchanged on every later turn,
so a run parked for days continues its reasoning on any process. By default nothing is
kept at OpenAI (``store: false``) and a reasoning model's items carry their encrypted
content (``include: ["reasoning.encrypted_content"]``).
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
from adapters.models.openai import openai_client
from adapters.models.openai_responses_transcript import (
    EFFORTS,
    PROVIDER,
    SUMMARIES,
    TOOL_CHOICES,
    from_response,
    to_input,
    to_tools,
)
from adapters.models.pricing import Price, priced
from runtime import ConfigurationError, ModelError, ModelErrorKind, ModelRequest, ModelResponse
from runtime.edges import TextSink

# Failures name the provider, as OpenAIModel's do.
ERROR_PROVIDER = "openai"


class OpenAIResponsesModel:
    """A model behind OpenAI's Responses API (``POST /v1/responses``).

    Args:
        model: The model name, e.g. ``gpt-5`` or ``o4-mini``.
        api_key: The API key; by default the SDK reads ``OPENAI_API_KEY``.
        base_url: Another endpoint than OpenAI's (Azure's v1 endpoint, a gateway).
        timeout: Seconds one HTTP attempt may take.
        max_retries: How often the SDK retries a 408, 409, 429, 5xx, timeout or dropped
            connection (with backoff, honouring ``Retry-After``) before the run fails.
        max_tokens: Output token limit of one answer, reasoning included
            (``max_output_tokens``); the API's default when ``None``.
        temperature: Sampling temperature; the API's default when ``None`` (reasoning
            models take none).
        reasoning_effort: ``reasoning.effort`` of a reasoning model (``none`` ...
            ``xhigh``); not sent when ``None``. Setting it marks the model as a reasoning
            model: with ``store`` off its reasoning comes back encrypted.
        reasoning_summary: ``reasoning.summary`` (``auto``, ``concise``, ``detailed``):
            a readable summary of the reasoning, shown on approval cards when the model
            gives no text of its own.
        strict_tools: Send tools with ``strict: true``, their schemas made strict
            (`adapters.models.openai_responses_transcript.strict_parameters`); a tool
            whose schema cannot be is refused when the run asks the model.
        tool_choice: ``auto``, ``required`` (a tool call on every turn) or ``none``; the
            API's default (``auto``) when ``None``.
        parallel_tool_calls: Whether the model may ask for several calls in one turn;
            the API's default (yes) when ``None``.
        store: Let OpenAI keep responses (``store: true``): reasoning items then go back
            by id while OpenAI keeps them. Off (the default), nothing is kept there and
            a reasoning model's items carry their encrypted content instead.
        price: Prices per million tokens, to record each call's cost.
        default_headers: Extra headers on every request.
        name: The name recorded with every call (default ``openai-responses:<model>``).
        stream: Stream the answer (server-sent events) when the runtime asks for its
            text as it arrives (`ModelRequest.on_text`); reasoning never goes there.
        tool_images: Send tool results' images to the model (else each is a line of
            text saying it is not shown; for a model without image input).

    Raises:
        ConfigurationError: No API key was given and ``OPENAI_API_KEY`` is not set, or an
            option has a value the API does not take.
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
        reasoning_effort: str | None = None,
        reasoning_summary: str | None = None,
        strict_tools: bool = False,
        tool_choice: str | None = None,
        parallel_tool_calls: bool | None = None,
        store: bool = False,
        price: Price | None = None,
        default_headers: Mapping[str, str] | None = None,
        name: str | None = None,
        stream: bool = True,
        tool_images: bool = True,
    ) -> None:
        if not model.strip():
            raise ConfigurationError("OpenAIResponsesModel needs a model name")
        self.model = model.strip()
        here = f"OpenAIResponsesModel({self.model!r})"
        _one_of(here, "reasoning_effort", reasoning_effort, EFFORTS)
        _one_of(here, "reasoning_summary", reasoning_summary, SUMMARIES)
        _one_of(here, "tool_choice", tool_choice, TOOL_CHOICES)
        if max_tokens is not None and max_tokens < 1:
            raise ConfigurationError(f"{here}: max_tokens must be at least 1")
        self.name = name or f"{PROVIDER}:{self.model}"
        self.max_tokens = max_tokens
        self.temperature = temperature
        self.reasoning_effort = reasoning_effort
        self.reasoning_summary = reasoning_summary
        self.strict_tools = strict_tools
        self.tool_choice = tool_choice
        self.parallel_tool_calls = parallel_tool_calls
        self.store = store
        self.price = price
        self.stream = stream
        self.tool_images = tool_images
        self._timeout = timeout
        self.client = openai_client(
            here,
            api_key=api_key,
            base_url=base_url,
            timeout=timeout,
            max_retries=max_retries,
            default_headers=default_headers,
        )

    @property
    def encrypted_reasoning(self) -> bool:
        """Whether requests ask for the reasoning's encrypted content (``store`` off, a
        reasoning model)."""
        return not self.store and self.reasoning_effort is not None

    def request_body(self, request: ModelRequest) -> dict[str, Any]:
        """The Responses API parameters for one turn.

        Raises:
            ConfigurationError: With `strict_tools`, a tool strict mode cannot express.
        """
        instructions, items = to_input(
            request.messages, stored_reasoning=self.store, images=self.tool_images
        )
        body: dict[str, Any] = {"model": self.model, "input": items, "store": self.store}
        if instructions:
            body["instructions"] = instructions
        if request.tools:
            body["tools"] = to_tools(request.tools, strict=self.strict_tools)
            if self.tool_choice is not None:
                body["tool_choice"] = self.tool_choice
            if self.parallel_tool_calls is not None:
                body["parallel_tool_calls"] = self.parallel_tool_calls
        reasoning: dict[str, Any] = {}
        if self.reasoning_effort is not None:
            reasoning["effort"] = self.reasoning_effort
        if self.reasoning_summary is not None:
            reasoning["summary"] = self.reasoning_summary
        if reasoning:
            body["reasoning"] = reasoning
        if self.encrypted_reasoning:
            body["include"] = ["reasoning.encrypted_content"]
        if self.max_tokens is not None:
            body["max_output_tokens"] = self.max_tokens
        if self.temperature is not None:
            body["temperature"] = self.temperature
        return body

    async def complete(self, request: ModelRequest) -> ModelResponse:
        """Answer one turn.

        Raises:
            ModelError: The provider refused the call or kept failing after the retries,
                or (``bad_request``) a tool's schema cannot be made strict.
        """
        try:
            body = self.request_body(request)
        except ConfigurationError as exc:
            raise ModelError(
                str(exc), kind=ModelErrorKind.BAD_REQUEST, provider=ERROR_PROVIDER
            ) from exc
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
        schemas = None
        if self.strict_tools:
            schemas = {
                str(spec.get("function", spec)["name"]): spec.get("function", spec).get(
                    "parameters"
                )
                or {}
                for spec in request.tools
            }
        try:
            response = from_response(payload, schemas)
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise invalid_response(ERROR_PROVIDER, str(exc) or type(exc).__name__) from exc
        if self.price is None:
            return response
        return replace(response, usage=priced(response.usage, self.price))

    async def _plain(self, body: dict[str, Any]) -> dict[str, Any]:
        """The response of a call without streaming."""
        answer = await self.client.responses.create(**body)
        # Only the fields the API sent: reasoning items go back exactly as they came.
        payload: dict[str, Any] = answer.model_dump(mode="json", exclude_unset=True)
        return payload

    async def _streamed(self, body: dict[str, Any], on_text: TextSink) -> dict[str, Any]:
        """The response of a streamed call, its text passed to `on_text` meanwhile."""
        events: openai.AsyncStream[Any] = await self.client.responses.create(**body, stream=True)
        async with events:
            try:
                return await streaming.responses_payload(events, on_text, ERROR_PROVIDER)
            except openai.APITimeoutError:
                raise
            except streaming.transport_errors(openai.APIConnectionError) as exc:
                detail = str(exc) or type(exc).__name__
                raise streaming.broken_stream(ERROR_PROVIDER, detail) from exc

    async def aclose(self) -> None:
        """Close the HTTP client (its connection pool)."""
        await self.client.close()

    def __repr__(self) -> str:
        return f"OpenAIResponsesModel({self.model!r}, base_url={str(self.client.base_url)!r})"


def _one_of(here: str, option: str, value: str | None, choices: tuple[str, ...]) -> None:
    if value is not None and value not in choices:
        raise ConfigurationError(
            f"{here}: {option} must be one of {', '.join(choices)} (not {value!r})"
        )


def _translate(exc: openai.APIError, timeout: float) -> ModelError:
    if isinstance(exc, openai.APITimeoutError):
        return timeout_error(ERROR_PROVIDER, timeout)
    if isinstance(exc, openai.APIConnectionError):
        cause = exc.__cause__
        return connection_error(ERROR_PROVIDER, str(cause) if cause is not None else exc.message)
    if isinstance(exc, openai.APIStatusError):
        return status_error(
            ERROR_PROVIDER,
            exc.status_code,
            exc.body,
            exc.message,
            getattr(exc, "request_id", None),
        )
    return invalid_response(ERROR_PROVIDER, exc.message)
