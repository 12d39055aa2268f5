"""A fake LLM provider on 127.0.0.1: OpenAI Chat Completions and Responses, Anthropic Messages.

The real ``openai`` and ``anthropic`` SDKs talk to it through their ``base_url``
(`FakeLLM.openai_base_url`, `FakeLLM.anthropic_base_url`); nothing is patched. It speaks
``POST /v1/chat/completions``, ``POST /v1/responses`` and ``POST /v1/messages`` closely
enough for them: auth headers, tool calls (several per answer), usage with cached (and
reasoning) tokens, error bodies in each provider's shape, ``Retry-After``, request ids.
It checks what it is sent the way the real APIs do (every tool call answered by a result
in the next turn, Anthropic's alternating roles, non-empty text blocks, strict tool
schemas ...) and answers a violation with 400, so a bad translation fails the test.

Reasoning is checked like the real APIs check it. A Responses answer carries a reasoning
item (its summary is `Turn.thinking`; with ``include: ["reasoning.encrypted_content"]``
an encrypted content the fake signed); a later request must give each function call the
reasoning item it came with, unchanged, and with ``store: false`` one with its encrypted
content. With Anthropic's ``thinking`` enabled an answer opens with a signed ``thinking``
block (and a ``redacted_thinking`` one with `Turn.redacted`); a later request must open
that assistant turn with exactly those blocks (a changed text or signature is refused).

Answers are scripted per test as protocol-neutral `Turn` values, rendered in the
protocol of the request they answer::

    fake.script(Turn.ask(Call("refund", {"amount": 249.0}), text="Refunding the duplicate."),
                Turn.say("Refunded."))
    fake.script(Turn.fail(429, "slow down", retry_after=0.05), Turn.say("ok"))

or by a `responder` that reads the request (`Request.tool_results` ...). Every request is
recorded in `FakeLLM.requests`; `wait_requests` waits for a count of them. A request
asking for a stream gets the same answer as server-sent events (`fake_llm_stream`).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import hmac
import itertools
import json
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from aiohttp import web
from fake_llm_stream import StreamScript, stream

API_KEY = "sk-test-fake-0123456789"
ANTHROPIC_VERSION = "2023-06-01"

Protocol = Literal["openai", "anthropic", "responses"]
Stop = Literal["end", "length", "refusal"]

# Anthropic's error types by status.
_ANTHROPIC_ERRORS = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    529: "overloaded_error",
}
_OPENAI_TOO_LONG = (
    "This model's maximum context length is 128000 tokens. However, your "
    "messages resulted in 131072 tokens. Please reduce the length of the messages."
)
_TOO_LONG = {
    "openai": _OPENAI_TOO_LONG,
    "responses": _OPENAI_TOO_LONG,
    "anthropic": "prompt is too long: 210000 tokens > 200000 maximum",
}


@dataclass(frozen=True)
class Call:
    """A tool call in a scripted answer; a `str` `arguments` is sent as it is (malformed)."""

    name: str
    arguments: dict[str, Any] | str = field(default_factory=dict)
    id: str | None = None


@dataclass(frozen=True)
class Turn:
    """One scripted answer of the fake, in whichever protocol it is asked in.

    Attributes:
        text: The assistant's text (beside tool calls: its stated reason).
        calls: Tool calls to ask for.
        stop: ``end`` (ordinary), ``length`` (cut off by the token limit) or ``refusal``.
        status: HTTP status; not 200 means an error answer with `message`.
        message: The error message (``None``: a protocol-specific context-length text
            when `code` is ``context_length_exceeded``).
        code: OpenAI's error ``code``.
        retry_after: Seconds for a ``Retry-After`` header.
        headers: More response headers.
        delay: Seconds before answering (a slow provider).
        hold: Never answer (until the fake stops or the client goes away).
        raw: A body sent as it is, instead of a rendered one.
        usage: ``prompt_tokens``, ``completion_tokens``, ``cached_tokens``,
            ``cache_write_tokens``, ``reasoning_tokens`` to report (default: from the
            request's size).
        thinking: The reasoning: an Anthropic ``thinking`` block's text when the request
            enables thinking, a Responses reasoning item's summary.
        redacted: Anthropic: also a ``redacted_thinking`` block.
        streaming: How the answer streams when the request asks for a stream (cut
            midway, held after its first text piece).
    """

    text: str | None = None
    calls: tuple[Call, ...] = ()
    stop: Stop = "end"
    status: int = 200
    message: str | None = None
    code: str | None = None
    retry_after: float | None = None
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    hold: bool = False
    raw: str | None = None
    usage: dict[str, int] = field(default_factory=dict)
    thinking: str | None = None
    redacted: bool = False
    streaming: StreamScript = field(default_factory=StreamScript)

    @classmethod
    def say(cls, text: str, *, thinking: str | None = None, **usage: int) -> Turn:
        """A final answer."""
        return cls(text=text, usage=usage, thinking=thinking)

    @classmethod
    def ask(
        cls,
        *calls: Call,
        text: str | None = None,
        thinking: str | None = None,
        redacted: bool = False,
        **usage: int,
    ) -> Turn:
        """An answer asking for tool calls, optionally with the model's reason."""
        return cls(text=text, calls=calls, usage=usage, thinking=thinking, redacted=redacted)

    @classmethod
    def fail(
        cls,
        status: int,
        message: str | None = None,
        *,
        code: str | None = None,
        retry_after: float | None = None,
    ) -> Turn:
        """An error answer."""
        return cls(status=status, message=message, code=code, retry_after=retry_after)

    @classmethod
    def too_long(cls) -> Turn:
        """The provider's "context length exceeded" answer (400)."""
        return cls(status=400, code="context_length_exceeded")

    def after(self, seconds: float) -> Turn:
        """This answer, given only after `seconds`."""
        return replace(self, delay=seconds)


@dataclass
class Request:
    """One request the fake received."""

    protocol: Protocol
    method: str
    path: str
    headers: dict[str, str]
    body: Any
    at: float
    problem: str | None = None

    @property
    def messages(self) -> list[dict[str, Any]]:
        """The request's ``messages`` (Responses: its ``input`` items)."""
        key = "input" if self.protocol == "responses" else "messages"
        value = self.body.get(key) if isinstance(self.body, dict) else None
        return value if isinstance(value, list) else []

    @property
    def tool_names(self) -> list[str]:
        """The names of the tools offered."""
        names = []
        for spec in (self.body or {}).get("tools") or []:
            names.append(spec["function"]["name"] if "function" in spec else spec["name"])
        return names

    def items(self, kind: str) -> list[dict[str, Any]]:
        """Responses: the input items of a type (``reasoning``, ``function_call`` ...)."""
        return [item for item in self.messages if item.get("type") == kind]

    def blocks(self, kind: str) -> list[dict[str, Any]]:
        """Anthropic: the content blocks of a type in every message, in order."""
        found: list[dict[str, Any]] = []
        for message in self.messages:
            content = message.get("content")
            if isinstance(content, list):
                found.extend(b for b in content if b.get("type") == kind)
        return found

    def tool_results(self) -> list[str]:
        """The text of every tool result in the transcript, in order."""
        results: list[str] = []
        if self.protocol == "responses":
            return [str(item.get("output")) for item in self.items("function_call_output")]
        for message in self.messages:
            if self.protocol == "openai":
                if message.get("role") == "tool":
                    results.append(str(message.get("content")))
                continue
            content = message.get("content")
            if not isinstance(content, list):
                continue
            for block in content:
                if block.get("type") == "tool_result":
                    inner = block.get("content")
                    if isinstance(inner, list):
                        inner = "".join(str(part.get("text", "")) for part in inner)
                    results.append(str(inner))
        return results

    def system(self) -> str:
        """The system prompt."""
        if self.protocol == "responses":
            return str((self.body or {}).get("instructions") or "")
        if self.protocol == "openai":
            return "\n".join(
                str(m.get("content")) for m in self.messages if m.get("role") == "system"
            )
        system = (self.body or {}).get("system") or ""
        if isinstance(system, list):
            return "\n".join(str(block.get("text", "")) for block in system)
        return str(system)

    def user_text(self) -> str:
        """The text of the last user message that is not only tool results."""
        for message in reversed(self.messages):
            if message.get("role") != "user":
                continue
            content = message.get("content")
            if isinstance(content, str):
                return content
            texts = [b.get("text", "") for b in content or [] if b.get("type") == "text"]
            if texts:
                return "\n".join(texts)
        return ""


Responder = Callable[[Request], Turn]


class FakeLLM:
    """The fake provider. `start` serves it on 127.0.0.1 (a free port).

    Args:
        api_key: The key it accepts (anything else is answered 401, like the real APIs).
    """

    def __init__(self, api_key: str = API_KEY) -> None:
        self.api_key = api_key
        self.requests: list[Request] = []
        self.responder: Responder | None = None
        self.url = ""
        self._turns: deque[Turn] = deque()
        self._ids = itertools.count(1)
        self._runner: web.AppRunner | None = None
        self._closing = asyncio.Event()
        self._seen = asyncio.Condition()
        # What the fake issued, to check it comes back unchanged: Responses reasoning
        # items by id, and the reasoning item each function call came with.
        self.reasoning_items: dict[str, dict[str, Any]] = {}
        self._reasoning_of_call: dict[str, str] = {}
        # Anthropic: the thinking blocks each tool_use came with.
        self.thinking_of_use: dict[str, list[dict[str, Any]]] = {}

    # -- serving ---------------------------------------------------------------------------
    async def start(self) -> str:
        """Serve on a free port; returns the base URL."""
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._openai)
        app.router.add_post("/v1/responses", self._responses)
        app.router.add_post("/v1/messages", self._anthropic)
        # Handlers of held or slow answers are cancelled when the client goes away.
        self._runner = web.AppRunner(
            app, access_log=None, handler_cancellation=True, shutdown_timeout=1.0
        )
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        host, port = self._runner.addresses[0][:2]
        self.url = f"http://{host}:{port}"
        return self.url

    async def stop(self) -> None:
        """Release held answers and stop serving."""
        self._closing.set()
        if self._runner is not None:
            await self._runner.cleanup()

    @property
    def openai_base_url(self) -> str:
        """``base_url`` for ``openai.AsyncOpenAI``."""
        return f"{self.url}/v1"

    @property
    def anthropic_base_url(self) -> str:
        """``base_url`` for ``anthropic.AsyncAnthropic``."""
        return self.url

    def base_url(self, protocol: Protocol) -> str:
        """The SDK's ``base_url`` for `protocol`."""
        return self.anthropic_base_url if protocol == "anthropic" else self.openai_base_url

    # -- scripting ---------------------------------------------------------------------------
    def script(self, *turns: Turn) -> None:
        """Queue answers for the next requests (in order, either protocol)."""
        self._turns.extend(turns)

    @property
    def pending(self) -> int:
        """Scripted answers not given yet."""
        return len(self._turns)

    async def wait_requests(self, count: int, seconds: float = 20.0) -> list[Request]:
        """Wait until at least `count` requests arrived; returns them all."""

        async def enough() -> None:
            async with self._seen:
                await self._seen.wait_for(lambda: len(self.requests) >= count)

        try:
            await asyncio.wait_for(enough(), seconds)
        except TimeoutError:
            raise AssertionError(
                f"the fake LLM got {len(self.requests)} requests, expected {count}"
            ) from None
        return list(self.requests)

    # -- handlers ----------------------------------------------------------------------------
    async def _record(self, protocol: Protocol, request: web.Request) -> Request:
        raw = await request.read()
        try:
            body: Any = json.loads(raw)
        except ValueError:
            body = raw.decode(errors="replace")
        seen = Request(
            protocol=protocol,
            method=request.method,
            path=request.path,
            headers={k.lower(): v for k, v in request.headers.items()},
            body=body,
            at=time.monotonic(),
        )
        async with self._seen:
            self.requests.append(seen)
            self._seen.notify_all()
        return seen

    def _next(self, seen: Request) -> Turn:
        if self._turns:
            return self._turns.popleft()
        if self.responder is not None:
            return self.responder(seen)
        return replace(
            Turn.fail(500, "the fake LLM has no answer scripted for this request"),
            headers={"x-should-retry": "false"},
        )

    async def _openai(self, request: web.Request) -> web.Response:
        seen = await self._record("openai", request)
        auth = seen.headers.get("authorization", "")
        if auth != f"Bearer {self.api_key}":
            return _json(
                401,
                _openai_error("Incorrect API key provided.", "invalid_api_key"),
                {"x-should-retry": "false"},
            )
        seen.problem = _check_openai(seen.body)
        if seen.problem is not None:
            return _json(400, _openai_error(seen.problem, None))
        return await self._answer(seen, self._next(seen), request)

    async def _responses(self, request: web.Request) -> web.Response:
        seen = await self._record("responses", request)
        auth = seen.headers.get("authorization", "")
        if auth != f"Bearer {self.api_key}":
            return _json(
                401,
                _openai_error("Incorrect API key provided.", "invalid_api_key"),
                {"x-should-retry": "false"},
            )
        seen.problem = _check_responses(seen.body) or self._check_reasoning(seen.body)
        if seen.problem is not None:
            return _json(400, _openai_error(seen.problem, None))
        return await self._answer(seen, self._next(seen), request)

    def _check_reasoning(self, body: dict[str, Any]) -> str | None:
        """Each function call with the reasoning item it came with, both unchanged."""
        given: set[str] = set()
        for item in body.get("input") or []:
            kind = item.get("type")
            if kind == "reasoning":
                issued = self.reasoning_items.get(str(item.get("id")))
                if issued is None:
                    return f"Invalid reasoning item: {item.get('id')!r} was never issued"
                if not body.get("store", True) and "encrypted_content" not in issued:
                    return (
                        f"Item with id {item.get('id')!r} not found. Items are not "
                        "persisted when `store` is set to false."
                    )
                if item != issued:
                    return f"Reasoning item {item.get('id')!r} does not match what was issued"
                given.add(str(item["id"]))
            elif kind == "function_call":
                needed = self._reasoning_of_call.get(str(item.get("call_id")))
                if needed is not None and needed not in given:
                    return (
                        f"Item {item.get('call_id')!r} of type 'function_call' was provided "
                        f"without its required 'reasoning' item: {needed!r}."
                    )
        return None

    async def _anthropic(self, request: web.Request) -> web.Response:
        seen = await self._record("anthropic", request)
        # Older SDKs send the key as ``x-api-key``, newer ones as a bearer token.
        keys = {seen.headers.get("x-api-key"), seen.headers.get("authorization")}
        if not keys & {self.api_key, f"Bearer {self.api_key}"}:
            return _json(401, _anthropic_error(401, "invalid x-api-key"))
        if not seen.headers.get("anthropic-version"):
            return _json(400, _anthropic_error(400, "anthropic-version: header is required"))
        seen.problem = _check_anthropic(seen.body) or self._check_thinking(seen.body)
        if seen.problem is not None:
            return _json(400, _anthropic_error(400, seen.problem))
        return await self._answer(seen, self._next(seen), request)

    def _check_thinking(self, body: dict[str, Any]) -> str | None:
        """Signed thinking blocks, and each tool_use turn opened by exactly its own."""
        for index, message in enumerate(body.get("messages") or []):
            content = message.get("content")
            if message.get("role") != "assistant" or not isinstance(content, list):
                continue
            for block in content:
                kind = block.get("type")
                if kind == "thinking" and block.get("signature") != _sign(
                    "thinking", str(block.get("thinking"))
                ):
                    return f"messages.{index}.content: Invalid `signature` in `thinking` block"
                if kind == "redacted_thinking" and not _redacted_ok(str(block.get("data"))):
                    return f"messages.{index}.content: Invalid `data` in `redacted_thinking` block"
            uses = [str(b.get("id")) for b in content if b.get("type") == "tool_use"]
            expected = next(
                (self.thinking_of_use[u] for u in uses if u in self.thinking_of_use), None
            )
            if expected is None or (body.get("thinking") or {}).get("type") != "enabled":
                continue
            opening = [b for b in content if b.get("type") in ("thinking", "redacted_thinking")]
            if content[: len(expected)] != expected or opening != expected:
                return (
                    f"messages.{index}.content.0.type: Expected `thinking` or "
                    "`redacted_thinking`, but found another block. When `thinking` is "
                    "enabled, an assistant message with tool_use must start with the "
                    "thinking blocks it was given, unchanged."
                )
        return None

    async def _answer(
        self, seen: Request, turn: Turn, request: web.Request | None = None
    ) -> web.StreamResponse:
        if turn.hold or turn.delay:
            # Waiting on the closing event lets `stop` end held and slow answers at once.
            timeout = None if turn.hold else turn.delay
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._closing.wait(), timeout)
            if turn.hold:
                return _json(503, {"error": {"message": "the fake stopped"}})
        n = next(self._ids)
        headers = dict(turn.headers)
        headers["request-id" if seen.protocol == "anthropic" else "x-request-id"] = f"req_{n}"
        if turn.retry_after is not None:
            headers["retry-after"] = f"{turn.retry_after:g}"
        if turn.raw is not None:
            return web.Response(
                status=turn.status, text=turn.raw, content_type="application/json", headers=headers
            )
        if turn.status != 200:
            message = turn.message or _TOO_LONG[seen.protocol]
            if seen.protocol != "anthropic":
                return _json(turn.status, _openai_error(message, turn.code), headers)
            return _json(turn.status, _anthropic_error(turn.status, message), headers)
        if seen.protocol == "responses":
            body = self._response(seen, turn, n)
        elif seen.protocol == "openai":
            body = _openai_completion(seen, turn, n)
        else:
            body = self._message(seen, turn, n)
        if request is not None and seen.body.get("stream") is True:
            return await stream(
                request, seen.protocol, body, seen.body, headers, turn.streaming, self._closing
            )
        return _json(200, body, headers)

    def _response(self, seen: Request, turn: Turn, n: int) -> dict[str, Any]:
        body = _responses_body(seen, turn, n)
        for item in body["output"]:
            if item["type"] == "reasoning":
                self.reasoning_items[item["id"]] = item
                for call in body["output"]:
                    if call["type"] == "function_call":
                        self._reasoning_of_call[call["call_id"]] = item["id"]
        return body

    def _message(self, seen: Request, turn: Turn, n: int) -> dict[str, Any]:
        body = _anthropic_message(seen, turn, n)
        thinking = [b for b in body["content"] if b["type"] in ("thinking", "redacted_thinking")]
        if thinking:
            for block in body["content"]:
                if block["type"] == "tool_use":
                    self.thinking_of_use[block["id"]] = thinking
        return body


