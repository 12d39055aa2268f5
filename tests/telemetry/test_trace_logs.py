"""Log lines written inside a span carry its trace and span ids, in both formats; outside
a span, or with tracing off, they carry none."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator

import pytest
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from adapters.telemetry.otel import Telemetry, start_telemetry
from bot.logs import JsonFormatter, TextFormatter, set_trace_ids


@pytest.fixture
def telemetry() -> Iterator[Telemetry]:
    started = start_telemetry(
        {}, processors=[SimpleSpanProcessor(InMemorySpanExporter())], set_global=False
    )
    set_trace_ids(started.ids)
    try:
        yield started
    finally:
        set_trace_ids(None)
        started.shutdown()


def _record() -> logging.LogRecord:
    return logging.makeLogRecord(
        {"name": "signoff.worker", "levelname": "INFO", "levelno": 20, "msg": "drove run_1"}
    )


def test_a_line_inside_a_span_names_it(telemetry: Telemetry) -> None:
    with telemetry.tracer.span("invoke_agent support"):
        carrier = telemetry.tracer.carrier()
        entry = json.loads(JsonFormatter().format(_record()))
        text = TextFormatter().format(_record())
    assert carrier is not None
    _, trace_id, span_id, _ = carrier["traceparent"].split("-")
    assert (entry["trace_id"], entry["span_id"]) == (trace_id, span_id)
    assert f"trace_id={trace_id} span_id={span_id}" in text


def test_a_line_outside_any_span_names_none(telemetry: Telemetry) -> None:
    entry = json.loads(JsonFormatter().format(_record()))
    assert "trace_id" not in entry and "span_id" not in entry
    assert "trace_id" not in TextFormatter().format(_record())


def test_tracing_off_adds_nothing() -> None:
    started = start_telemetry(
        {}, processors=[SimpleSpanProcessor(InMemorySpanExporter())], set_global=False
    )
    with started.tracer.span("invoke_agent support"):
        entry = json.loads(JsonFormatter().format(_record()))
    started.shutdown()
    assert "trace_id" not in entry
