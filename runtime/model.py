"""The model port, and a scripted model that replays canned chat-completion replies."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable


@dataclass(frozen=True, slots=True)
class Usage:
    """Token counts of one model call."""

    prompt_tokens: int = 0
    completion_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        """Prompt plus completion tokens."""
        return self.prompt_tokens + self.completion_tokens


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


@dataclass(frozen=True, slots=True)
class ModelRequest:
    """Everything the model is given for one turn.

    Attributes:
        model: The agent's model name.
        messages: OpenAI-shaped chat messages (system, user, assistant, tool).
        tools: OpenAI-style function definitions.
        attempt: 1 for the first call of a turn; higher when a call was interrupted.
    """

    model: str
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    attempt: int = 1


@dataclass(frozen=True, slots=True)
class ModelResponse:
    """What the model answered for one turn."""

    text: str | None
    tool_calls: tuple[ToolCallRequest, ...] = ()
    usage: Usage = field(default_factory=Usage)

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
        return message


@runtime_checkable
class Model(Protocol):
    """A chat model. Implementations translate their provider's errors at this edge."""

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
    message = choices[0].get("message") or {}
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
    return ModelResponse(
        text=message.get("content"),
        tool_calls=tuple(calls),
        usage=Usage(
            prompt_tokens=int(usage.get("prompt_tokens", 0)),
            completion_tokens=int(usage.get("completion_tokens", 0)),
        ),
    )


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
