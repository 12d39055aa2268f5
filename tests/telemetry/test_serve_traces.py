"""Traces of real `signoff serve` processes, exported over OTLP/HTTP to a collector on
loopback that decodes each ``ExportTraceServiceRequest`` with opentelemetry-proto.

A run started by a webhook that carries a ``traceparent`` parks on one process, which
is stopped with SIGTERM; a second process on the same database takes the decision and
runs the tool to the end. Every span of the run, on both processes, is in the trace the
webhook's caller started. With the ``OTEL_*`` variables unset (or the SDK disabled)
nothing is exported and no OpenTelemetry module is imported; set without the SDK, the
start stops with a clear error.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib import request as urlrequest
from urllib.error import HTTPError

import pytest
from aiohttp import web
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from adapters.webhook.signing import sign

ROOT = Path(__file__).resolve().parents[2]
SECRET = "hook-secret-for-tests"
TOKEN = "api-token-for-tests"
CALLER_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER_SPAN = "00f067aa0ba902b7"


@dataclass
class Exported:
    """One span as the collector received it."""

    name: str
    trace_id: str
    span_id: str
    parent: str
    kind: int
    service: str
    attributes: dict[str, Any]
    links: list[tuple[str, str]]


def _value(any_value: Any) -> Any:
    return (
        getattr(any_value, any_value.WhichOneof("value")) if any_value.WhichOneof("value") else None
    )


@dataclass
class Collector:
    """An OTLP/HTTP trace receiver: records every span it is sent."""

    spans: list[Exported] = field(default_factory=list)
    requests: int = 0
    arrived: asyncio.Event = field(default_factory=asyncio.Event)

    async def receive(self, request: web.Request) -> web.Response:
        assert request.content_type == "application/x-protobuf"
        message = ExportTraceServiceRequest()
        message.ParseFromString(await request.read())
        self.requests += 1
        for resource_spans in message.resource_spans:
            resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
            for scope in resource_spans.scope_spans:
                for span in scope.spans:
                    self.spans.append(
                        Exported(
                            name=span.name,
                            trace_id=span.trace_id.hex(),
                            span_id=span.span_id.hex(),
                            parent=span.parent_span_id.hex(),
                            kind=span.kind,
                            service=str(resource.get("service.name")),
                            attributes={a.key: _value(a.value) for a in span.attributes},
                            links=[
                                (link.trace_id.hex(), link.span_id.hex()) for link in span.links
                            ],
                        )
                    )
        self.arrived.set()
        body = ExportTraceServiceResponse().SerializeToString()
        return web.Response(body=body, content_type="application/x-protobuf")

    async def until(self, *names: str) -> None:
        """Wait until a span of each name has arrived (at most 30 seconds)."""
        async with asyncio.timeout(30):
            while not set(names) <= {s.name for s in self.spans}:
                self.arrived.clear()
                await self.arrived.wait()

    def named(self, name: str) -> list[Exported]:
        return [s for s in self.spans if s.name == name]


@pytest.fixture
async def collector() -> AsyncIterator[tuple[Collector, str]]:
    found = Collector()
    app = web.Application()
    app.router.add_post("/v1/traces", found.receive)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield found, f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


def _env(tmp_path: Path) -> dict[str, str]:
    base = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("SIGNOFF_", "OTEL_")) and "PROXY" not in k.upper()
    }
    base.update(
        {
            "PYTHONPATH": str(ROOT),
            "SIGNOFF_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path / 'serve.db'}",
            "SIGNOFF_APP": "tests.e2e.serve_app:agents",
            "SIGNOFF_PORT": "0",
            "SIGNOFF_LEASE_SECONDS": "1",
            "SIGNOFF_API_TOKENS": json.dumps([{"token": TOKEN, "actor": "U-ops"}]),
            "SIGNOFF_HOOKS": json.dumps(
                {
                    "payments": {
                        "secret": SECRET,
                        "agent": "payments",
                        "input_template": "Pay {body[account]}",
                        "requester": "U-ops",
                    }
                }
            ),
            "SIGNOFF_TEST_LEDGER": str(tmp_path / "ledger.jsonl"),
        }
    )
    return base


class Server:
    """One `signoff serve` subprocess and a small blocking HTTP client for it."""

    def __init__(self, env: dict[str, str]) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "bot", "serve"],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
        )
        assert self.process.stdout is not None
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            line = self.process.stdout.readline()
            if not line:
                break
            if line.startswith("signoff serving at "):
                self.url = line.split("signoff serving at ", 1)[1].strip()
                return
        self.process.kill()
        _out, err = self.process.communicate(timeout=10)
        raise AssertionError(f"server did not start: {err[-3000:]}")

    def call(
        self,
        method: str,
        path: str,
        raw: bytes | None = None,
        headers: dict[str, str] | None = None,
    ) -> tuple[int, Any]:
        req = urlrequest.Request(self.url + path, data=raw, method=method)
        req.add_header("Authorization", f"Bearer {TOKEN}")
        req.add_header("Content-Type", "application/json")
        for key, value in (headers or {}).items():
            req.add_header(key, value)
        opener = urlrequest.build_opener(urlrequest.ProxyHandler({}))
        try:
            with opener.open(req, timeout=10) as answer:
                return answer.status, json.loads(answer.read() or b"null")
        except HTTPError as exc:
            return exc.code, json.loads(exc.read() or b"null")

    def wait_for(self, run_id: str, status: str, timeout: float = 30) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        last: Any = None
        while time.monotonic() < deadline:
            code, last = self.call("GET", f"/api/runs/{run_id}")
            if code == 200 and last["status"] == status:
                return dict(last)
            time.sleep(0.05)  # polling the API; the run moves in another process
        raise AssertionError(f"run {run_id} never reached {status}: {last}")

    def terminate(self) -> str:
        self.process.send_signal(signal.SIGTERM)
        _out, err = self.process.communicate(timeout=60)
        assert self.process.returncode == 0, err[-3000:]
        return err


def _start_by_hook(server: Server) -> str:
    body = json.dumps({"account": "ACC-1"}).encode()
    stamp = str(int(time.time()))
    status, answer = server.call(
        "POST",
        "/hooks/payments",
        raw=body,
        headers={
            "X-Signoff-Timestamp": stamp,
            "X-Signoff-Signature": sign(SECRET, stamp, body),
            "Idempotency-Key": "payment-1",
            "traceparent": f"00-{CALLER_TRACE}-{CALLER_SPAN}-01",
        },
    )
    assert status == 202, answer
    return str(answer["run_id"])


async def test_a_run_across_a_restart_is_one_trace(
    collector: tuple[Collector, str], tmp_path: Path
) -> None:
    received, endpoint = collector
    env = _env(tmp_path) | {
        "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint,
        "OTEL_BSP_SCHEDULE_DELAY": "50",
    }
    first = await asyncio.to_thread(Server, env)
    run_id = await asyncio.to_thread(_start_by_hook, first)
    parked = await asyncio.to_thread(first.wait_for, run_id, "awaiting")
    ticket_id = parked["pending"][0]["ticket_id"]
    # A graceful stop sends what is buffered.
    await asyncio.to_thread(first.terminate)
    await received.until("start_run payments", "invoke_agent payments", "chat scripted")

    second = await asyncio.to_thread(Server, env)
    try:
        status, answer = await asyncio.to_thread(
            second.call,
            "POST",
            f"/api/tickets/{ticket_id}/decision",
            json.dumps({"decision": "allow"}).encode(),
        )
        assert status == 200, answer
        await asyncio.to_thread(second.wait_for, run_id, "done")
    finally:
        await asyncio.to_thread(second.terminate)
    await received.until("execute_tool transfer", "await_decision transfer")

    run_spans = [s for s in received.spans if s.attributes.get("signoff.run.id") == run_id]
    names = {s.name for s in run_spans}
    assert {
        "start_run payments",
        "invoke_agent payments",
        "agent_turn payments",
        "chat scripted",
        "execute_tool transfer",
        "await_decision transfer",
    } <= names
    # One trace: the one the webhook's caller started, on both processes.
    assert {s.trace_id for s in run_spans} == {CALLER_TRACE}
    assert {s.service for s in received.spans} == {"signoff"}
    (hook,) = [s for s in received.spans if s.name == "POST /hooks/{name}"]
    assert (hook.trace_id, hook.parent, hook.kind) == (CALLER_TRACE, CALLER_SPAN, 2)
    assert hook.attributes["http.response.status_code"] == 202
    (start,) = received.named("start_run payments")
    assert start.parent == hook.span_id
    drives = received.named("invoke_agent payments")
    assert len(drives) == 2 and {d.parent for d in drives} == {start.span_id}
    assert len({d.attributes["signoff.worker"] for d in drives}) == 2  # two processes
    assert sorted(d.attributes["signoff.run.status"] for d in drives) == ["awaiting", "done"]
    (tool,) = received.named("execute_tool transfer")
    assert tool.attributes["signoff.tool.outcome"] == "completed"
    assert tool.attributes["signoff.replay_policy"] == "manual"
    (wait,) = received.named("await_decision transfer")
    assert wait.parent == start.span_id
    assert (wait.attributes["signoff.decision"], wait.attributes["signoff.decided_by"]) == (
        "allow",
        "U-ops",
    )
    assert wait.attributes["signoff.edge"] == "api"
    # The decision's own request is a trace of its own, linked from the wait.
    (decide,) = [s for s in received.spans if s.name.startswith("POST /api/tickets/")]
    assert decide.trace_id != CALLER_TRACE
    assert wait.links == [(decide.trace_id, decide.span_id)]


def _modules_after_serving(env: dict[str, str]) -> list[str]:
    code = """
