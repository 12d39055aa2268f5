"""Health, readiness and Prometheus metrics routes."""

from __future__ import annotations

from typing import Any

from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from runtime import RunStatus, Runtime
from runtime.store.sql import SQLStore


class Metrics:
    """The process's Prometheus metrics. Figures from the database are read per scrape."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.runs = Gauge("signoff_runs", "Runs by status.", ["status"], registry=self.registry)
        self.open_tickets = Gauge(
            "signoff_open_tickets", "Tickets waiting for a decision.", registry=self.registry
        )
        self.outbox_backlog = Gauge(
            "signoff_outbox_backlog",
            "Notifications not yet delivered.",
            registry=self.registry,
        )
        self.outbox_failed = Gauge(
            "signoff_outbox_failed",
            "Notifications given up on.",
            registry=self.registry,
        )
        self.decision_latency = Histogram(
            "signoff_decision_latency_seconds",
            "Time from a ticket opening to its decision.",
            buckets=(1, 5, 15, 60, 300, 900, 3600, 4 * 3600, 24 * 3600, float("inf")),
            registry=self.registry,
        )
        self.decisions = Counter(
            "signoff_decisions", "Decisions applied.", ["decision"], registry=self.registry
        )
        self.tool_failures = Counter(
            "signoff_tool_failures", "Tool calls that raised.", ["tool"], registry=self.registry
        )

    def observe(self, point: str, info: dict[str, Any]) -> None:
        """A runtime checkpoint observer feeding the counters."""
        if point == "decision_committed":
            latency = info.get("latency_seconds")
            if isinstance(latency, int | float):
                self.decision_latency.observe(max(float(latency), 0.0))
            self.decisions.labels(decision=str(info.get("decision", "unknown"))).inc()
        elif point == "tool_failed":
            self.tool_failures.labels(tool=str(info.get("tool", "unknown"))).inc()

    async def refresh(self, runtime: Runtime) -> None:
        """Read the database figures."""
        async with runtime.store.transaction() as tx:
            counts = await tx.count_runs()
            stats = await tx.stats()
        for status in RunStatus:
            self.runs.labels(status=status.value).set(counts.get(status.value, 0))
        self.open_tickets.set(stats.get("open_tickets", 0))
        self.outbox_backlog.set(stats.get("outbox_pending", 0))
        self.outbox_failed.set(stats.get("outbox_failed", 0))


def add_health_routes(app: web.Application, runtime: Runtime, metrics: Metrics) -> None:
    """``/healthz`` (alive), ``/readyz`` (database reachable, schema usable), ``/metrics``.

    ``/readyz`` is ready when the database answers and its schema is this version's
    newest, or newer and backward-compatible (a rolling upgrade in progress); its JSON
    says which revision it sees (``schema.revision``) next to this version's
    (``schema.code_revision``).
    """

    async def healthz(request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def readyz(request: web.Request) -> web.Response:
        problems = []
        schema: dict[str, Any] | None = None
        try:
            async with runtime.store.transaction() as tx:
                await tx.count_runs()
        except Exception as exc:
            problems.append(f"database unreachable: {exc}")
        else:
            store = runtime.store
            if isinstance(store, SQLStore):
                try:
                    status = await store.schema_status()
                except Exception as exc:
                    problems.append(f"database schema unreadable: {exc}")
                else:
                    schema = {
                        "revision": status.revision,
                        "code_revision": status.head,
                        "state": status.state,
                    }
                    if not status.usable:
                        problems.append(status.describe())
        body: dict[str, Any] = {"status": "unavailable" if problems else "ready"}
        if problems:
            body["problems"] = problems
        if schema is not None:
            body["schema"] = schema
        return web.json_response(body, status=503 if problems else 200)

    async def metrics_route(request: web.Request) -> web.Response:
        await metrics.refresh(runtime)
        body = generate_latest(metrics.registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics_route)
