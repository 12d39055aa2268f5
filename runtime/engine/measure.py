"""Reporting how long model and tool calls take, and how they end, to the checkpoint.

Durations come from the process's monotonic clock: they measure this process's wait,
not a time the run keeps, so they never go through the injected `Clock`.
"""

from __future__ import annotations

import asyncio
import time

from runtime.domain.errors import ModelError
from runtime.domain.model import Model, ModelRequest, ModelResponse, TextSink
from runtime.domain.states import CallState
from runtime.engine.deps import Deps
from runtime.store.records import CallRecord, RunRecord


def text_sink(deps: Deps, run: RunRecord) -> TextSink | None:
    """Where the model's streamed text goes: each piece reported as ``model_text`` (None
    when nothing observes the checkpoint, so models do not stream for nobody)."""
    if deps.checkpoint is None:
        return None
    run_id, turn, attempt = run.run_id, run.turns + 1, run.model_attempt

    def sink(text: str) -> None:
        deps.reach("model_text", run_id=run_id, turn=turn, attempt=attempt, text=text)

    return sink


def started() -> float:
    """A mark to measure a call's duration from (`tool_returned`)."""
    return time.perf_counter()


async def complete(deps: Deps, model: Model, request: ModelRequest) -> ModelResponse:
    """`model`'s answer to `request`; reports ``model_answered`` (with ``seconds`` and
    tokens) or ``model_failed`` (with the failure's ``kind``; ``error`` for an exception
    that is not a `ModelError`)."""
    mark = started()
    try:
        response = await model.complete(request)
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        kind = exc.kind.value if isinstance(exc, ModelError) else "error"
        deps.reach("model_failed", model=model.name, kind=kind, seconds=started() - mark)
        raise
    deps.reach(
        "model_answered",
        model=model.name,
        seconds=started() - mark,
        prompt_tokens=response.usage.prompt_tokens,
        completion_tokens=response.usage.completion_tokens,
    )
    return response


def tool_returned(
    deps: Deps, call: CallRecord, mark: float, failed: str | None, unknown: str | None
) -> None:
    """Report ``tool_returned`` of `call`, dispatched at `mark`, with its ``outcome``
    (``ok``, ``failed``, or ``uncertain``: it may or may not have taken effect)."""
    outcome = "failed" if failed is not None else "ok" if unknown is None else "uncertain"
    deps.reach(
        "tool_returned",
        call_id=call.call_id,
        tool=call.tool,
        outcome=outcome,
        seconds=started() - mark,
    )


def result_committed(deps: Deps, call: CallRecord) -> None:
    """Report ``result_committed`` of a dispatched `call`, and ``call_uncertain`` when
    its outcome is unknown and left for a person to resolve."""
    deps.reach("result_committed", call_id=call.call_id, tool=call.tool)
    if call.state is CallState.UNCERTAIN:
        deps.reach("call_uncertain", call_id=call.call_id, tool=call.tool)


def recovered(deps: Deps, run_id: str, orphaned: list[CallRecord]) -> None:
    """Report ``run_recovered`` (a worker died, or stalled past its lease, with these calls
    dispatched), and ``call_uncertain`` for each of them left for a person to resolve."""
    deps.reach("run_recovered", run_id=run_id, calls=len(orphaned))
    for call in orphaned:
        if call.state is CallState.UNCERTAIN:
            deps.reach("call_uncertain", call_id=call.call_id, tool=call.tool)
