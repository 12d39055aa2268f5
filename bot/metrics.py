"""The process's Prometheus metrics (``GET /metrics``): what an on-call team alerts on.

Three kinds of series, documented one by one in ``docs/metrics.md``:

- this replica's own: counters and histograms fed by the runtime's checkpoint points
  (`Metrics.observe`: decisions, deliveries, model and tool calls, expiries, recovered
  runs), the time each edge takes to acknowledge a click (`ack_timing`, the Discord
  gateway's handlers and Slack's Socket Mode listener), the worker's slots, the process
  and Python runtime collectors;
- database-wide gauges (runs by status, open and overdue tickets, the outbox, received
  clicks, uncertain calls, queued work), read by *one* replica: the holder of the named
  lease `FIGURES_LEASE`, every ``SIGNOFF_METRICS_INTERVAL_SECONDS`` (`figures_loop`). The
  other replicas do not export them, so a ``sum()`` over replicas counts each once;
- ``signoff_database_up`` and ``signoff_storage_errors_total``: whether this replica
  reached the database at its last attempt, and how often it failed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import platform
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from aiohttp import web
from aiohttp.typedefs import Middleware
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.gc_collector import GCCollector
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import Collector

from runtime import RunStatus, Runtime, StorageError
from runtime.store.ports.leases import Figures

log = logging.getLogger("signoff.metrics")

FIGURES_LEASE = "metrics"
"""The named lease whose holder reads and exports the database-wide gauges."""

EDGES = frozenset({"slack", "discord", "console", "api", "cli", "approvals", "webhook"})
"""Where a decision can come from; any other value is counted as ``other``."""

_LATENCY_BUCKETS = (1, 5, 15, 60, 300, 900, 3600, 4 * 3600, 24 * 3600, float("inf"))
_ACK_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 3, 5, 10, float("inf"))
_CALL_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, float("inf"))


def signoff_version() -> str:
    """The installed signoff's version (``unknown`` when run from a bare checkout)."""
    try:
        return version("signoff")
    except PackageNotFoundError:
        return "unknown"


@dataclass(frozen=True, slots=True)
class _Snapshot:
    runs: dict[str, int]
    figures: Figures
    read_at: float


class _FiguresCollector(Collector):
    """Yields the database-wide gauges while this replica holds `FIGURES_LEASE`."""

    def __init__(self) -> None:
        self.snapshot: _Snapshot | None = None

    def collect(self) -> Iterator[Metric]:
        shot = self.snapshot
        if shot is None:
            return
        f = shot.figures
        runs = GaugeMetricFamily("signoff_runs", "Runs by status.", labels=["status"])
        for status in RunStatus:
            runs.add_metric([status.value], shot.runs.get(status.value, 0))
        yield runs
        single: Iterable[tuple[str, str, float]] = (
            ("signoff_open_tickets", "Tickets waiting for a decision.", f.open_tickets),
            (
                "signoff_overdue_tickets",
                "Open tickets whose deadline passed and that are not expired yet.",
                f.overdue_tickets,
            ),
            ("signoff_outbox_backlog", "Notifications not yet delivered.", f.outbox_pending),
            ("signoff_outbox_failed", "Notifications given up on.", f.outbox_failed),
            (
                "signoff_received_backlog",
                "Decisions received from chat, stored and not applied yet.",
                f.received_pending,
            ),
            (
                "signoff_uncertain_calls_waiting",
                "Tool calls whose outcome is unknown, waiting for a person to resolve them.",
                f.uncertain_calls,
            ),
            (
                "signoff_runs_lease_expired",
                "Running runs whose worker's lease expired (a worker died or stalled).",
                f.runs_lease_expired,
            ),
            (
                "signoff_queued_work",
                "Work waiting for a worker: runs ready to drive (queued, or their lease "
                "expired), received decisions not applied and notifications not delivered.",
                f.runs_queued + f.runs_lease_expired + f.received_pending + f.outbox_pending,
            ),
            (
                "signoff_figures_read_timestamp_seconds",
                "When these database-wide figures were read (Unix time).",
                shot.read_at,
            ),
        )
        for name, documentation, value in single:
            yield GaugeMetricFamily(name, documentation, value=value)


