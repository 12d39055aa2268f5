"""bot.metrics without a server: the acknowledgement middleware's routes and labels, the
checkpoint points each family counts, and the figures loop when the database fails."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from metrics_kit import served, total, value
from prometheus_client import generate_latest

from adapters.slack.app import EVENTS_PATH
from bot.metrics import ACK_ROUTES, FIGURES_LEASE, Metrics, ack_timing, figures_loop
from runtime import Agent, ManualClock, Runtime, ScriptedModel, StorageError, final_reply
from runtime.store.memory import MemoryStore


def exposition(metrics: Metrics) -> str:
    return generate_latest(metrics.registry).decode()


async def test_the_middleware_times_each_acknowledging_route_under_its_edge() -> None:
    metrics = Metrics()
    app = web.Application(middlewares=[ack_timing(metrics)])

    async def ok(request: web.Request) -> web.Response:
        return web.json_response({"ok": True})

    async def refused(request: web.Request) -> web.Response:
        return web.json_response({"error": "forbidden"}, status=403)

    async def crashes(request: web.Request) -> web.Response:
        raise web.HTTPBadRequest()

    app.router.add_post("/tickets/{ticket_id}/decide", ok)
    app.router.add_post("/tickets/batch", ok)
    app.router.add_post("/api/tickets/{ticket_id}/decision", refused)
    app.router.add_post("/api/decisions", crashes)
    app.router.add_post("/api/approvals", ok)
    app.router.add_post(EVENTS_PATH, ok)
    app.router.add_get("/api/tickets/{ticket_id}/decision", ok)  # not a click
    app.router.add_post("/api/runs", ok)  # not a decision
    async with TestClient(TestServer(app)) as client:
        for path in (
            "/tickets/t1/decide",
            "/tickets/batch",
            "/api/tickets/t1/decision",
            "/api/decisions",
            "/api/approvals",
            EVENTS_PATH,
            "/api/runs",
            "/nowhere",
        ):
            await (await client.post(path)).release()
        await (await client.get("/api/tickets/t1/decision")).release()
    text = exposition(metrics)
    assert value(text, "signoff_click_ack_seconds_count", edge="console") == 2
    # A refusal and a failure acknowledge the click too.
    assert value(text, "signoff_click_ack_seconds_count", edge="api") == 2
    assert value(text, "signoff_click_ack_seconds_count", edge="approvals") == 1
    assert value(text, "signoff_click_ack_seconds_count", edge="slack") == 1
    assert total(text, "signoff_click_ack_seconds_count") == 6


async def test_every_timed_route_is_served(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SIGNOFF_TEST_LEDGER", str(tmp_path / "ledger.jsonl"))
    async with served(tmp_path / "signoff.db") as service:
        routes = {
            (route.method, route.resource.canonical)
            for route in service.app.router.routes()
            if route.resource is not None
        }
    assert set(ACK_ROUTES) - {("POST", EVENTS_PATH)} <= routes
    assert EVENTS_PATH == "/slack/events"


def test_points_feed_their_families_with_bounded_labels() -> None:
    metrics = Metrics(known_tools={"transfer"})
    observe = metrics.observe
    observe("tool_returned", {"tool": "transfer", "outcome": "ok", "seconds": 0.2})
    observe("tool_returned", {"tool": "made_up_by_a_model", "outcome": "failed", "seconds": 1})
    observe("tool_failed", {"tool": "made_up_by_a_model"})
    observe("call_uncertain", {"tool": "transfer"})
    observe(
        "decision_committed",
        {
            "decision": "deny",
            "latency_seconds": 30,
            "edge": "slack",
            "ticket_kind": "tool_permission",
        },
    )
    observe(
        "decision_committed",
        {"decision": "allow", "latency_seconds": -1, "edge": "telnet", "ticket_kind": "pause"},
    )
    observe("notification_failed", {"platform": "discord", "outcome": "rate_limited"})
    observe("notification_delivered", {"platform": "discord"})
    observe(
        "model_answered", {"model": "m", "seconds": 2, "prompt_tokens": 10, "completion_tokens": 0}
    )
    observe("model_failed", {"model": "m", "kind": "timeout", "seconds": 30})
    observe("ticket_expired", {"action": "escalate"})
    observe("run_driven", {"status": "awaiting"})
    observe("run_recovered", {"calls": 2})
    observe("dispatch_committed", {"tool": "transfer"})  # counted nowhere
    text = exposition(metrics)
    assert value(text, "signoff_tool_call_seconds_count", tool="transfer", outcome="ok") == 1
    assert value(text, "signoff_tool_call_seconds_count", tool="other", outcome="failed") == 1
    assert value(text, "signoff_tool_failures_total", tool="other") == 1
    assert "made_up_by_a_model" not in text
    assert value(text, "signoff_uncertain_calls_total", tool="transfer") == 1
    assert value(text, "signoff_decisions_total", decision="deny", edge="slack") == 1
    assert value(text, "signoff_decisions_total", decision="allow", edge="other") == 1
    assert (
        value(
            text,
            "signoff_decision_latency_seconds_sum",
            edge="slack",
            ticket_kind="tool_permission",
        )
        == 30
    )
    assert (
        value(text, "signoff_decision_latency_seconds_sum", edge="other", ticket_kind="pause") == 0
    )
    assert (
        value(text, "signoff_notifications_total", platform="discord", outcome="rate_limited") == 1
    )
    assert value(text, "signoff_notifications_total", platform="discord", outcome="delivered") == 1
    assert value(text, "signoff_model_tokens_total", model="m", kind="prompt") == 10
    assert value(text, "signoff_model_tokens_total", model="m", kind="completion") is None
    assert value(text, "signoff_model_failures_total", model="m", kind="timeout") == 1
    assert value(text, "signoff_model_call_seconds_count", model="m") == 2
    assert value(text, "signoff_ticket_expiries_total", action="escalate") == 1
    assert value(text, "signoff_runs_driven_total", status="awaiting") == 1
    assert value(text, "signoff_runs_recovered_total") == 1


class _Failing(MemoryStore):
    """A memory store whose transactions fail while `down` is set."""

    down = False

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[Any]:  # type: ignore[override]
        if self.down:
            raise StorageError("the database is gone")
        async with super().transaction() as tx:
            yield tx


async def test_the_figures_loop_reports_a_database_it_cannot_reach() -> None:
    store = _Failing()
    agent = Agent("a", "Say hi.", ScriptedModel([final_reply("hi")]))
    runtime = Runtime(store, [agent], clock=ManualClock(), worker_id="w1")
    metrics = Metrics()
    stop = asyncio.Event()
    loop = asyncio.create_task(figures_loop(metrics, runtime, stop, seconds=60))
    try:
        await asyncio.wait_for(metrics.figures_turned.wait(), timeout=10)
        up = exposition(metrics)
        assert value(up, "signoff_figures_holder") == 1 and value(up, "signoff_queued_work") == 0
        store.down = True
        metrics.figures_turned.clear()
        metrics.figures_wake.set()
        await asyncio.wait_for(metrics.figures_turned.wait(), timeout=10)
        down = exposition(metrics)
        assert value(down, "signoff_database_up") == 0
        assert value(down, "signoff_storage_errors_total") == 1
        # No stale figures while the database is unreachable.
        assert value(down, "signoff_figures_holder") == 0
        assert value(down, "signoff_queued_work") is None
        store.down = False
        metrics.figures_turned.clear()
        metrics.figures_wake.set()
        await asyncio.wait_for(metrics.figures_turned.wait(), timeout=10)
        assert value(exposition(metrics), "signoff_database_up") == 1
    finally:
        stop.set()
        await asyncio.wait_for(loop, timeout=10)
    # The loop gave the lease up as it ended: another owner takes it at once.
    async with store.transaction() as tx:
        now = runtime.clock.now()
        assert await tx.take_lease(FIGURES_LEASE, owner="w2", now=now, until=now) is not None
    await runtime.aclose()
