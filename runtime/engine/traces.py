"""The spans the engine and the services report through `Deps.tracer`.

Each helper costs nothing beyond a comparison while tracing is off (`NO_TRACER`). Span
names and attributes follow OpenTelemetry's GenAI conventions where they have one
(``invoke_agent``, ``chat``, ``execute_tool``, ``gen_ai.*``); the rest are ``signoff.*``.
``docs/tracing.md`` lists them all.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

from runtime.domain.errors import ToolOutcomeUnknown
from runtime.domain.model import Model, ModelRequest, ModelResponse
from runtime.domain.tickets import Allow, ResumeCommand, ResumeTicket
from runtime.domain.tools import InputRequest
from runtime.domain.tracing import NO_TRACER, AttributeValue, Carrier, Span, valid_carrier
from runtime.store.records import CallRecord, ReceivedRecord, RunRecord

if TYPE_CHECKING:
    from runtime.domain.tools import Tool
    from runtime.engine.deps import Deps


CLICK_TRACE = "trace_context"
"""The key of a stored click's ``reply`` that keeps the context of the span the click
arrived in (a W3C carrier), so the worker that applies it later links to it."""

# The span a decision applied outside any span came from (a stored click's), for the
# run it resumes: a task created meanwhile (the worker driving the run) inherits it.
_DECIDED_IN: ContextVar[Carrier | None] = ContextVar("signoff_decided_in", default=None)


def click_trace(item: ReceivedRecord | None) -> Carrier | None:
    """The context of the span a stored click arrived in, if it kept one."""
    if item is None or item.reply is None:
        return None
    return valid_carrier(item.reply.get(CLICK_TRACE))


@contextmanager
def decided_in(carrier: Carrier | None) -> Iterator[None]:
    """Inside the block (and in tasks created in it), a span opened while no span is
    current links to `carrier`: the span a stored click arrived in."""
    if carrier is None:
        yield
        return
    token = _DECIDED_IN.set(carrier)
    try:
        yield
    finally:
        _DECIDED_IN.reset(token)


def _decided_from(deps: Deps) -> Carrier | None:
    """The span a decision is applied in: the current one, else a stored click's."""
    return deps.tracer.carrier() or _DECIDED_IN.get()


@contextmanager
def click_span(deps: Deps, source: str, ticket_id: str) -> Iterator[Span | None]:
    """The ``click <source>`` server span of a chat click that reached no traced request
    (a gateway's or a websocket's event), around its check and storage; None (and no
    span) when tracing is off or a span is current already (the click's HTTP request)."""
    tracer = deps.tracer
    if tracer is NO_TRACER or tracer.carrier() is not None:
        yield None
        return
    attributes = {"signoff.platform": source, "signoff.ticket.id": ticket_id}
    with tracer.span(f"click {source}", kind="server", attributes=attributes) as span:
        yield span


def run_trace(run: RunRecord) -> Carrier | None:
    """The context of the trace `run` was started in, if it kept one."""
    return valid_carrier(run.trace_context) if run.trace_context else None


def start_trace(deps: Deps, run: RunRecord) -> Carrier | None:
    """Open and close the ``start_run`` span of a new run (a child of the current span,
    e.g. the request that starts it); its context becomes the run's trace context."""
    tracer = deps.tracer
    if tracer is NO_TRACER:
        return None
    attributes: dict[str, AttributeValue | None] = {
        "signoff.run.id": run.run_id,
        "signoff.thread.id": run.thread_id,
        "gen_ai.agent.name": run.agent,
        "signoff.origin": str(run.origin.get("platform") or "") or None,
        "signoff.parent_run.id": run.parent_run_id,
    }
    with tracer.span(f"start_run {run.agent}", attributes=attributes):
        return tracer.carrier()


@contextmanager
def drive_span(deps: Deps, run: RunRecord) -> Iterator[Span]:
    """The ``invoke_agent`` span of one stretch a worker drives `run` (claim to park or
    end), in the run's trace, linked to the span that made it go on (a decision's
    request, or the chat click the worker applied) when there is one."""
    tracer = deps.tracer
    parent = run_trace(run)
    current = _decided_from(deps) if parent is not None else None
    attributes: dict[str, AttributeValue | None] = {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": run.agent,
        "signoff.run.id": run.run_id,
        "signoff.thread.id": run.thread_id,
        "signoff.worker": deps.worker_id,
        "signoff.run.fence": run.fence,
    }
    with tracer.span(
        f"invoke_agent {run.agent}",
        attributes=attributes,
        parent=parent,
        links=[current] if current is not None and current != parent else (),
    ) as span:
        try:
            yield span
        finally:
            span.set("signoff.run.status", run.status.value)
            span.set("signoff.run.turns", run.turns)


@contextmanager
def turn_span(deps: Deps, run: RunRecord) -> Iterator[Span]:
    """The ``agent_turn`` span: one model call and what its answer leads to (the calls
    it proposes, the policy's and rules' verdicts, the tickets opened)."""
    with deps.tracer.span(
        f"agent_turn {run.agent}",
        attributes={"signoff.run.id": run.run_id, "signoff.turn": run.turns + 1},
    ) as span:
        yield span