class Metrics:
    """The process's Prometheus metrics, on a registry of its own.

    Args:
        known_tools: Tool names counted under their own label; any other is ``other``
            (keeps the series bounded whatever a model asks for).
    """

    def __init__(self, known_tools: Iterable[str] = ()) -> None:
        self.registry = CollectorRegistry()
        self.known_tools = set(known_tools)
        r = self.registry
        # On this registry, not prometheus_client's global one.
        ProcessCollector(registry=r)
        PlatformCollector(registry=r)
        GCCollector(registry=r)
        self.build_info = Gauge(
            "signoff_build_info",
            "Always 1; the labels say which signoff and Python this process runs.",
            ["version", "python"],
            registry=r,
        )
        self.build_info.labels(version=signoff_version(), python=platform.python_version()).set(1)
        self.ack_seconds = Histogram(
            "signoff_click_ack_seconds",
            "Time from a click or decision reaching an edge to its acknowledgement.",
            ["edge"],
            buckets=_ACK_BUCKETS,
            registry=r,
        )
        self.decision_latency = Histogram(
            "signoff_decision_latency_seconds",
            "Time from a ticket opening to its decision.",
            ["edge", "ticket_kind"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.decisions = Counter(
            "signoff_decisions", "Decisions applied.", ["decision", "edge"], registry=r
        )
        self.notifications = Counter(
            "signoff_notifications",
            "Delivery attempts of notifications by platform and outcome (delivered, "
            "retried, rate_limited, failed: given up).",
            ["platform", "outcome"],
            registry=r,
        )
        self.model_seconds = Histogram(
            "signoff_model_call_seconds",
            "Time a model call took, answered or failed.",
            ["model"],
            buckets=_CALL_BUCKETS,
            registry=r,
        )
        self.model_tokens = Counter(
            "signoff_model_tokens",
            "Tokens of answered model calls.",
            ["model", "kind"],
            registry=r,
        )
        self.model_failures = Counter(
            "signoff_model_failures",
            "Model calls that failed, by the failure's kind.",
            ["model", "kind"],
            registry=r,
        )
        self.tool_seconds = Histogram(
            "signoff_tool_call_seconds",
            "Time a tool call took, by outcome (ok, failed, uncertain).",
            ["tool", "outcome"],
            buckets=_CALL_BUCKETS,
            registry=r,
        )
        self.tool_failures = Counter(
            "signoff_tool_failures", "Tool calls that raised.", ["tool"], registry=r
        )
        self.uncertain = Counter(
            "signoff_uncertain_calls",
            "Tool calls recorded uncertain (outcome unknown, left for a person).",
            ["tool"],
            registry=r,
        )
        self.expiries = Counter(
            "signoff_ticket_expiries",
            "Tickets whose deadline passed, by what was done (deny, cancel, escalate).",
            ["action"],
            registry=r,
        )
        self.runs_driven = Counter(
            "signoff_runs_driven",
            "Runs this replica's workers drove to their next stop, by the status left in.",
            ["status"],
            registry=r,
        )
        self.runs_recovered = Counter(
            "signoff_runs_recovered",
            "Runs taken over after their worker's lease expired with tool calls running.",
            registry=r,
        )
        self.slots_in_use = Gauge(
            "signoff_worker_slots_in_use", "Runs this replica is driving now.", registry=r
        )
        self.slots = Gauge(
            "signoff_worker_slots",
            "Runs this replica drives at once at most (0: it drives none).",
            registry=r,
        )
        self.database_up = Gauge(
            "signoff_database_up",
            "1 when this replica's last use of the database succeeded, 0 when it failed.",
            registry=r,
        )
        self.database_up.set(1)
        self.storage_errors = Counter(
            "signoff_storage_errors",
            "Times this replica could not use the database (requests, the figures loop, "
            "readiness checks).",
            registry=r,
        )
        self.figures_holder = Gauge(
            "signoff_figures_holder",
            "1 on the replica that exports the database-wide gauges, 0 on the others.",
            registry=r,
        )
        self._figures = _FiguresCollector()
        r.register(self._figures)
        self.figures_turned = asyncio.Event()
        """Set after each turn of `figures_loop` (tests wait on it)."""
        self.figures_wake = asyncio.Event()
        """Set it to make `figures_loop` take its next turn now."""

    # -- the runtime's points ------------------------------------------------------------
    def observe(self, point: str, info: dict[str, Any]) -> None:
        """A runtime checkpoint observer feeding the counters."""
        if point == "decision_committed":
            edge = self._edge(info.get("edge"))
            latency = info.get("latency_seconds")
            if isinstance(latency, int | float):
                self.decision_latency.labels(
                    edge=edge, ticket_kind=str(info.get("ticket_kind", "unknown"))
                ).observe(max(float(latency), 0.0))
            self.decisions.labels(decision=str(info.get("decision", "unknown")), edge=edge).inc()
        elif point == "tool_returned":
            self.tool_seconds.labels(
                tool=self._tool(info), outcome=str(info.get("outcome", "ok"))
            ).observe(_seconds(info))
        elif point == "tool_failed":
            self.tool_failures.labels(tool=self._tool(info)).inc()
        elif point == "call_uncertain":
            self.uncertain.labels(tool=self._tool(info)).inc()
        elif point == "model_answered":
            model = str(info.get("model", "unknown"))
            self.model_seconds.labels(model=model).observe(_seconds(info))
            for kind in ("prompt", "completion"):
                tokens = info.get(f"{kind}_tokens")
                if isinstance(tokens, int) and tokens > 0:
                    self.model_tokens.labels(model=model, kind=kind).inc(tokens)
        elif point == "model_failed":
            model = str(info.get("model", "unknown"))
            self.model_seconds.labels(model=model).observe(_seconds(info))
            self.model_failures.labels(model=model, kind=str(info.get("kind", "error"))).inc()
        elif point == "notification_delivered":
            self.notifications.labels(platform=_platform(info), outcome="delivered").inc()
        elif point == "notification_failed":
            outcome = str(info.get("outcome", "failed"))
            self.notifications.labels(platform=_platform(info), outcome=outcome).inc()
        elif point == "ticket_expired":
            self.expiries.labels(action=str(info.get("action", "deny"))).inc()
        elif point == "run_driven":
            self.runs_driven.labels(status=str(info.get("status", "unknown"))).inc()
        elif point == "run_recovered":
            self.runs_recovered.inc()

    def acknowledged(self, edge: str, seconds: float) -> None:
        """An edge acknowledged a click or decision `seconds` after receiving it."""
        self.ack_seconds.labels(edge=edge).observe(max(seconds, 0.0))

    def storage_failed(self) -> None:
        """This replica could not use the database."""
        self.storage_errors.inc()
        self.database_up.set(0)

    def storage_worked(self) -> None:
        """This replica used the database."""
        self.database_up.set(1)

    def watch_worker(self, active: Callable[[], int], capacity: int) -> None:
        """Report the worker's slots: `active` runs now, out of `capacity`."""
        self.slots_in_use.set_function(lambda: float(active()))
        self.slots.set(capacity)

    def _tool(self, info: dict[str, Any]) -> str:
        tool = str(info.get("tool", ""))
        return tool if tool in self.known_tools else "other"

    @staticmethod
    def _edge(value: object) -> str:
        edge = str(value) if value is not None else "unknown"
        return edge if edge in EDGES else "other"

    # -- the database-wide figures -------------------------------------------------------
    async def read_figures(self, runtime: Runtime) -> None:
        """Read the database-wide figures now and export them (the lease holder does)."""
        async with runtime.store.transaction() as tx:
            runs = await tx.count_runs()
            figures = await tx.figures(runtime.clock.now())
        self.export_figures(runs, figures)

    def export_figures(self, runs: dict[str, int], figures: Figures) -> None:
        """Export `figures` (and the runs by status) as read now."""
        self._figures.snapshot = _Snapshot(runs, figures, time.time())
        self.figures_holder.set(1)

    def drop_figures(self) -> None:
        """Stop exporting the database-wide figures (another replica holds the lease)."""
        self._figures.snapshot = None
        self.figures_holder.set(0)


def _seconds(info: dict[str, Any]) -> float:
    seconds = info.get("seconds")
    return max(float(seconds), 0.0) if isinstance(seconds, int | float) else 0.0


def _platform(info: dict[str, Any]) -> str:
    return str(info.get("platform") or "console")


async def figures_loop(
    metrics: Metrics, runtime: Runtime, stop: asyncio.Event, *, seconds: float
) -> None:
    """Until `stop` is set: every `seconds`, take or renew `FIGURES_LEASE` and, holding
    it, read the database-wide figures; give the lease up at the end.

    The lease lasts three intervals, so when its holder dies another replica exports
    the figures within about that time. Each turn also tells whether this replica could
    reach the database (``signoff_database_up``).
    """
    owner = runtime.worker_id
    try:
        while not stop.is_set():
            try:
                await _figures_turn(metrics, runtime, owner, seconds)
            except Exception:
                log.exception("metrics: reading the figures failed; retrying")
            metrics.figures_turned.set()
            await _wait(stop, metrics.figures_wake, seconds)
    finally:
        metrics.drop_figures()
        with contextlib.suppress(Exception):
            async with runtime.store.transaction() as tx:
                await tx.drop_lease(FIGURES_LEASE, owner=owner)


async def _wait(stop: asyncio.Event, wake: asyncio.Event, seconds: float) -> None:
    """Until `stop` or `wake` is set, or `seconds` passed; clears `wake`."""
    waiters = {asyncio.ensure_future(stop.wait()), asyncio.ensure_future(wake.wait())}
    _done, pending = await asyncio.wait(
        waiters, timeout=seconds, return_when=asyncio.FIRST_COMPLETED
    )
    for waiter in pending:
        waiter.cancel()
    wake.clear()


async def _figures_turn(metrics: Metrics, runtime: Runtime, owner: str, seconds: float) -> None:
    now = runtime.clock.now()
    try:
        # One transaction: on SQLite each one takes the write lock.
        async with runtime.store.transaction() as tx:
            fence = await tx.take_lease(
                FIGURES_LEASE, owner=owner, now=now, until=now + timedelta(seconds=3 * seconds)
            )
            held = None if fence is None else (await tx.count_runs(), await tx.figures(now))
        if held is None:
            metrics.drop_figures()
        else:
            metrics.export_figures(*held)
    except StorageError as exc:
        # Stale figures would hide the outage: the alert on signoff_database_up fires.
        log.warning("metrics: the database failed: %s", exc)
        metrics.drop_figures()
        metrics.storage_failed()
        return
    metrics.storage_worked()


ACK_ROUTES: dict[tuple[str, str], str] = {
    ("POST", "/tickets/{ticket_id}/decide"): "console",
    ("POST", "/tickets/batch"): "console",
    ("POST", "/api/tickets/{ticket_id}/decision"): "api",
    ("POST", "/api/decisions"): "api",
    ("POST", "/api/approvals"): "approvals",
    ("POST", "/slack/events"): "slack",
}
"""The routes whose answer acknowledges a click or a decision, and their edge label."""


def ack_timing(metrics: Metrics, routes: dict[tuple[str, str], str] | None = None) -> Middleware:
    """An aiohttp middleware timing the routes of `routes` (default `ACK_ROUTES`) into
    ``signoff_click_ack_seconds``: from the request reaching the handler to its answer,
    whatever the answer (a refusal acknowledges the click too)."""
    timed = dict(ACK_ROUTES if routes is None else routes)

    @web.middleware
    async def middleware(
        request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        resource = request.match_info.route.resource
        edge = timed.get((request.method, resource.canonical)) if resource is not None else None
        if edge is None:
            return await handler(request)
        started = time.perf_counter()
        try:
            return await handler(request)
        finally:
            metrics.acknowledged(edge, time.perf_counter() - started)

    return middleware


__all__ = [
    "ACK_ROUTES",
    "EDGES",
    "FIGURES_LEASE",
    "Metrics",
    "ack_timing",
    "figures_loop",
    "signoff_version",
]
