"""Server-sent events of the fake LLM: a scripted answer streamed in each API's event shape.

A request with ``"stream": true`` is answered with the events that add up to the very
body the fake would have answered without streaming (`FakeLLM` renders that body first,
so reasoning items and thinking blocks are issued the same way): Chat Completions chunks
(tool calls' arguments in pieces, usage in a last chunk with ``stream_options.
include_usage``, then ``[DONE]``), Anthropic Messages events (``message_start`` ...
``text_delta``, ``thinking_delta``, ``signature_delta``, ``input_json_delta`` ...
``message_stop``) and Responses events (``response.created`` ... ``response.output_text.
delta``, ``response.function_call_arguments.delta`` ... ``response.completed``).

`StreamScript` shapes one stream: `StreamScript.cut_after` ends the body after that many
events, without the closing ones (a connection lost midway); `StreamScript.gate` holds
the stream after its first text piece until the test sets it.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from aiohttp import web

Event = tuple[str | None, Any]  # (event name, data); data "[DONE]" is sent as it is


@dataclass(frozen=True)
class StreamScript:
    """How the fake streams one answer.

    Attributes:
        cut_after: Send only this many events, then end the body (``None``: all).
        gate: Hold the stream after its first text piece until this event is set.
        piece: Characters per text or arguments piece.
        error: With `cut_after`: send an error event of this type (``server_error``,
            ``overloaded_error``...) in place of the rest, as the API does, and end.
    """

    cut_after: int | None = None
    error: str | None = None
    gate: asyncio.Event | None = None
    piece: int = 4


def pieces(text: str, size: int) -> list[str]:
    """`text` in pieces of `size` characters."""
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


def chat_events(body: dict[str, Any], request: dict[str, Any], size: int) -> Iterator[Event]:
    """Chat Completions chunks adding up to `body`."""
    choice = body["choices"][0]
    message = choice["message"]
    head = {k: body[k] for k in ("id", "created", "model", "system_fingerprint")}

    def chunk(delta: dict[str, Any], finish: str | None = None) -> Event:
        data = {
            **head,
            "object": "chat.completion.chunk",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}],
        }
        return None, data

    yield chunk({"role": "assistant", "content": ""})
    if message.get("content"):
        for part in pieces(message["content"], size):
            yield chunk({"content": part})
    if message.get("refusal"):
        for part in pieces(message["refusal"], size):
            yield chunk({"refusal": part})
    for index, call in enumerate(message.get("tool_calls") or []):
        function = call["function"]
        yield chunk(
            {
                "tool_calls": [
                    {
                        "index": index,
                        "id": call["id"],
                        "type": "function",
                        "function": {"name": function["name"], "arguments": ""},
                    }
                ]
            }
        )
        for part in pieces(function["arguments"], size):
            yield chunk({"tool_calls": [{"index": index, "function": {"arguments": part}}]})
    yield chunk({}, choice["finish_reason"])
    if (request.get("stream_options") or {}).get("include_usage"):
        yield (
            None,
            {**head, "object": "chat.completion.chunk", "choices": [], "usage": body["usage"]},
        )
    yield None, "[DONE]"


def anthropic_events(body: dict[str, Any], size: int) -> Iterator[Event]:
    """Messages API events adding up to `body`."""
    usage = body["usage"]
    start = {**body, "content": [], "stop_reason": None, "usage": {**usage, "output_tokens": 1}}
    yield "message_start", {"type": "message_start", "message": start}
    for index, block in enumerate(body["content"]):
        kind = block["type"]
        opening: dict[str, Any]
        deltas: list[dict[str, Any]] = []
        if kind == "text":
            opening = {"type": "text", "text": ""}
            deltas = [{"type": "text_delta", "text": p} for p in pieces(block["text"], size)]
        elif kind == "thinking":
            opening = {"type": "thinking", "thinking": "", "signature": ""}
            deltas = [
                {"type": "thinking_delta", "thinking": p} for p in pieces(block["thinking"], size)
            ]
            deltas.append({"type": "signature_delta", "signature": block["signature"]})
        elif kind == "tool_use":
            opening = {**block, "input": {}}
            deltas = [
                {"type": "input_json_delta", "partial_json": p}
                for p in pieces(json.dumps(block["input"]), size)
            ]
        else:
            opening = block
        yield (
            "content_block_start",
            {
                "type": "content_block_start",
                "index": index,
                "content_block": opening,
            },
        )
        for delta in deltas:
            yield (
                "content_block_delta",
                {
                    "type": "content_block_delta",
                    "index": index,
                    "delta": delta,
                },
            )
        yield "content_block_stop", {"type": "content_block_stop", "index": index}
    yield (
        "message_delta",
        {
            "type": "message_delta",
            "delta": {"stop_reason": body["stop_reason"], "stop_sequence": None},
            "usage": {"output_tokens": usage["output_tokens"]},
        },
    )
    yield "message_stop", {"type": "message_stop"}


def responses_events(body: dict[str, Any], size: int) -> Iterator[Event]:
    """Responses API events adding up to `body`."""
    numbers = iter(range(1_000_000))

    def event(kind: str, **data: Any) -> Event:
        return kind, {"type": kind, "sequence_number": next(numbers), **data}

    opening = {**body, "status": "in_progress", "output": [], "usage": None}
    yield event("response.created", response=opening)
    yield event("response.in_progress", response=opening)
    for index, item in enumerate(body["output"]):
        kind = item["type"]
        if kind == "message":
            yield event(
                "response.output_item.added", output_index=index, item={**item, "content": []}
            )
            for number, part in enumerate(item["content"]):
                text = part.get("text") if part["type"] == "output_text" else part.get("refusal")
                empty = (
                    {**part, "text": ""}
                    if part["type"] == "output_text"
                    else {**part, "refusal": ""}
                )
                yield event(
                    "response.content_part.added",
                    item_id=item["id"],
                    output_index=index,
                    content_index=number,
                    part=empty,
                )
                delta = "response.output_text.delta"
                if part["type"] != "output_text":
                    delta = "response.refusal.delta"
                for piece in pieces(text or "", size):
                    extra = {"logprobs": []} if part["type"] == "output_text" else {}
                    yield event(
                        delta,
                        item_id=item["id"],
                        output_index=index,
                        content_index=number,
                        delta=piece,
                        **extra,
                    )
                yield event(
                    "response.content_part.done",
                    item_id=item["id"],
                    output_index=index,
                    content_index=number,
                    part=part,
                )
        elif kind == "function_call":
            yield event(
                "response.output_item.added",
                output_index=index,
                item={**item, "arguments": "", "status": "in_progress"},
            )
            for piece in pieces(item["arguments"], size):
                yield event(
                    "response.function_call_arguments.delta",
                    item_id=item["id"],
                    output_index=index,
                    delta=piece,
                )
            yield event(
                "response.function_call_arguments.done",
                item_id=item["id"],
                output_index=index,
                arguments=item["arguments"],
                name=item["name"],
            )
        else:
            yield event("response.output_item.added", output_index=index, item=item)
        yield event("response.output_item.done", output_index=index, item=item)
    done = "response.incomplete" if body["status"] == "incomplete" else "response.completed"
    yield event(done, response=body)


def _has_text(event: Event) -> bool:
    name, data = event
    if name == "content_block_delta":
        return bool(data["delta"].get("type") == "text_delta")
    if name == "response.output_text.delta":
        return True
    if name is None and isinstance(data, dict):
        return any((c.get("delta") or {}).get("content") for c in data.get("choices") or [])
    return False


def _error_frame(protocol: str, kind: str, number: int) -> str:
    message = f"The fake stopped this answer ({kind})."
    if protocol == "openai":
        error = {"message": message, "type": kind, "param": None, "code": None}
        return f"data: {json.dumps({'error': error})}\n\n"
    if protocol == "anthropic":
        data = {"type": "error", "error": {"type": kind, "message": message}}
    else:
        data = {
            "type": "error",
            "code": kind,
            "message": message,
            "param": None,
            "sequence_number": number,
        }
    return f"event: error\ndata: {json.dumps(data)}\n\n"


async def stream(
    request: web.Request,
    protocol: str,
    body: dict[str, Any],
    sent: dict[str, Any],
    headers: dict[str, str],
    script: StreamScript,
    closing: asyncio.Event,
) -> web.StreamResponse:
    """Answer `request` with the events of `body` in `protocol`'s shape.

    Args:
        request: The request to answer.
        protocol: ``openai``, ``anthropic`` or ``responses``.
        body: The answer as the fake renders it without streaming.
        sent: The request's body (its ``stream_options``).
        headers: Response headers (request id ...).
        script: How to stream it.
        closing: Set when the fake stops (releases a held stream).
    """
    body = copy.deepcopy(body)
    if protocol == "openai":
        events = list(chat_events(body, sent, script.piece))
    elif protocol == "anthropic":
        events = list(anthropic_events(body, script.piece))
    else:
        events = list(responses_events(body, script.piece))
    response = web.StreamResponse(
        status=200,
        headers={**headers, "Content-Type": "text/event-stream", "Cache-Control": "no-cache"},
    )
    await response.prepare(request)
    gated = script.gate
    for number, event in enumerate(events):
        if script.cut_after is not None and number >= script.cut_after and script.error:
            await response.write(_error_frame(protocol, script.error, number).encode())
            break
        if script.cut_after is not None and number >= script.cut_after:
            # A connection lost midway: the body ends without the closing events.
            with contextlib.suppress(Exception):
                if request.transport is not None:
                    request.transport.close()
            return response
        name, data = event
        text = data if isinstance(data, str) else json.dumps(data)
        frame = (f"event: {name}\n" if name else "") + f"data: {text}\n\n"
        await response.write(frame.encode())
        if gated is not None and _has_text(event):
            waiting = asyncio.ensure_future(gated.wait())
            stopping = asyncio.ensure_future(closing.wait())
            await asyncio.wait({waiting, stopping}, return_when=asyncio.FIRST_COMPLETED)
            waiting.cancel()
            stopping.cancel()
            gated = None
    await response.write_eof()
    return response