# -- rendering -------------------------------------------------------------------------------


def _json(status: int, body: Any, headers: dict[str, str] | None = None) -> web.Response:
    return web.json_response(body, status=status, headers=headers)


_SECRET = b"the fake's signing key"


def _sign(kind: str, text: str) -> str:
    digest = hmac.new(_SECRET, f"{kind}:{text}".encode(), hashlib.sha256).digest()
    return base64.b64encode(digest).decode()


def _redacted(n: int) -> str:
    token = f"redacted-{n}"
    return base64.b64encode(f"{token}:{_sign('redacted', token)}".encode()).decode()


def _redacted_ok(data: str) -> bool:
    try:
        token, _, signature = base64.b64decode(data).decode().partition(":")
    except ValueError:
        return False
    return signature == _sign("redacted", token)


def _openai_error(message: str, code: str | None) -> dict[str, Any]:
    return {
        "error": {"message": message, "type": "invalid_request_error", "param": None, "code": code}
    }


def _anthropic_error(status: int, message: str) -> dict[str, Any]:
    kind = _ANTHROPIC_ERRORS.get(status, "api_error")
    return {"type": "error", "error": {"type": kind, "message": message}}


def _usage(seen: Request, turn: Turn) -> dict[str, int]:
    size = len(json.dumps(seen.body))
    values = {
        "prompt_tokens": 10 + size // 40,
        "completion_tokens": 5 + len(turn.text or "") // 4 + 10 * len(turn.calls),
        "cached_tokens": 0,
        "cache_write_tokens": 0,
        "reasoning_tokens": len(turn.thinking or "") // 4,
    }
    values.update(turn.usage)
    return values