import asyncio, json, sys
from urllib import request
from bot.serve import build_service
from bot.settings import load_settings

async def main():
    service = await build_service(load_settings())
    url = await service.start()
    try:
        opener = request.build_opener(request.ProxyHandler({}))
        await asyncio.to_thread(lambda: opener.open(url + "/readyz", timeout=30).read())
    finally:
        await service.stop()

asyncio.run(main())
traced = ("opentelemetry", "adapters.telemetry.otel")
print(json.dumps(sorted(m for m in sys.modules if m.startswith(traced))))
"""
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=90,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    found: list[str] = json.loads(done.stdout.strip().splitlines()[-1])
    return found


@pytest.mark.parametrize(
    "otel", [{}, {"OTEL_SDK_DISABLED": "true"}, {"OTEL_TRACES_EXPORTER": "none"}]
)
async def test_tracing_off_exports_nothing_and_imports_nothing(
    collector: tuple[Collector, str], tmp_path: Path, otel: dict[str, str]
) -> None:
    received, endpoint = collector
    env = _env(tmp_path) | otel
    if otel:
        env["OTEL_EXPORTER_OTLP_ENDPOINT"] = endpoint
    assert await asyncio.to_thread(_modules_after_serving, env) == []
    assert received.requests == 0


async def test_tracing_asked_for_without_the_sdk_stops_the_start(tmp_path: Path) -> None:
    env = _env(tmp_path) | {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9"}
    # As if the otel extra were not installed: importing the SDK fails.
    code = (
        "import sys; sys.modules['opentelemetry.sdk'] = None; "
        "sys.argv = ['signoff', 'serve']; from bot.__main__ import main; main()"
    )
    done = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-c", code],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=90,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    assert done.returncode == 3  # a configuration error
    assert "OTEL_EXPORTER_OTLP_ENDPOINT asks for OpenTelemetry traces" in done.stderr
    assert "pip install -e '.[otel]'" in done.stderr
    assert "Traceback" not in done.stderr


async def test_mcp_tool_calls_are_client_spans_inside_their_tool_span(
    collector: tuple[Collector, str], tmp_path: Path
) -> None:
    received, endpoint = collector
    env = _env(tmp_path) | {
        "SIGNOFF_APP": "examples:demo_agents",
        "SIGNOFF_AGENTS": "examples/mcp/agents.toml",
        "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint,
        "OTEL_BSP_SCHEDULE_DELAY": "50",
    }
    del env["SIGNOFF_HOOKS"]
    server = await asyncio.to_thread(Server, env)
    try:
        body = json.dumps({"agent": "infra", "input": "Deploy search 2.0 to staging"}).encode()
        status, started = await asyncio.to_thread(server.call, "POST", "/api/runs", body)
        assert status == 202, started
        done = await asyncio.to_thread(server.wait_for, started["run_id"], "done")
        assert done["text"] == "Done: deployed search 2.0 to staging."
    finally:
        await asyncio.to_thread(server.terminate)
    await received.until("execute_tool deploy", "MCP send tools/call deploy")
    (tool,) = received.named("execute_tool deploy")
    (sent,) = received.named("MCP send tools/call deploy")
    assert (sent.trace_id, sent.parent, sent.kind) == (tool.trace_id, tool.span_id, 3)
    assert sent.attributes["mcp.method.name"] == "tools/call"


async def test_a_decision_from_the_command_line_continues_the_trace(
    collector: tuple[Collector, str], tmp_path: Path
) -> None:
    received, endpoint = collector
    env = _env(tmp_path) | {
        "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint,
        "OTEL_BSP_SCHEDULE_DELAY": "50",
    }
    server = await asyncio.to_thread(Server, env)
    try:
        run_id = await asyncio.to_thread(_start_by_hook, server)
        parked = await asyncio.to_thread(server.wait_for, run_id, "awaiting")
    finally:
        await asyncio.to_thread(server.terminate)
    ticket_id = parked["pending"][0]["ticket_id"]
    # `signoff approve` decides and drives the run to its end in its own process.
    done = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "bot", "approve", ticket_id, "--as", "U-ops"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=90,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    await received.until("execute_tool transfer", "await_decision transfer")
    (wait,) = received.named("await_decision transfer")
    (start,) = received.named("start_run payments")
    (tool,) = received.named("execute_tool transfer")
    assert wait.trace_id == tool.trace_id == start.trace_id == CALLER_TRACE
    assert wait.attributes["signoff.edge"] == "cli"
    assert wait.links == []  # no span around a command's decision
    drives = received.named("invoke_agent payments")
    assert sorted(d.attributes["signoff.run.status"] for d in drives) == ["awaiting", "done"]
