"""A stored chat click keeps the context of the span it arrived in, in the SQL store, and
the process applying it later links the wait to that span; a click that reached no span
is a ``click <platform>`` server span of its own; a refused click's notice goes where
the edge asked, without the stored context."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from adapters.telemetry.otel import OtelTracer, start_telemetry
from runtime import (
    Accepted,
    Actor,
    Agent,
    Allow,
    BatchAccepted,
    Deny,
    ManualClock,
    RunStatus,
    Runtime,
    ScriptedModel,
    SequentialIds,
    final_reply,
    tool_call_reply,
)
from runtime.store.sql import SQLStore

REPLY = {"response_url": "http://127.0.0.1/r"}


def _agent() -> Agent:
    agent = Agent(
        "support",
        "Be helpful.",
        ScriptedModel([tool_call_reply(("refund", {"order": "A1"})), final_reply("Done.")]),
    )

    @agent.tool(permission="ask")
    async def refund(order: str) -> str:
        return f"refunded {order}"

    return agent


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SQLStore]:
    opened = SQLStore.sqlite(tmp_path / "signoff.db")
    await opened.migrate()
    try:
        yield opened
    finally:
        await opened.close()


def _tracing() -> tuple[OtelTracer, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    telemetry = start_telemetry({}, processors=[SimpleSpanProcessor(exporter)], set_global=False)
    return telemetry.tracer, exporter


def _named(exporter: InMemorySpanExporter, name: str) -> list[ReadableSpan]:
    return [s for s in exporter.get_finished_spans() if s.name == name]


async def test_a_click_stored_in_a_request_links_the_wait_applied_elsewhere(
    store: SQLStore,
) -> None:
    clock, ids = ManualClock(), SequentialIds()
    edge_tracer, edge_spans = _tracing()
    edge = Runtime(store, [_agent()], clock=clock, ids=ids, tracer=edge_tracer)
    parked = await edge.start("support", "refund A1", requester="U1")
    ticket = parked.pending[0].ticket
    with edge_tracer.span("POST /slack/events", kind="server"):
        stored = await edge.accept(
            ticket.ticket_id,
            Allow(),
            Actor(id="U1", platform="slack"),
            correlation=ticket.correlation,
            source="slack",
            delivery_id="click-1",
            reply=REPLY,
        )
    assert stored == Accepted(ticket, stored=True)
    (request,) = _named(edge_spans, "POST /slack/events")
    assert _named(edge_spans, "click slack") == []  # the request is the click's span

    # Another process, its own tracer, applies it outside any span.
    worker_tracer, worker_spans = _tracing()
    worker = Runtime(store, [_agent()], clock=clock, ids=ids, tracer=worker_tracer)
    [outcome] = await worker.apply_received()
    assert outcome.applied
    (wait,) = _named(worker_spans, "await_decision refund")
    assert [link.context.span_id for link in wait.links] == [request.context.span_id]
    assert [link.context.trace_id for link in wait.links] == [request.context.trace_id]
    assert (await worker.get(ticket.run_id)).status is RunStatus.QUEUED


async def test_a_click_outside_any_span_is_its_own_server_span(store: SQLStore) -> None:
    tracer, spans = _tracing()
    runtime = Runtime(store, [_agent()], clock=ManualClock(), tracer=tracer)
    parked = await runtime.start("support", "refund A1", requester="U1")
    ticket = parked.pending[0].ticket
    stored = await runtime.accept(
        ticket.ticket_id,
        Allow(),
        Actor(id="U1", platform="discord"),
        correlation=ticket.correlation,
        source="discord",
        delivery_id="interaction-1",
        reply={"channel_id": "C1"},
    )
    assert stored == Accepted(ticket, stored=True)
    (click,) = _named(spans, "click discord")
    assert click.kind is SpanKind.SERVER and click.parent is None
    assert click.attributes is not None
    assert click.attributes["signoff.ticket.id"] == ticket.ticket_id
    assert click.attributes["signoff.click.stored"] is True
    [outcome] = await runtime.apply_received()
    assert outcome.applied
    (wait,) = _named(spans, "await_decision refund")
    assert [link.context.span_id for link in wait.links] == [click.context.span_id]


async def test_a_refused_click_is_told_where_the_edge_asked(store: SQLStore) -> None:
    tracer, spans = _tracing()
    clock = ManualClock()
    runtime = Runtime(store, [_agent()], clock=clock, tracer=tracer)
    parked = await runtime.start("support", "refund A1", requester="U1")
    ticket = parked.pending[0].ticket
    for n, answer in enumerate([Allow(), Deny(reason="no")]):
        clock.advance(1)  # the allow arrives first, and wins
        with tracer.span("POST /slack/events", kind="server"):
            await runtime.accept(
                ticket.ticket_id,
                answer,
                Actor(id="U1", platform="slack"),
                correlation=ticket.correlation,
                source="slack",
                delivery_id=f"click-{n}",
                reply={"response_url": f"http://127.0.0.1/r{n}"},
            )
    outcomes = await runtime.apply_received()
    assert [o.applied for o in outcomes] == [True, False]
    async with runtime.store.transaction() as tx:
        [refused] = [
            o for o in await tx.outbox_for_run(ticket.run_id) if o.kind == "decision_refused"
        ]
    assert refused.destination == {"response_url": "http://127.0.0.1/r1", "platform": "slack"}
    assert len(_named(spans, "await_decision refund")) == 1


async def test_an_allow_all_click_is_one_span_its_waits_link_to(store: SQLStore) -> None:
    tracer, spans = _tracing()
    agent = Agent(
        "ops",
        "Operate.",
        ScriptedModel(
            [
                tool_call_reply(("restart", {"service": "api"}), ("restart", {"service": "db"})),
                final_reply("Done."),
            ]
        ),
    )

    @agent.tool(permission="ask")
    async def restart(service: str) -> str:
        return f"restarted {service}"

    runtime = Runtime(store, [agent], clock=ManualClock(), tracer=tracer)
    parked = await runtime.start("ops", "fix it", requester="U1", origin={"ch": "C1"})
    async with store.transaction() as tx:
        [offer] = [o for o in await tx.outbox_for_run(parked.run_id) if o.kind == "batch_offered"]
    accepted = await runtime.accept_batch(
        offer.ticket_id,
        offer.payload["token"],
        Allow(),
        Actor(id="U1", platform="discord"),
        source="discord",
        delivery_id="interaction-1",
        reply={"channel_id": "C1"},
    )
    assert isinstance(accepted, BatchAccepted) and accepted.stored == 2
    (click,) = _named(spans, "click discord")
    assert click.attributes is not None and click.attributes["signoff.click.stored"] is True
    assert [o.applied for o in await runtime.apply_received()] == [True, True]
    waits = _named(spans, "await_decision restart")
    assert [[link.context.span_id for link in w.links] for w in waits] == [
        [click.context.span_id]
    ] * 2
