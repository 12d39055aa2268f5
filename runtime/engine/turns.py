"""What a turn starts with and what the model is told: whether a run's last model turn
still has calls open, the marks around a model call, the texts of a failed or denied call.
"""

from __future__ import annotations

from typing import Any

from runtime.domain.agent import Agent
from runtime.engine.journal import record
from runtime.store.base import Transaction
from runtime.store.records import RunRecord


def failure_text(exc: Exception) -> str:
    """What the model reads for a tool's exception: the class name and the message, or
    the message alone when the exception class says it was written for the model
    (``model_facing = True``, as the MCP adapter's errors do)."""
    if getattr(type(exc), "model_facing", False) is True:
        return str(exc) or type(exc).__name__
    return f"{type(exc).__name__}: {exc}"


def blocked_text(reason: str | None) -> str:
    """What the model sees for a denied call."""
    return f"Permission denied: {reason}" if reason else "Permission denied"


def batch_open(run: RunRecord) -> bool:
    """Whether the run's last message proposed tool calls not yet folded back."""
    if not run.messages:
        return False
    last = run.messages[-1]
    return last.get("role") == "assistant" and bool(last.get("tool_calls"))


def starts_with_model_call(run: RunRecord, agent: Agent | None) -> bool:
    """Whether driving the claimed `run` begins with a model call (no batch open, no
    pause or cancel asked for, turns left): its claim may then mark that call."""
    return (
        agent is not None
        and not batch_open(run)
        and not run.pause_requested
        and not run.cancel_requested
        and run.turns < agent.max_turns
    )


def mark_model_call(run: RunRecord) -> None:
    """Record (in the next save) that a model call is about to be made."""
    if run.model_in_flight:
        # A previous worker called the model and died before recording the reply: the
        # provider may have charged for it.
        run.usage_incomplete = True
    run.model_attempt += 1
    run.model_in_flight = True


async def record_model_marked(tx: Transaction, run: RunRecord, now: Any) -> None:
    """The event of a model call marked again after an interrupted one."""
    if run.model_attempt > 1:
        await record(
            tx,
            run.run_id,
            now,
            "model_interrupted",
            turn=run.turns + 1,
            attempt=run.model_attempt,
        )
