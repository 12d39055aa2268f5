"""Helpers for the examples' scripted models: read the transcript a turn is given.

The examples run without a network: their `runtime.ScriptedModel` is given a function
that looks at the conversation so far and returns a canned OpenAI-shaped reply, the way a
real model would react to tool results (including a "Permission denied" result).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from runtime import ModelRequest, final_reply


def _run_start(messages: list[dict[str, Any]]) -> int:
    start = 0
    for index, message in enumerate(messages):
        if message.get("role") == "user":
            start = index
    return start


def turn(request: ModelRequest) -> int:
    """How many replies the model already gave in this run (0 on the first turn)."""
    start = _run_start(request.messages)
    return sum(1 for m in request.messages[start:] if m.get("role") == "assistant")


def user_text(request: ModelRequest) -> str:
    """The message that started this run."""
    message = request.messages[_run_start(request.messages)]
    return str(message.get("content") or "")


def last_result(request: ModelRequest) -> str:
    """The content of the most recent tool result ("" if there is none)."""
    for message in reversed(request.messages):
        if message.get("role") == "tool":
            return str(message.get("content") or "")
    return ""


def last_json(request: ModelRequest) -> dict[str, Any] | None:
    """The most recent tool result parsed as a JSON object, or None if it is not one.

    A call an approver changed before allowing it starts with a one-line note saying so
    (`runtime.domain.edits.model_note`); the result follows it.
    """
    text = last_result(request)
    if text.startswith("[Note:") and "\n" in text:
        text = text.split("\n", 1)[1]
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def offer(what: str, examples: Sequence[str]) -> dict[str, Any]:
    """The reply to a message the scripted model does not understand: what the agent
    can do and what to type, instead of acting on a guess."""
    tries = " or ".join(f'"{example}"' for example in examples)
    return final_reply(f"I can {what}. Try: {tries}.")


def blocked(result: str) -> bool:
    """Whether a tool result says the call was not allowed to run."""
    return result.startswith(("Permission denied", "Aborted", "Error"))
