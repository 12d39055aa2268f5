"""Slack and Discord deliveries are client spans in the trace of the run they belong to;
a failed delivery marks its span failed; other platforms' notifiers are left as they are."""

from __future__ import annotations

from typing import Any

import pytest
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from adapters.telemetry.otel import TracedNotifier, start_telemetry
from runtime.edges import Carrier, Delivery, DeliveryError, Notification, RunFinished

RUN_TRACE = "0af7651916cd43dd8448eb211c80319c"
RUN_SPAN = "b7ad6b7169203331"


class Recording:
    """A platform notifier that records what it was handed (or refuses it)."""

    def __init__(self, refuse: bool = False) -> None:
        self.delivered: list[tuple[Notification, Delivery]] = []
        self.refuse = refuse

    async def deliver(self, note: Notification, delivery: Delivery) -> dict[str, Any] | None:
        if self.refuse:
            raise DeliveryError("channel_not_found", permanent=True)
        self.delivered.append((note, delivery))
        return {"channel": "C1", "ts": "1.2"}


async def trace_of(run_id: str) -> Carrier | None:
    return {"traceparent": f"00-{RUN_TRACE}-{RUN_SPAN}-01"} if run_id == "run_1" else None


NOTE = RunFinished(run_id="run_1", agent="refunds", status="done", text="Refunded.")
DELIVERY = Delivery(outbox_id="ob_1", destination={"platform": "slack", "channel": "C1"})


async def test_a_delivery_is_a_client_span_in_its_runs_trace() -> None:
    exporter = InMemorySpanExporter()
    telemetry = start_telemetry({}, processors=[SimpleSpanProcessor(exporter)], set_global=False)
    inner = Recording()
    routes = telemetry.notifiers({"slack": inner, "console": "as is"}, trace_of)
    assert routes["console"] == "as is"
    traced = routes["slack"]
    assert isinstance(traced, TracedNotifier)
    assert await traced.deliver(NOTE, DELIVERY) == {"channel": "C1", "ts": "1.2"}
    assert inner.delivered == [(NOTE, DELIVERY)]
    (span,) = exporter.get_finished_spans()
    assert span.name == "deliver slack" and span.kind is SpanKind.CLIENT
    assert f"{span.context.trace_id:032x}" == RUN_TRACE
    assert span.parent is not None and f"{span.parent.span_id:016x}" == RUN_SPAN
    assert span.attributes is not None
    assert span.attributes["signoff.notification"] == "run_finished"
    assert span.attributes["signoff.outbox.id"] == "ob_1"
    telemetry.shutdown()


async def test_a_failed_delivery_marks_its_span_and_still_fails() -> None:
    exporter = InMemorySpanExporter()
    telemetry = start_telemetry({}, processors=[SimpleSpanProcessor(exporter)], set_global=False)
    traced = telemetry.notifiers({"discord": Recording(refuse=True)}, trace_of)["discord"]
    with pytest.raises(DeliveryError, match="channel_not_found"):
        await traced.deliver(NOTE, DELIVERY)
    (span,) = exporter.get_finished_spans()
    assert span.name == "deliver discord"
    assert span.status.status_code is StatusCode.ERROR
    telemetry.shutdown()