def _provider(name: str) -> tuple[str, str]:
    """``(gen_ai.system, gen_ai.request.model)`` of a model named ``provider:model``."""
    system, colon, model = name.partition(":")
    return (system, model) if colon and model else (name, name)


class TracedModel:
    """A model whose calls are ``chat <model>`` client spans with the GenAI attributes."""

    def __init__(self, model: Model, deps: Deps, run: RunRecord) -> None:
        self._model = model
        self._deps = deps
        self._run = run
        self.name = model.name

    async def complete(self, request: ModelRequest) -> ModelResponse:
        """Answer one turn inside the span."""
        system, model = _provider(self.name)
        attributes: dict[str, AttributeValue | None] = {
            "gen_ai.operation.name": "chat",
            "gen_ai.system": system,
            "gen_ai.provider.name": system,
            "gen_ai.request.model": model,
            "signoff.run.id": self._run.run_id,
            "signoff.model.attempt": request.attempt,
        }
        with self._deps.tracer.span(f"chat {model}", kind="client", attributes=attributes) as span:
            response = await self._model.complete(request)
            usage = response.usage
            span.set("gen_ai.usage.input_tokens", usage.prompt_tokens)
            span.set("gen_ai.usage.output_tokens", usage.completion_tokens)
            span.set("gen_ai.usage.cache_read.input_tokens", usage.cached_tokens or None)
            span.set("signoff.usage.cost", usage.cost)
            span.set("signoff.stop_reason", response.stop_reason.value)
            span.set("signoff.tool_calls", len(response.tool_calls))
            return response


def traced_model(model: Model, deps: Deps, run: RunRecord) -> Model:
    """`model`, its calls traced when tracing is on."""
    return model if deps.tracer is NO_TRACER else TracedModel(model, deps, run)


async def invoke_tool(deps: Deps, tool: Tool, call: CallRecord) -> Any:
    """Run `tool` for `call` inside its ``execute_tool`` span (when tracing is on).

    The span's ``signoff.tool.outcome`` says how the tool ended: ``completed``,
    ``input_requested``, ``failed`` or ``unknown`` (its outcome is unknown: replayed or
    made uncertain by its replay policy).
    """
    tracer = deps.tracer
    if tracer is NO_TRACER:
        return await tool.invoke(call.args)
    attributes: dict[str, AttributeValue | None] = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": call.tool,
        "gen_ai.tool.call.id": call.model_call_id,
        "signoff.call.id": call.call_id,
        "signoff.run.id": call.run_id,
        "signoff.replay_policy": str(call.replay_policy),
        "signoff.attempt": call.attempts,
        "signoff.execution_key": call.execution_key,
    }
    with tracer.span(f"execute_tool {call.tool}", attributes=attributes) as span:
        try:
            outcome = await tool.invoke(call.args)
        except ToolOutcomeUnknown as exc:
            span.set("signoff.tool.outcome", "unknown")
            span.fail(str(exc) or type(exc).__name__)
            raise
        except Exception as exc:
            span.set("signoff.tool.outcome", "failed")
            span.fail(f"{type(exc).__name__}: {exc}")
            raise
        done = "input_requested" if isinstance(outcome, InputRequest) else "completed"
        span.set("signoff.tool.outcome", done)
        return outcome


def record_wait(
    deps: Deps,
    run: RunRecord,
    ticket: ResumeTicket,
    outcome: str,
    command: ResumeCommand | None = None,
    action: str | None = None,
) -> None:
    """Report a ticket's wait as the ``await_decision`` span, once it ended: from the
    ticket's opening to its decision (or expiry), in the run's trace, linked to the span
    the decision came from, if any: the console's or the API's request, or the span a
    chat click arrived in (stored with the click, which the worker applies later).

    Args:
        deps: The shared dependencies.
        run: The ticket's run.
        ticket: The ticket, as opened.
        outcome: ``decided`` or ``expired``.
        command: The decision (when decided): who, from where, and how.
        action: What an expiry did (``deny``, ``cancel`` or ``escalate``).
    """
    tracer = deps.tracer
    if tracer is NO_TRACER:
        return
    target = ticket.target
    tool = getattr(target, "tool", None)
    attributes: dict[str, AttributeValue | None] = {
        "signoff.run.id": run.run_id,
        "signoff.ticket.id": ticket.ticket_id,
        "signoff.ticket.kind": target.kind,
        "gen_ai.tool.name": tool,
        "signoff.wait.outcome": outcome,
        "signoff.expiry.action": action,
    }
    end = deps.clock.now()
    if command is not None:
        answer = command.answer
        attributes |= {
            "signoff.decision": answer.kind,
            "signoff.decided_by": command.actor.id,
            "signoff.edge": command.actor.platform,
            "signoff.decision.edited": isinstance(answer, Allow) and answer.args is not None,
            "signoff.decision.grant": isinstance(answer, Allow) and answer.grant is not None,
        }
        end = command.at
    current = _decided_from(deps)
    tracer.finished(
        f"await_decision {tool or target.kind}",
        start=ticket.created_at,
        end=end,
        parent=run_trace(run),
        attributes=attributes,
        links=[current] if current is not None else (),
    )
