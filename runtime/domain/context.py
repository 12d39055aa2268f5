"""What a running tool can learn about the call it serves."""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from runtime.domain.errors import SignoffError
from runtime.domain.tickets import Actor


@dataclass(frozen=True, slots=True)
class ToolContext:
    """The call a tool is serving.

    Attributes:
        run_id: The run that made the call.
        thread_id: The run's conversation.
        agent: The agent's name.
        call_id: Our id for this tool call.
        execution_key: Stable across every retry of this call and unique across calls;
            pass it to external systems as an idempotency key.
        attempt: 1 for the first dispatch, then one more for every replay or retry.
        answer: Typed input this call was resumed with, if it asked for any.
        actor: Who made the decision that let this call run (None for `allow` tools).
        requester: The user who started the run.
    """

    run_id: str
    thread_id: str
    agent: str
    call_id: str
    execution_key: str
    attempt: int
    answer: dict[str, Any] | None
    actor: Actor | None
    requester: str | None


_current: ContextVar[ToolContext | None] = ContextVar("signoff_tool_context", default=None)


def current_tool_context() -> ToolContext:
    """Return the context of the tool call being served.

    Raises:
        SignoffError: When called outside a tool invoked by the runtime.
    """
    context = _current.get()
    if context is None:
        raise SignoffError("current_tool_context() is only available inside a running tool")
    return context


def _enter(context: ToolContext) -> object:
    return _current.set(context)


def _leave(token: object) -> None:
    _current.reset(token)  # type: ignore[arg-type]
