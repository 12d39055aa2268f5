"""The model port, and a scripted model that replays canned chat-completion replies.

A `Model` answers one turn: it gets the run's transcript (OpenAI-shaped chat messages)
and the tools' OpenAI-style function definitions, and returns a `ModelResponse`. Provider
models (``adapters.models``) translate their SDK's errors into `runtime.ModelError` and
report how the answer ended (`StopReason`) and what it cost (`Usage`).

What a provider needs back verbatim on later turns (reasoning items, signed thinking
blocks) rides on the assistant message as opaque `PROVIDER_STATE`: the runtime stores it
with the transcript and never reads it; the model that wrote it reads it back, others
ignore it (`chat_messages` drops it for plain Chat Completions).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol, runtime_checkable

PROVIDER_STATE = "provider_state"
"""The key of an assistant message's opaque provider data: a JSON object
``{"provider": <name>, ...}`` that only the model of that provider reads."""


@dataclass(frozen=True, slots=True)
class Usage:
    """What one model call consumed, as the provider reported it.

    Attributes:
        prompt_tokens: Input tokens, including those served from or written to a cache.
        completion_tokens: Output tokens.
        cached_tokens: Of `prompt_tokens`, how many were read from the provider's cache.
        cache_write_tokens: Of `prompt_tokens`, how many were written to the cache
            (Anthropic reports them; they are billed above the input price).
        cost: What the call cost, from a price table (``None`` when no price is known).
    """

    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    cache_write_tokens: int = 0
    cost: float | None = None

    @property
    def total_tokens(self) -> int:
        """Prompt plus completion tokens."""
        return self.prompt_tokens + self.completion_tokens

    def __add__(self, other: Usage) -> Usage:
        cost = None
        if self.cost is not None or other.cost is not None:
            cost = (self.cost or 0.0) + (other.cost or 0.0)
        return Usage(
            prompt_tokens=self.prompt_tokens + other.prompt_tokens,
            completion_tokens=self.completion_tokens + other.completion_tokens,
            cached_tokens=self.cached_tokens + other.cached_tokens,
            cache_write_tokens=self.cache_write_tokens + other.cache_write_tokens,
            cost=cost,
        )


def usage_of_events(events: Iterable[dict[str, Any]]) -> Usage:
    """A run's usage summed over the ``model_call`` events of its flight recorder.

    The run's own counters hold prompt and completion tokens; cached tokens and cost are
    recorded per model call, so this adds them up (e.g. over `Runtime.events`).
    """
    total = Usage()
    for event in events:
        if event.get("kind") != "model_call":
            continue
        data = event.get("data") or {}
        cost = data.get("cost")
        total = total + Usage(
            prompt_tokens=int(data.get("prompt_tokens") or 0),
            completion_tokens=int(data.get("completion_tokens") or 0),
            cached_tokens=int(data.get("cached_tokens") or 0),
            cache_write_tokens=int(data.get("cache_write_tokens") or 0),
            cost=float(cost) if cost is not None else None,
        )
    return total


class StopReason(StrEnum):
    """Why the model stopped answering.

    ``end`` and ``tool_calls`` are ordinary turns. A ``length`` answer was cut off by the
    output token limit (OpenAI ``finish_reason: length``, Anthropic ``stop_reason:
    max_tokens``); a ``refusal`` is a declined or filtered answer (OpenAI ``refusal`` or
    ``finish_reason: content_filter``, Anthropic ``stop_reason: refusal``). The runtime
    never acts on either: the run fails with a message saying which.
    """

    END = "end"
    TOOL_CALLS = "tool_calls"
    LENGTH = "length"
    REFUSAL = "refusal"


@dataclass(frozen=True, slots=True)
class ToolCallRequest:
    """One tool call the model asked for.

    Attributes:
        id: The model's id for the call (echoed in the tool result message).
        name: The tool's name.
        arguments: The raw JSON text of the arguments, as the model produced it.
    """

    id: str
    name: str
    arguments: str


TextSink = Callable[[str], None]
"""Receives the text of an answer piece by piece while a streaming model produces it."""


@dataclass(frozen=True, slots=True)
class ModelRequest:
    """Everything the model is given for one turn.

    Attributes:
        model: The agent's model name.
        messages: OpenAI-shaped chat messages (system, user, assistant, tool).
        tools: OpenAI-style function definitions.
        attempt: 1 for the first call of a turn; higher when a call was interrupted.
        on_text: Called with each piece of the answer's text as it arrives, by a model
            that streams (`TextSink`); a model that does not stream ignores it. Pieces are
            a preview only: the turn's record is the `ModelResponse` the call returns.
    """

    model: str
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    attempt: int = 1
    on_text: TextSink | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class ModelResponse:
    """What the model answered for one turn.

    Attributes:
        text: The answer, or the text the model gave beside its tool calls (shown on
            approval cards as the model's reason).
        tool_calls: The tools it asked for, in order.
        usage: What the call consumed.
        stop: How the answer ended; ``None`` means an ordinary turn (``tool_calls`` when
            there are calls, else ``end``).
        refusal: The provider's refusal message, when it gave one.
        reasoning: A readable summary of the model's reasoning (a thinking block's text,
            a reasoning summary), shown on approval cards when there is no `text`;
            never signatures or encrypted data.
        provider_state: Opaque JSON the provider needs back with this turn, stored with
            the assistant message under `PROVIDER_STATE` (``{"provider": ..., ...}``).
    """

    text: str | None
    tool_calls: tuple[ToolCallRequest, ...] = ()
    usage: Usage = field(default_factory=Usage)
    stop: StopReason | None = None
    refusal: str | None = None
    reasoning: str | None = None
    provider_state: dict[str, Any] | None = None

    @property
    def stated_reason(self) -> str | None:
        """Why the model asked for its calls: its text, else its reasoning summary."""
        return self.text or self.reasoning or None

    @property
    def stop_reason(self) -> StopReason:
        """`stop`, or the ordinary reason inferred from the tool calls."""
        if self.stop is not None:
            return self.stop
        return StopReason.TOOL_CALLS if self.tool_calls else StopReason.END

    def as_message(self) -> dict[str, Any]:
        """The reply as an OpenAI-shaped assistant message for the transcript."""
        message: dict[str, Any] = {"role": "assistant", "content": self.text}
        if self.tool_calls:
            message["tool_calls"] = [
                {
                    "id": c.id,
                    "type": "function",
                    "function": {"name": c.name, "arguments": c.arguments},
                }
                for c in self.tool_calls
            ]
        if self.provider_state is not None:
            message[PROVIDER_STATE] = self.provider_state
        return message


def chat_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`messages` without `PROVIDER_STATE`, as plain Chat Completions accepts them."""
    if not any(PROVIDER_STATE in m for m in messages):
        return messages
    return [{k: v for k, v in m.items() if k != PROVIDER_STATE} for m in messages]


