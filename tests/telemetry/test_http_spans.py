"""Every HTTP request is a server span: the route's template (never the path), the status,
a failure on a 5xx, and the caller's trace continued when it sends a ``traceparent``."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from adapters.telemetry.otel import start_telemetry

CALLER = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


async def show(request: web.Request) -> web.Response:
    return web.json_response({"code": request.match_info["code"]})


async def broken(request: web.Request) -> web.Response:
    raise web.HTTPServiceUnavailable(reason="storage unavailable")


Client = TestClient[web.Request, web.Application]


@pytest.fixture
async def traced() -> AsyncIterator[tuple[Client, InMemorySpanExporter]]:
    exporter = InMemorySpanExporter()
    telemetry = start_telemetry({}, processors=[SimpleSpanProcessor(exporter)], set_global=False)
    app = web.Application(middlewares=[telemetry.middleware()])
    app.router.add_get("/link/{code}", show)
    app.router.add_post("/broken", broken)
    client = TestClient(TestServer(app, host="127.0.0.1", port=0))
    await client.start_server()
    try:
        yield client, exporter
    finally:
        await client.close()
        telemetry.shutdown()


async def test_a_request_is_a_server_span_named_by_its_route(
    traced: tuple[Client, InMemorySpanExporter],
) -> None:
    client, exporter = traced
    response = await client.get("/link/SECRET-CODE", headers={"traceparent": CALLER})
    assert response.status == 200
    (span,) = exporter.get_finished_spans()
    assert span.name == "GET /link/{code}" and span.kind is SpanKind.SERVER
    assert span.attributes is not None
    assert span.attributes["http.route"] == "/link/{code}"
    assert span.attributes["http.response.status_code"] == 200
    assert "SECRET-CODE" not in repr(dict(span.attributes))
    assert f"{span.context.trace_id:032x}" == CALLER.split("-")[1]
    assert span.parent is not None and f"{span.parent.span_id:016x}" == CALLER.split("-")[2]


async def test_a_5xx_fails_its_span_and_an_unknown_path_does_not(
    traced: tuple[Client, InMemorySpanExporter],
) -> None:
    client, exporter = traced
    assert (await client.post("/broken")).status == 503
    assert (await client.get("/nowhere/at/all")).status == 404
    broken_span, missing = exporter.get_finished_spans()
    assert broken_span.name == "POST /broken"
    assert broken_span.status.status_code is StatusCode.ERROR
    assert missing.name == "GET"  # no route: the method only
    assert missing.attributes is not None
    assert missing.attributes["http.response.status_code"] == 404
    assert missing.status.status_code is not StatusCode.ERROR
    assert missing.parent is None  # no traceparent: a trace of its own