def _arguments(call: Call) -> str:
    return call.arguments if isinstance(call.arguments, str) else json.dumps(call.arguments)


def _openai_completion(seen: Request, turn: Turn, n: int) -> dict[str, Any]:
    usage = _usage(seen, turn)
    message: dict[str, Any] = {"role": "assistant", "content": turn.text, "refusal": None}
    if turn.stop == "refusal":
        message = {"role": "assistant", "content": None, "refusal": turn.text}
    if turn.calls:
        message["tool_calls"] = [
            {
                "id": call.id or f"call_{n}_{index}",
                "type": "function",
                "function": {"name": call.name, "arguments": _arguments(call)},
            }
            for index, call in enumerate(turn.calls)
        ]
    finish = {"end": "tool_calls" if turn.calls else "stop", "length": "length", "refusal": "stop"}
    return {
        "id": f"chatcmpl-{n}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": seen.body.get("model"),
        "system_fingerprint": "fp_fake",
        "choices": [
            {"index": 0, "message": message, "finish_reason": finish[turn.stop], "logprobs": None}
        ],
        "usage": {
            "prompt_tokens": usage["prompt_tokens"],
            "completion_tokens": usage["completion_tokens"],
            "total_tokens": usage["prompt_tokens"] + usage["completion_tokens"],
            "prompt_tokens_details": {"cached_tokens": usage["cached_tokens"], "audio_tokens": 0},
            "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0},
        },
    }


