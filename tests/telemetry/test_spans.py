"""The runtime's spans, on the OpenTelemetry SDK, to an in-memory exporter.

One run that parks behind a ticket and is decided and resumed by a second runtime (a
second process: its own tracer provider, the same store) is one trace: the decision's
runtime reads the trace context the run was started with.
"""

from __future__ import annotations

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from adapters.telemetry.otel import OtelTracer, start_telemetry
from runtime import (
    Actor,
    Agent,
    ManualClock,
    MemoryStore,
    RunStatus,
    Runtime,
    ScriptedModel,
    SequentialIds,
    final_reply,
    tool_call_reply,
)


class Exported:
    """A tracer provider of one "process", exporting to memory."""

    def __init__(self) -> None:
        self.exporter = InMemorySpanExporter()
        telemetry = start_telemetry(
            {}, processors=[SimpleSpanProcessor(self.exporter)], set_global=False
        )
        self.provider = telemetry.provider
        self.tracer: OtelTracer = telemetry.tracer

    def spans(self) -> list[ReadableSpan]:
        return list(self.exporter.get_finished_spans())

    def named(self, prefix: str) -> list[ReadableSpan]:
        return [s for s in self.spans() if s.name.startswith(prefix)]


def _agent(ran: list[str], *, fail: bool = False, deadline: float | None = None) -> Agent:
    reply = tool_call_reply(
        ("refund", {"order": "A1", "amount": 250}), prompt_tokens=120, completion_tokens=30
    )
    agent = Agent("support", "Be helpful.", ScriptedModel([reply, final_reply("Done.")]))

    @agent.tool(permission="ask", replay_policy="idempotent", deadline=deadline)
    async def refund(order: str, amount: float) -> str:
        if fail:
            raise RuntimeError("the payment service said no")
        ran.append(order)
        return f"refunded {amount}"

    return agent


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


async def test_a_run_parked_and_resumed_elsewhere_is_one_trace(clock: ManualClock) -> None:
    store = MemoryStore()
    ids = SequentialIds()
    ran: list[str] = []
    first, second = Exported(), Exported()
    starting = Runtime(store, [_agent(ran)], clock=clock, ids=ids, tracer=first.tracer)
    parked = await starting.start("support", "refund A1", requester="U1")
    assert parked.status is RunStatus.AWAITING
    opened = clock.now()
    clock.advance(3600)  # an hour later, on another process
    deciding = Runtime(store, [_agent(ran)], clock=clock, ids=ids, tracer=second.tracer)
    with second.tracer.span("POST /api/tickets/{ticket_id}/decide", kind="server"):
        request = second.tracer.carrier()
        done = await deciding.approve(
            parked.pending[0], actor=Actor(id="U1", platform="slack"), resume=True
        )
    assert done.status is RunStatus.DONE and ran == ["A1"]

    spans = first.spans() + second.spans()
    run_trace = {s.context.trace_id for s in spans if not s.name.startswith("POST")}
    assert len(run_trace) == 1, [(s.name, s.context.trace_id) for s in spans]
    (start,) = first.named("start_run support")
    assert start.attributes is not None
    assert start.attributes["signoff.run.id"] == parked.run_id
    # Each stretch a worker drove the run hangs under the run's start.
    drives = first.named("invoke_agent support") + second.named("invoke_agent support")
    assert [d.parent.span_id for d in drives if d.parent] == [start.context.span_id] * 2
    assert [d.attributes["signoff.run.status"] for d in drives if d.attributes] == [
        "awaiting",
        "done",
    ]

    (chat, last_chat) = first.named("chat") + second.named("chat")
    assert chat.kind is SpanKind.CLIENT
    assert chat.attributes is not None
    assert chat.attributes["gen_ai.operation.name"] == "chat"
    assert chat.attributes["gen_ai.request.model"] == "scripted"
    assert chat.attributes["gen_ai.usage.input_tokens"] == 120
    assert chat.attributes["gen_ai.usage.output_tokens"] == 30
    assert chat.attributes["signoff.stop_reason"] == "tool_calls"
    (turn,) = [t for t in first.named("agent_turn") if t.context.span_id == chat.parent.span_id]  # type: ignore[union-attr]
    assert turn.parent is not None and turn.parent.span_id == drives[0].context.span_id

    (tool,) = second.named("execute_tool refund")
    assert tool.attributes is not None
    assert tool.attributes["gen_ai.tool.name"] == "refund"
    assert tool.attributes["signoff.replay_policy"] == "idempotent"
    assert tool.attributes["signoff.tool.outcome"] == "completed"
    assert tool.parent is not None and tool.parent.span_id == drives[1].context.span_id

    # The wait: from the ticket's opening to the decision, in the run's trace, linked
    # to the request the decision came in.
    (wait,) = second.named("await_decision refund")
    assert wait.attributes is not None
    assert wait.parent is not None and wait.parent.span_id == start.context.span_id
    assert wait.start_time == int(opened.timestamp() * 1e9)
    assert wait.end_time is not None and wait.end_time - wait.start_time == 3600 * 10**9
    assert wait.attributes["signoff.decision"] == "allow"
    assert wait.attributes["signoff.decided_by"] == "U1"
    assert wait.attributes["signoff.edge"] == "slack"
    assert wait.attributes["signoff.ticket.kind"] == "tool_permission"
    assert request is not None
    assert [f"{link.context.span_id:016x}" for link in wait.links] == [
        request["traceparent"].split("-")[2]
    ]
    # The resumed stretch is linked to that request too.
    assert [link.context.trace_id for link in drives[1].links] == [
        int(request["traceparent"].split("-")[1], 16)
    ]
    assert last_chat.attributes is not None
    assert last_chat.attributes["signoff.stop_reason"] == "end"


