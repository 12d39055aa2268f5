"""Streaming a model's answer: its text passed on as it arrives, its whole reply kept.

Each provider's stream is assembled into the very payload its non-streaming call
returns, then read by the same parser, so a streamed turn records exactly what an
unstreamed one would (text, tool calls, usage, provider state). Text pieces go to the
request's `runtime.ModelRequest.on_text` as they arrive; a listener that fails is
ignored (the preview is not worth the turn).

A stream that breaks off (a dropped connection, a body cut short, an end without the
provider's closing event) raises a ``connection`` `runtime.ModelError` (`BrokenStream`);
nothing of the partial answer is returned. The SDKs retry a call only until its answer
starts, so `streamed_or_plain` asks once more without streaming, where the SDK's own
retries apply, unless the model was told not to retry.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

from adapters.models.errors import status_error
from runtime import ModelError, ModelErrorKind
from runtime.edges import TextSink

log = logging.getLogger("signoff.models")

T = TypeVar("T")


class BrokenStream(ModelError):
    """An answer whose stream broke off before its end (a ``connection`` failure)."""


async def streamed_or_plain(
    streamed: Callable[[], Awaitable[T]], plain: Callable[[], Awaitable[T]], retries: int
) -> T:
    """The answer of `streamed`; when its stream breaks off, the answer of `plain` (one
    call without streaming, which the SDK retries), unless `retries` is 0.

    Raises:
        BrokenStream: The stream broke off and the model may not retry.
    """
    try:
        return await streamed()
    except BrokenStream as exc:
        if retries <= 0:
            raise
        log.warning("%s; asking again without streaming", exc)
    return await plain()


def transport_errors(*more: type[BaseException]) -> tuple[type[BaseException], ...]:
    """The errors a broken stream raises while it is read: the HTTP client's, and `more`
    (the SDK's connection error, which wraps them)."""
    found: list[type[BaseException]] = list(more)
    for name in ("httpx", "httpx2"):  # the SDKs use one or the other
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        found.append(module.TransportError)
    return tuple(found)


def broken_stream(provider: str, detail: str) -> BrokenStream:
    """A retryable `ModelError` for an answer whose stream broke off."""
    return BrokenStream(
        f"the answer's stream broke off ({detail})",
        kind=ModelErrorKind.CONNECTION,
        provider=provider,
    )


# What an error sent in place of the rest of an answer means, as an HTTP status.
_ERROR_STATUS = {
    "rate_limit_error": 429,
    "rate_limit_exceeded": 429,
    "overloaded_error": 529,
    "invalid_request_error": 400,
    "context_length_exceeded": 400,
}


def error_event(provider: str, body: Any, fallback: str) -> ModelError:
    """A `ModelError` for an error the provider sent in the middle of a stream, of the
    kind the same error answered at once would have (a server error by default)."""
    detail = body.get("error", body) if isinstance(body, dict) else None
    names = [str(detail.get(k) or "") for k in ("type", "code")] if isinstance(detail, dict) else []
    status = next((_ERROR_STATUS[n] for n in names if n in _ERROR_STATUS), 500)
    return status_error(provider, status, body, fallback, None)


def safe_sink(on_text: TextSink) -> Callable[[str], None]:
    """`on_text` called only with non-empty text, never raising into the stream."""

    def send(text: str) -> None:
        if text:
            with contextlib.suppress(Exception):
                on_text(text)

    return send


def _dump(item: Any) -> dict[str, Any]:
    dumped = item.model_dump(mode="json") if hasattr(item, "model_dump") else item
    return dumped if isinstance(dumped, dict) else {}


# -- OpenAI Chat Completions -------------------------------------------------------------------


async def chat_completion(
    chunks: AsyncIterator[Any], on_text: TextSink, provider: str
) -> dict[str, Any]:
    """The chat-completion payload the `chunks` of a streamed call add up to.

    Raises:
        ModelError: The stream broke off before its last choice ended.
    """
    send = safe_sink(on_text)
    content: list[str] = []
    refusal: list[str] = []
    calls: dict[int, dict[str, Any]] = {}
    finish: str | None = None
    usage: dict[str, Any] | None = None
    first: dict[str, Any] = {}
    async for chunk in chunks:
        data = _dump(chunk)
        first = first or data
        if data.get("usage"):
            usage = data["usage"]
        for choice in data.get("choices") or []:
            if choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or {}
            if delta.get("content"):
                content.append(delta["content"])
                send(delta["content"])
            if delta.get("refusal"):
                refusal.append(delta["refusal"])
            for raw in delta.get("tool_calls") or []:
                call = calls.setdefault(int(raw.get("index", 0)), {"arguments": []})
                if raw.get("id"):
                    call["id"] = raw["id"]
                function = raw.get("function") or {}
                if function.get("name"):
                    call["name"] = call.get("name", "") + function["name"]
                if function.get("arguments"):
                    call["arguments"].append(function["arguments"])
            if choice.get("finish_reason"):
                finish = choice["finish_reason"]
    if finish is None:
        raise broken_stream(provider, "it ended before the answer did")
    message: dict[str, Any] = {
        "role": "assistant",
        "content": "".join(content) if content else None,
        "refusal": "".join(refusal) if refusal else None,
    }
    if calls:
        message["tool_calls"] = [
            {
                "id": call.get("id", ""),
                "type": "function",
                "function": {"name": call.get("name", ""), "arguments": "".join(call["arguments"])},
            }
            for _, call in sorted(calls.items())
        ]
    return {
        "id": first.get("id"),
        "object": "chat.completion",
        "model": first.get("model"),
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": usage,
    }


# -- Anthropic Messages ------------------------------------------------------------------------


async def anthropic_message(
    events: AsyncIterator[Any], on_text: TextSink, provider: str
) -> dict[str, Any]:
    """The message payload the server-sent `events` of a streamed call add up to.

    Only ``text_delta`` pieces go to `on_text`: thinking and tool input never do.

    Raises:
        ModelError: The stream broke off before ``message_stop``, or a tool's input
            did not add up to JSON.
    """
    send = safe_sink(on_text)
    message: dict[str, Any] | None = None
    blocks: dict[int, dict[str, Any]] = {}
    inputs: dict[int, list[str]] = {}
    stopped = False
    async for event in events:
        data = _dump(event)
        kind = data.get("type")
        if kind == "message_start":
            message = dict(data.get("message") or {})
        elif kind == "content_block_start":
            index = int(data.get("index", 0))
            blocks[index] = dict(data.get("content_block") or {})
            if blocks[index].get("type") in ("tool_use", "server_tool_use"):
                inputs[index] = []
        elif kind == "content_block_delta":
            index = int(data.get("index", 0))
            block = blocks.setdefault(index, {})
            delta = data.get("delta") or {}
            match delta.get("type"):
                case "text_delta":
                    block["text"] = block.get("text", "") + delta.get("text", "")
                    send(delta.get("text", ""))
                case "thinking_delta":
                    block["thinking"] = block.get("thinking", "") + delta.get("thinking", "")
                case "signature_delta":
                    block["signature"] = block.get("signature", "") + delta.get("signature", "")
                case "input_json_delta":
                    inputs.setdefault(index, []).append(delta.get("partial_json", ""))
                case _:
                    pass  # citations and future kinds: the block's text is what counts
        elif kind == "content_block_stop":
            index = int(data.get("index", 0))
            if index in inputs:
                raw = "".join(inputs.pop(index))
                try:
                    blocks[index]["input"] = json.loads(raw) if raw else {}
                except ValueError as exc:
                    raise broken_stream(provider, f"a tool's input is not JSON: {exc}") from exc
        elif kind == "message_delta" and message is not None:
            delta = data.get("delta") or {}
            for key in ("stop_reason", "stop_sequence"):
                if key in delta:
                    message[key] = delta[key]
            usage = dict(message.get("usage") or {})
            usage.update({k: v for k, v in (data.get("usage") or {}).items() if v is not None})
            message["usage"] = usage
        elif kind == "message_stop":
            stopped = True
    if message is None or not stopped:
        raise broken_stream(provider, "it ended before the answer did")
    message["content"] = [blocks[i] for i in sorted(blocks)]
    return message


# -- OpenAI Responses --------------------------------------------------------------------------

_FINAL = ("response.completed", "response.incomplete", "response.failed")


async def responses_payload(
    events: AsyncIterator[Any], on_text: TextSink, provider: str
) -> dict[str, Any]:
    """The response payload the server-sent `events` of a streamed call end with.

    The closing event (``response.completed``, ``.incomplete`` or ``.failed``) carries
    the whole response, read like an unstreamed one (its output items exactly as sent);
    items finished earlier (``response.output_item.done``) fill an output it leaves
    out. Only ``response.output_text.delta`` pieces go to `on_text`.

    Raises:
        ModelError: The stream broke off before its closing event, or carried an error.
    """
    send = safe_sink(on_text)
    done: dict[int, dict[str, Any]] = {}
    async for event in events:
        data = event.model_dump(mode="json", exclude_unset=True)
        kind = data.get("type")
        if kind == "response.output_text.delta":
            send(str(data.get("delta") or ""))
        elif kind == "response.output_item.done":
            done[int(data.get("output_index", len(done)))] = data.get("item") or {}
        elif kind in _FINAL:
            payload = dict(data.get("response") or {})
            if not payload.get("output") and done:
                payload["output"] = [done[i] for i in sorted(done)]
            return payload
        elif kind == "error":
            raise error_event(provider, data, "the provider reported an error mid-answer")
    raise broken_stream(provider, "it ended before the answer did")