def _responses_body(seen: Request, turn: Turn, n: int) -> dict[str, Any]:
    usage = _usage(seen, turn)
    body = seen.body
    output: list[dict[str, Any]] = []
    if body.get("reasoning") is not None or turn.thinking is not None:
        summary = [{"type": "summary_text", "text": turn.thinking}] if turn.thinking else []
        item: dict[str, Any] = {"id": f"rs_{n}", "type": "reasoning", "summary": summary}
        if "reasoning.encrypted_content" in (body.get("include") or []):
            item["encrypted_content"] = _sign("reasoning", f"rs_{n}:{turn.thinking}")
        output.append(item)
    if turn.stop == "refusal":
        content: list[dict[str, Any]] = [{"type": "refusal", "refusal": turn.text or ""}]
    else:
        content = [{"type": "output_text", "text": turn.text, "annotations": []}]
    if turn.text or turn.stop == "refusal":
        output.append(
            {
                "id": f"msg_{n}",
                "type": "message",
                "status": "completed",
                "role": "assistant",
                "content": content,
            }
        )
    for index, call in enumerate(turn.calls):
        output.append(
            {
                "id": f"fc_{n}_{index}",
                "type": "function_call",
                "status": "completed",
                "call_id": call.id or f"call_{n}_{index}",
                "name": call.name,
                "arguments": _arguments(call),
            }
        )
    cut = turn.stop == "length"
    return {
        "id": f"resp_{n}",
        "object": "response",
        "created_at": int(time.time()),
        "status": "incomplete" if cut else "completed",
        "incomplete_details": {"reason": "max_output_tokens"} if cut else None,
        "error": None,
        "model": body.get("model"),
        "output": output,
        "parallel_tool_calls": body.get("parallel_tool_calls", True),
        "tool_choice": body.get("tool_choice", "auto"),
        "tools": body.get("tools") or [],
        "store": body.get("store", True),
        "usage": {
            "input_tokens": usage["prompt_tokens"],
            "input_tokens_details": {"cached_tokens": usage["cached_tokens"]},
            # Reasoning tokens are part of the output tokens.
            "output_tokens": usage["completion_tokens"] + usage["reasoning_tokens"],
            "output_tokens_details": {"reasoning_tokens": usage["reasoning_tokens"]},
            "total_tokens": usage["prompt_tokens"]
            + usage["completion_tokens"]
            + usage["reasoning_tokens"],
        },
    }


