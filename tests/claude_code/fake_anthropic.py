"""A local stand-in for Anthropic's Messages API, as Claude Code calls it: ``HEAD /`` and
``POST /v1/messages`` (always streaming, server-sent events).

The model it plays reads the user's prompt for ``RUN<<command>>``: with no tool result
in the conversation yet it asks for ``Bash`` with that command; once a tool result is
there it ends its turn with text naming the result, so the test sees what the tool
returned (or why it did not run). Every messages request is recorded.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

_RUN = re.compile(r"RUN<<(.*?)>>")


def _sse(event: str, data: dict[str, Any]) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data)}\n\n".encode()


def tool_results(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The tool results in a request's conversation."""
    found = []
    for message in body.get("messages", []):
        content = message.get("content")
        if isinstance(content, list):
            found.extend(c for c in content if c.get("type") == "tool_result")
    return found


@dataclass
class FakeAnthropic:
    """The fake's state: what it was asked."""

    requests: list[dict[str, Any]] = field(default_factory=list)
    url: str = ""

    async def messages(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.requests.append(body)
        tools = {tool.get("name") for tool in body.get("tools", [])}
        results = tool_results(body)
        asked = _RUN.search(json.dumps(body.get("messages", [])))
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        message = {
            "id": f"msg_{len(self.requests)}",
            "type": "message",
            "role": "assistant",
            "model": body.get("model", "claude"),
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": 10, "output_tokens": 1},
        }
        await response.write(_sse("message_start", {"type": "message_start", "message": message}))
        if "Bash" in tools and asked is not None and not results:
            command = json.loads(f'"{asked.group(1)}"')
            block = {"type": "tool_use", "id": "toolu_01Signoff", "name": "Bash", "input": {}}
            delta = {
                "type": "input_json_delta",
                "partial_json": json.dumps({"command": command, "description": "As asked"}),
            }
            stop = "tool_use"
        else:
            block = {"type": "text", "text": ""}
            delta = {"type": "text_delta", "text": "RESULT " + json.dumps(results)}
            stop = "end_turn"
        start = {"type": "content_block_start", "index": 0, "content_block": block}
        await response.write(_sse("content_block_start", start))
        await response.write(
            _sse("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta})
        )
        await response.write(_sse("content_block_stop", {"type": "content_block_stop", "index": 0}))
        end = {"stop_reason": stop, "stop_sequence": None}
        await response.write(
            _sse(
                "message_delta",
                {"type": "message_delta", "delta": end, "usage": {"output_tokens": 5}},
            )
        )
        await response.write(_sse("message_stop", {"type": "message_stop"}))
        await response.write_eof()
        return response

    async def anything(self, request: web.Request) -> web.Response:
        return web.Response(status=200 if request.path == "/" else 404)

    def app(self) -> web.Application:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/messages", self.messages)
        app.router.add_route("*", "/{tail:.*}", self.anything)
        return app
