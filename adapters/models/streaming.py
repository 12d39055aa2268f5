"""Streaming a model's answer: its text passed on as it arrives, its whole reply kept.

Each provider's stream is assembled into the very payload its non-streaming call
returns, then read by the same parser, so a streamed turn records exactly what an
unstreamed one would (text, tool calls, usage, provider state). Text pieces go to the
request's `runtime.ModelRequest.on_text` as they arrive; a listener that fails is
ignored (the preview is not worth the turn).

A stream that breaks off (a dropped connection, a body cut short, an end without the
provider's closing event) raises a ``connection`` `runtime.ModelError`, which is
retryable; nothing of the partial answer is returned.
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import AsyncIterator, Callable
from typing import Any

from runtime import ModelError, ModelErrorKind
from runtime.domain.model import TextSink


def transport_errors() -> tuple[type[BaseException], ...]:
    """The HTTP client's errors a broken stream raises while it is read."""
    found: list[type[BaseException]] = []
    for name in ("httpx", "httpx2"):  # the SDKs use one or the other
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        found.append(module.TransportError)
    return tuple(found)


def broken_stream(provider: str, detail: str) -> ModelError:
    """A retryable `ModelError` for an answer whose stream broke off."""
    return ModelError(
        f"the answer's stream broke off ({detail})",
        kind=ModelErrorKind.CONNECTION,
        provider=provider,
    )


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