def _anthropic_message(seen: Request, turn: Turn, n: int) -> dict[str, Any]:
    usage = _usage(seen, turn)
    content: list[dict[str, Any]] = []
    if (seen.body.get("thinking") or {}).get("type") == "enabled":
        text = turn.thinking or f"Thinking about turn {n}."
        content.append({"type": "thinking", "thinking": text, "signature": _sign("thinking", text)})
        if turn.redacted:
            content.append({"type": "redacted_thinking", "data": _redacted(n)})
    if turn.text:
        content.append({"type": "text", "text": turn.text})
    for index, call in enumerate(turn.calls):
        arguments: Any = call.arguments
        if isinstance(arguments, str):
            arguments = json.loads(arguments)  # the Messages API only sends objects
        content.append(
            {
                "type": "tool_use",
                "id": call.id or f"toolu_{n}_{index}",
                "name": call.name,
                "input": arguments,
            }
        )
    stop = {
        "end": "tool_use" if turn.calls else "end_turn",
        "length": "max_tokens",
        "refusal": "refusal",
    }
    cached, written = usage["cached_tokens"], usage["cache_write_tokens"]
    return {
        "id": f"msg_{n}",
        "type": "message",
        "role": "assistant",
        "model": seen.body.get("model"),
        "content": content,
        "stop_reason": stop[turn.stop],
        "stop_sequence": None,
        "usage": {
            # Anthropic counts cache reads and writes apart from the other input tokens.
            "input_tokens": max(usage["prompt_tokens"] - cached - written, 0),
            "output_tokens": usage["completion_tokens"],
            "cache_creation_input_tokens": written,
            "cache_read_input_tokens": cached,
        },
    }