async def test_a_failing_tool_and_a_denial(clock: ManualClock) -> None:
    exported = Exported()
    runtime = Runtime(MemoryStore(), [_agent([], fail=True)], clock=clock, tracer=exported.tracer)
    parked = await runtime.start("support", "refund A1", requester="U1")
    await runtime.approve(parked.pending[0], actor="U1", resume=True)
    (tool,) = exported.named("execute_tool refund")
    assert tool.attributes is not None and tool.attributes["signoff.tool.outcome"] == "failed"
    assert tool.status.status_code is StatusCode.ERROR
    assert "the payment service said no" in (tool.status.description or "")

    again = await runtime.start("support", "refund A1", requester="U1")
    await runtime.decline(again.pending[0], actor="U1", reason="not today", resume=True)
    waits = exported.named("await_decision")
    assert [w.attributes["signoff.decision"] for w in waits if w.attributes] == ["allow", "deny"]
    # A denied call never runs: still one tool span.
    assert len(exported.named("execute_tool")) == 1


async def test_an_expired_ticket_ends_its_wait(clock: ManualClock) -> None:
    exported = Exported()
    runtime = Runtime(MemoryStore(), [_agent([], deadline=60)], clock=clock, tracer=exported.tracer)
    parked = await runtime.start("support", "refund A1", requester="U1")
    clock.advance(61)
    assert await runtime.expire_overdue() == [parked.pending[0].ticket.ticket_id]
    (wait,) = exported.named("await_decision")
    assert wait.attributes is not None
    assert wait.attributes["signoff.wait.outcome"] == "expired"
    assert wait.attributes["signoff.expiry.action"] == "deny"
    assert wait.end_time is not None and wait.end_time - wait.start_time == 61 * 10**9


async def test_tracing_off_records_nothing_and_keeps_no_context(clock: ManualClock) -> None:
    store = MemoryStore()
    runtime = Runtime(store, [_agent([])], clock=clock)
    parked = await runtime.start("support", "refund A1", requester="U1")
    async with store.transaction() as tx:
        run = await tx.get_run(parked.run_id)
    assert run is not None and run.trace_context is None