def provider_state(message: dict[str, Any], provider: str) -> dict[str, Any] | None:
    """The `PROVIDER_STATE` of an assistant message when `provider` wrote it."""
    state = message.get(PROVIDER_STATE)
    if isinstance(state, dict) and state.get("provider") == provider:
        return state
    return None


@runtime_checkable
class Model(Protocol):
    """A chat model: one async call per turn.

    Implementations translate their provider's errors at this edge: a failure the run
    cannot get past raises `runtime.ModelError` (any other exception fails the run too,
    with its type and message). ``name`` is recorded with every model call.

    Streaming is optional: a model that can may pass the answer's text, as it arrives, to
    the request's `ModelRequest.on_text`, and still returns the whole `ModelResponse`
    (the same one it would return without streaming). A stream that breaks off raises
    `runtime.ModelError` like any failed call; nothing of it is kept.
    """

    name: str

    async def complete(self, request: ModelRequest) -> ModelResponse:
        """Answer one turn."""
        ...


def parse_chat_completion(payload: dict[str, Any]) -> ModelResponse:
    """Read an OpenAI chat-completion reply into a `ModelResponse`.

    Raises:
        ValueError: If the payload has no choices or a malformed tool call.
    """
    choices = payload.get("choices") or []
    if not choices:
        raise ValueError("chat completion has no choices")
    choice = choices[0]
    message = choice.get("message") or {}
    calls = []
    for raw in message.get("tool_calls") or []:
        function = raw.get("function") or {}
        arguments = function.get("arguments", "{}")
        if not isinstance(arguments, str):
            arguments = json.dumps(arguments)
        calls.append(
            ToolCallRequest(id=str(raw["id"]), name=str(function["name"]), arguments=arguments)
        )
    usage = payload.get("usage") or {}
    details = usage.get("prompt_tokens_details") or {}
    refusal = message.get("refusal")
    return ModelResponse(
        text=message.get("content"),
        tool_calls=tuple(calls),
        usage=Usage(
            prompt_tokens=int(usage.get("prompt_tokens") or 0),
            completion_tokens=int(usage.get("completion_tokens") or 0),
            cached_tokens=int(details.get("cached_tokens") or 0),
        ),
        stop=chat_stop_reason(choice.get("finish_reason"), refusal, bool(calls)),
        refusal=refusal,
    )