# -- what the real APIs refuse -------------------------------------------------------------------


def _check_tools(tools: Any, anthropic: bool) -> str | None:
    if tools is None:
        return None
    if not isinstance(tools, list):
        return "tools: expected a list"
    for index, spec in enumerate(tools):
        if anthropic:
            if not spec.get("name") or spec.get("input_schema", {}).get("type") != "object":
                return f"tools.{index}: needs a name and an object input_schema"
        elif spec.get("type") != "function" or not spec.get("function", {}).get("name"):
            return f"tools[{index}]: expected a function with a name"
    return None


_CHAT_MESSAGE_KEYS = {
    "role",
    "content",
    "name",
    "tool_calls",
    "tool_call_id",
    "refusal",
    "audio",
    "function_call",
}


def _check_openai(body: Any) -> str | None:
    if not isinstance(body, dict):
        return "the body must be a JSON object"
    if not isinstance(body.get("model"), str) or not body["model"]:
        return "you must provide a model parameter"
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return "messages: expected a non-empty array"
    open_calls: list[str] = []
    for index, message in enumerate(messages):
        role = message.get("role")
        if role not in ("system", "developer", "user", "assistant", "tool"):
            return f"messages[{index}].role: invalid value {role!r}"
        unknown = sorted(set(message) - _CHAT_MESSAGE_KEYS)
        if unknown:
            return (
                f"Additional properties are not allowed ({unknown[0]!r} was unexpected) - "
                f"'messages.{index}'"
            )
        if role == "tool":
            if message.get("tool_call_id") not in open_calls:
                return (
                    f"messages[{index}]: messages with role 'tool' must be a response to a "
                    "preceding message with 'tool_calls'"
                )
            open_calls.remove(message["tool_call_id"])
            continue
        if open_calls:
            return (
                "An assistant message with 'tool_calls' must be followed by tool messages "
                f"responding to each 'tool_call_id'. Missing: {', '.join(open_calls)}"
            )
        if role == "assistant":
            for call in message.get("tool_calls") or []:
                if call.get("type") != "function" or not isinstance(
                    call.get("function", {}).get("arguments"), str
                ):
                    return f"messages[{index}].tool_calls: arguments must be a string"
                open_calls.append(call["id"])
    if open_calls:
        return f"tool calls without results: {', '.join(open_calls)}"
    return _check_tools(body.get("tools"), anthropic=False)


def _check_anthropic(body: Any) -> str | None:
    if not isinstance(body, dict):
        return "the body must be a JSON object"
    if not isinstance(body.get("model"), str) or not body["model"]:
        return "model: Field required"
    if not isinstance(body.get("max_tokens"), int) or body["max_tokens"] < 1:
        return "max_tokens: Field required"
    system = body.get("system")
    if system is not None and not isinstance(system, str | list):
        return "system: expected a string or a list of text blocks"
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return "messages: at least one message is required"
    if messages[0].get("role") != "user":
        return "messages: first message must use the 'user' role"
    previous_uses: list[str] = []
    for index, message in enumerate(messages):
        role = message.get("role")
        if role not in ("user", "assistant"):
            return f"messages.{index}.role: Input should be 'user' or 'assistant'"
        if index and messages[index - 1].get("role") == role:
            return f"messages.{index}: roles must alternate between 'user' and 'assistant'"
        content = message.get("content")
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
        if not isinstance(blocks, list) or not blocks:
            return f"messages.{index}: content must be a non-empty string or list"
        uses: list[str] = []
        results: list[str] = []
        for block in blocks:
            kind = block.get("type")
            if kind == "text":
                if not str(block.get("text", "")).strip():
                    return f"messages.{index}: text content blocks must be non-empty"
            elif kind == "tool_use":
                if role != "assistant" or not isinstance(block.get("input"), dict):
                    return f"messages.{index}: tool_use blocks belong to assistant turns"
                uses.append(str(block.get("id")))
            elif kind == "tool_result":
                if role != "user":
                    return f"messages.{index}: tool_result blocks belong to user turns"
                results.append(str(block.get("tool_use_id")))
            elif kind in ("thinking", "redacted_thinking"):
                if role != "assistant":
                    return f"messages.{index}: {kind} blocks belong to assistant turns"
            else:
                return f"messages.{index}: unknown content block type {kind!r}"
        if role == "user" and sorted(results) != sorted(previous_uses):
            return (
                f"messages.{index}: each tool_use of the previous turn needs a tool_result "
                f"block here (tool_use {previous_uses}, tool_result {results})"
            )
        previous_uses = uses if role == "assistant" else []
    if previous_uses:
        return "the last assistant turn has tool_use blocks without results"
    thinking = body.get("thinking")
    if thinking is not None:
        budget = thinking.get("budget_tokens")
        if thinking.get("type") != "enabled" or not isinstance(budget, int) or budget < 1024:
            return "thinking.budget_tokens: Input should be greater than or equal to 1024"
        if budget >= body["max_tokens"]:
            return "`max_tokens` must be greater than `thinking.budget_tokens`"
        if body.get("temperature") not in (None, 1):
            return "`temperature` may only be set to 1 when thinking is enabled"
    return _check_tools(body.get("tools"), anthropic=True)