def chat_stop_reason(finish_reason: str | None, refusal: str | None, calls: bool) -> StopReason:
    """The `StopReason` of a Chat Completions choice."""
    if refusal or finish_reason == "content_filter":
        return StopReason.REFUSAL
    if finish_reason == "length":
        return StopReason.LENGTH
    return StopReason.TOOL_CALLS if calls else StopReason.END


def tool_call_reply(
    *calls: tuple[str, dict[str, Any]] | tuple[str, dict[str, Any], str],
    content: str | None = None,
    prompt_tokens: int = 12,
    completion_tokens: int = 6,
) -> dict[str, Any]:
    """Build an OpenAI-shaped reply asking for tool calls.

    Args:
        calls: ``(name, arguments)`` or ``(name, arguments, id)`` tuples.
        content: Optional text the model says alongside (its stated reason).
        prompt_tokens: Usage to report.
        completion_tokens: Usage to report.
    """
    tool_calls = []
    for index, call in enumerate(calls):
        call_id = call[2] if len(call) == 3 else f"call_{index + 1}"
        tool_calls.append(
            {
                "id": call_id,
                "type": "function",
                "function": {"name": call[0], "arguments": json.dumps(call[1])},
            }
        )
    return {
        "object": "chat.completion",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content, "tool_calls": tool_calls},
                "finish_reason": "tool_calls",
            }
        ],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }


def final_reply(text: str, prompt_tokens: int = 20, completion_tokens: int = 8) -> dict[str, Any]:
    """Build an OpenAI-shaped reply that ends the run with `text`."""
    return {
        "object": "chat.completion",
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
        ],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }


class ScriptedModel:
    """Replays canned OpenAI-shaped chat-completion replies; no network.

    The reply for a turn is chosen by how many assistant messages the current run's
    transcript already holds, so a process that restarts mid-run gets the same reply for
    the same turn. When the script runs out the last reply repeats.

    Args:
        replies: Chat-completion payloads, one per turn, or a callable taking the request
            and returning a payload.
        name: The model name reported to the run.
        keep_calls: How many recent requests `calls` keeps (for tests to inspect).
    """

    def __init__(
        self,
        replies: Sequence[dict[str, Any]] | Callable[[ModelRequest], dict[str, Any]],
        name: str = "scripted",
        keep_calls: int = 1000,
    ) -> None:
        self.name = name
        self._replies = replies
        self._keep = keep_calls
        self.calls: list[ModelRequest] = []

    async def complete(self, request: ModelRequest) -> ModelResponse:
        """Answer from the script."""
        self.calls.append(request)
        if len(self.calls) > self._keep:
            # A serving process would otherwise keep every transcript it ever sent.
            del self.calls[: len(self.calls) - self._keep]
        if callable(self._replies):
            return parse_chat_completion(self._replies(request))
        if not self._replies:
            raise ValueError("the scripted model has no replies")
        turn = _turn_of(request.messages)
        payload = self._replies[min(turn, len(self._replies) - 1)]
        return parse_chat_completion(payload)


def _turn_of(messages: list[dict[str, Any]]) -> int:
    # Only this run's part of the transcript counts: thread history ends at the last
    # user message that opened the run.
    start = 0
    for index, message in enumerate(messages):
        if message.get("role") == "user":
            start = index
    return sum(1 for m in messages[start:] if m.get("role") == "assistant")