def _check_responses(body: Any) -> str | None:
    if not isinstance(body, dict):
        return "the body must be a JSON object"
    if not isinstance(body.get("model"), str) or not body["model"]:
        return "Missing required parameter: 'model'."
    items = body.get("input")
    if not isinstance(items, list) or not items:
        return "Missing required parameter: 'input'."
    open_calls: list[str] = []
    for index, item in enumerate(items):
        kind = item.get("type", "message")
        if kind == "message":
            if item.get("role") not in ("user", "assistant", "system", "developer"):
                return f"Invalid value for 'input[{index}].role'."
            if open_calls:
                return f"No tool output found for function call {open_calls[0]}."
        elif kind == "function_call":
            if not isinstance(item.get("arguments"), str) or not item.get("call_id"):
                return f"input[{index}]: a function_call needs a call_id and string arguments"
            open_calls.append(str(item["call_id"]))
        elif kind == "function_call_output":
            if item.get("call_id") not in open_calls:
                return (
                    "No tool call found for function call output with call_id "
                    f"{item.get('call_id')}."
                )
            open_calls.remove(item["call_id"])
            if not isinstance(item.get("output"), str):
                return f"input[{index}].output: expected a string"
        elif kind == "reasoning":
            if not item.get("id"):
                return f"input[{index}]: a reasoning item needs its id"
        else:
            return (
                f"Invalid value: {kind!r}. Supported values are: 'message', "
                "'function_call', 'function_call_output', 'reasoning'."
            )
    if open_calls:
        return f"No tool output found for function call {open_calls[0]}."
    include = body.get("include") or []
    if "reasoning.encrypted_content" in include and body.get("store", True):
        return "Encrypted reasoning content is only returned with store set to false."
    for index, tool in enumerate(body.get("tools") or []):
        if tool.get("type") != "function" or not tool.get("name"):
            return f"tools[{index}]: expected a function with a name"
        if tool.get("strict"):
            problem = _strict_problem(tool.get("parameters"), "")
            if problem is not None:
                return f"Invalid schema for function {tool['name']!r}: {problem}"
    return None


def _strict_problem(schema: Any, path: str) -> str | None:
    """What strict mode refuses in `schema` (the rules of OpenAI's structured outputs)."""
    if not isinstance(schema, dict):
        return f"In context=({path}), a schema must be an object."
    for key in ("default", "minLength", "maxLength", "patternProperties", "oneOf", "not"):
        if key in schema:
            return f"In context=({path}), '{key}' is not permitted."
    if "$ref" in schema:
        return None
    if not any(k in schema for k in ("type", "anyOf", "enum", "const")):
        return f"In context=({path}), schema must have a 'type' key."
    kinds = schema.get("type")
    kinds = kinds if isinstance(kinds, list) else [kinds]
    if "object" in kinds:
        if schema.get("additionalProperties") is not False:
            return (
                f"In context=({path}), 'additionalProperties' is required to be supplied "
                "and to be false."
            )
        properties = schema.get("properties") or {}
        missing = [k for k in properties if k not in (schema.get("required") or [])]
        if missing:
            return (
                f"In context=({path}), 'required' is required to be supplied and to be an "
                f"array including every key in properties. Missing '{missing[0]}'."
            )
        for name, sub in properties.items():
            problem = _strict_problem(sub, f"{path}, {name!r}" if path else repr(name))
            if problem:
                return problem
    if "array" in kinds:
        problem = _strict_problem(schema.get("items"), f"{path}, 'items'")
        if problem:
            return problem
    for index, sub in enumerate(schema.get("anyOf") or []):
        problem = _strict_problem(sub, f"{path}, 'anyOf', {index}")
        if problem:
            return problem
    for name, sub in (schema.get("$defs") or {}).items():
        problem = _strict_problem(sub, f"$defs, {name!r}")
        if problem:
            return problem
    return None
