"""Build the serving process of `signoff serve` from its settings (`build_service`).

The process holds nothing per parked run: workers claim ready runs from the database,
drive them until they park or end, and let go. A restart (or another replica) picks up
whatever is ready, and recovers runs whose worker died once their lease expires.

Any number of replicas may serve one PostgreSQL database (or share a SQLite file on one
machine): runs, received clicks and outbox items are claimed under leases, messages to
one chat channel are paced in the database, a ``NOTIFY`` from the replica that made
work ready wakes the others at once (polling stays the fallback), and one replica at a
time holds the Discord gateway.

A process may also take one role of the two (``SIGNOFF_ROLE``, ``signoff serve --role``):
``web`` serves the HTTP edges, which store starts and decisions and wake the workers
through the database, and drives nothing; ``worker`` drives runs and runs the background
loops, and serves only its health routes (`Parts.of_role`).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, assert_never

from aiohttp import web
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

from adapters.telemetry import start_from_env
from bot.console_secrets import ConsoleSecrets, console_secrets
from bot.health import add_health_routes
from bot.metrics import Metrics, ack_timing, figures_loop
from bot.settings import Settings, require_shared_settings, uses_sqlite
from runtime import Agent, Clock, ConfigurationError, IdSource, Model, Runtime
from runtime.edges import NO_TRACER
from runtime.services.delivery import Claim, Notifier, NullNotifier, RetryPolicy, RoutingNotifier
from runtime.store.base import Store
from runtime.store.sql import WAKE_OUTBOX, WAKE_RUNS, SQLStore
from runtime.worker import Pace, Worker, deadline_loop, outbox_loop

if TYPE_CHECKING:
    from slack_sdk.web.async_client import AsyncWebClient

    from adapters.slack import ChannelLimiter, SlackConfig
    from adapters.telemetry.otel import Telemetry
    from adapters.web import TokenAuth
    from bot.app import SlackEdge
    from bot.discord_wiring import DiscordEdge
    from bot.wiring import LoadedAgents
    from runtime.engine.deps import Checkpoint

PACING = {"slack": 1.0, "discord": 0.2}
"""Seconds between two messages to one chat channel, across every replica: Slack allows
about one per second per channel; Discord a burst of five per five seconds, and its
429s are retried."""


Role = Literal["all", "web", "worker"]
"""What a `signoff serve` process runs (``SIGNOFF_ROLE``): see `Parts.of_role`."""


@dataclass(frozen=True, slots=True)
class Parts:
    """Which parts of the process `Service.start` runs; `signoff serve` runs them all.

    Attributes:
        listen: Bind the HTTP server on ``SIGNOFF_BIND_HOST:SIGNOFF_PORT``. Off, the
            caller serves `Service.app` itself (an aiohttp test server).
        outbox: Deliver notifications (cards, messages, callbacks).
        deadlines: Expire tickets whose deadline passed.
        wake_ups: Listen for other replicas' commits (SQL stores).
        discord: Start the Discord edge when ``SIGNOFF_DISCORD_BOT_TOKEN`` is set.
        worker: Drive ready runs, apply received clicks, recover runs whose worker's
            lease expired, and take runs handed over by this process's own commits.
        web: Serve the HTTP edges (console, JSON API, approvals API, webhooks, Slack, the
            MCP gateway, Claude Code's routes) and connect Slack Socket Mode. Off,
            `Service.app` has only ``/healthz``, ``/readyz`` and ``/metrics``.
    """

    listen: bool = True
    outbox: bool = True
    deadlines: bool = True
    wake_ups: bool = True
    discord: bool = True
    worker: bool = True
    web: bool = True

    @classmethod
    def of_role(cls, role: Role) -> Parts:
        """The parts a role runs.

        ``all`` runs everything. ``web`` serves the HTTP edges and nothing else: what
        they store (starts, decisions, received clicks) is picked up by a worker, woken
        by the commit's ``NOTIFY`` on PostgreSQL (by polling on SQLite). ``worker``
        runs everything but the edges.
        """
        match role:
            case "all":
                return cls()
            case "web":
                return cls(
                    outbox=False, deadlines=False, wake_ups=False, discord=False, worker=False
                )
            case "worker":
                return cls(web=False)
            case _:
                assert_never(role)


def check_role(settings: Settings) -> str | None:
    """Refuse a role that cannot work with the settings; warn of one that may not.

    Returns:
        A warning for the operator, or None.

    Raises:
        ConfigurationError: ``web`` or ``worker`` on an in-memory database, which no
            other process can share.
    """
    role = settings.role
    if role == "all":
        return None
    if _in_memory(settings):
        other = "worker" if role == "web" else "web"
        raise ConfigurationError(
            f"SIGNOFF_ROLE={role}: an in-memory database is this process's alone, so no "
            f"{other} process can share it; use SIGNOFF_ROLE=all, or a database file "
            "(SQLite) or server (PostgreSQL) that both roles open"
        )
    if role == "web" and uses_sqlite(settings):
        return (
            "SIGNOFF_ROLE=web drives no runs and delivers no cards: nothing runs until a "
            "`signoff serve --role worker` opens the same SQLite file on this machine (it "
            "finds new work by polling, every SIGNOFF_POLL_SECONDS)"
        )
    return None


def _in_memory(settings: Settings) -> bool:
    """Whether the database is SQLite in this process's memory."""
    if not uses_sqlite(settings):
        return False
    try:
        name = make_url(settings.database_url).database or ""
    except ArgumentError:
        return False  # the store reports the bad URL
    return name in ("", ":memory:") or "mode=memory" in settings.database_url


@dataclass
class Service:
    """A `signoff serve` process: the web server, workers and loops (see `build_service`)."""

    settings: Settings
    runtime: Runtime
    store: Store
    metrics: Metrics
    worker: Worker
    app: web.Application
    notifiers: dict[str, Notifier] = field(default_factory=dict)
    slack: SlackEdge | None = None
    parts: Parts = field(default_factory=Parts)
    pacing: Mapping[str, float] = field(default_factory=lambda: dict(PACING))
    outbox_policy: RetryPolicy | None = None
    url: str = ""
    operator_token: str = ""
    console_secrets: ConsoleSecrets | None = None
    _stop: asyncio.Event = field(default_factory=asyncio.Event)
    _tasks: list[asyncio.Task[Any]] = field(default_factory=list)
    _runner: web.AppRunner | None = None
    discord: DiscordEdge | None = None
    loaded: LoadedAgents | None = None
    owns_store: bool = True
    role: Role = "all"
    _outbox_wake: asyncio.Event = field(default_factory=asyncio.Event)
    telemetry: Telemetry | None = None

    async def start(self) -> str:
        """Bind the HTTP server, start the loops; return the server's base URL.

        Returns:
            The base URL (empty when `Parts.listen` is off).

        Raises:
            ConfigurationError: The address cannot be bound, or Discord refused the bot.
        """
        if self.parts.listen:
            self.url = await self._listen()
        if self.parts.discord and self.settings.discord_bot_token is not None:
            # The edge is loaded only when on.
            from bot.discord_wiring import DiscordEdge

            edge = DiscordEdge(
                self.runtime, self.worker, self.settings, acked=self.metrics.acknowledged
            )
            await edge.start()
            self.discord = edge
        if self.parts.worker:
            self.metrics.watch_worker(lambda: self.worker.active, self.settings.workers)
            self._tasks.append(asyncio.create_task(self.worker.run(self._stop), name="worker"))
        if self.parts.outbox:
            claim = Claim(
                owner=self.runtime.worker_id,
                lease_seconds=self.settings.outbox_lease_seconds,
                pacing=self.pacing,
                checkpoint=self.metrics.observe,
            )
            outbox = outbox_loop(
                self.runtime,
                self._notifier(),
                self._stop,
                seconds=self.worker.pace,
                policy=self.outbox_policy,
                claim=claim,
                wake=self._outbox_wake,
            )
            self._tasks.append(asyncio.create_task(outbox, name="outbox"))
        if self.parts.deadlines:
            deadlines = deadline_loop(self.runtime, self._stop)
            self._tasks.append(asyncio.create_task(deadlines, name="deadlines"))
        if self.parts.wake_ups and isinstance(self.store, SQLStore):
            # Work this process acts on itself wakes no other replica: its outbox loop
            # delivers what its commits queue (runs go to whoever has a free slot).
            listen = self.store.listen(
                self._woken,
                self._stop,
                local=frozenset({WAKE_OUTBOX}) if self.parts.outbox else frozenset(),
                on_listening=self.worker.pace.heard,
            )
            self._tasks.append(asyncio.create_task(listen, name="wake-ups"))
        if self.discord is not None:
            hold = self.discord.hold(self._stop)
            self._tasks.append(asyncio.create_task(hold, name="discord-lease"))
        interval = self.settings.metrics_interval_seconds
        figures = figures_loop(self.metrics, self.runtime, self._stop, seconds=interval)
        self._tasks.append(asyncio.create_task(figures, name="metrics"))
        self.worker.wake()
        return self.url

    async def _listen(self) -> str:
        self._runner = web.AppRunner(
            self.app,
            handle_signals=False,
            access_log=None,
            # Also bounds how long a new connection may take to send its request head.
            keepalive_timeout=self.settings.http_idle_timeout_seconds,
        )
        await self._runner.setup()
        host, port = self.settings.bind_host, self.settings.port
        site = web.TCPSite(self._runner, host, port)
        try:
            await site.start()
        except OSError as exc:
            await self._runner.cleanup()
            where = f"{host}:{port}"
            if exc.errno == errno.EADDRINUSE:
                raise ConfigurationError(
                    f"SIGNOFF_PORT: {where} is already in use (set SIGNOFF_PORT to a free "
                    "port, or 0 for any)"
                ) from None
            raise ConfigurationError(
                f"SIGNOFF_BIND_HOST/SIGNOFF_PORT: cannot listen on {where}: {exc.strerror}"
            ) from None
        addresses = self._runner.addresses
        port = int(addresses[0][1]) if addresses else self.settings.port
        shown = "127.0.0.1" if host in ("0.0.0.0", "::") else host
        return f"http://{shown}:{port}"

    def stopped_loops(self) -> list[str]:
        """The background loops that ended while the process still serves (each one
        a reason `/readyz` is not ready: the work of this role is not being done)."""
        if self._stop.is_set():
            return []
        return [f"the {task.get_name()} loop stopped" for task in self._tasks if task.done()]

    def _woken(self, kinds: frozenset[str]) -> None:
        """Another replica (or this one) committed work: look at once."""
        if WAKE_RUNS in kinds:
            self.worker.wake()
        if WAKE_OUTBOX in kinds:
            self._outbox_wake.set()

    def _notifier(self) -> Notifier:
        routes: dict[str, Notifier] = {"console": NullNotifier()}
        routes.update(self.notifiers)
        if self.discord is not None:
            routes["discord"] = self.discord.notifier
        if self.telemetry is not None:
            routes = self.telemetry.notifiers(routes, self._trace_of)
        return RoutingNotifier(routes)

    async def _trace_of(self, run_id: str) -> dict[str, str] | None:
        """The trace context `run_id` was started with (its deliveries join that trace)."""
        async with self.store.transaction() as tx:
            run = await tx.get_run(run_id)
        return run.trace_context if run is not None else None

    async def stop(self, grace_seconds: float | None = None) -> None:
        """Stop taking work, let running tools settle, then close everything.

        Parked runs stay parked; runs cut off after the grace period are recovered by
        the next process according to their tools' replay policies.
        """
        grace = self.settings.shutdown_grace_seconds if grace_seconds is None else grace_seconds
        self._stop.set()
        if self._runner is not None:
            await self._runner.shutdown()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await asyncio.wait_for(task, timeout=2.0)
        if self.discord is not None:
            await self.discord.close()
        await self.worker.drain(grace)
        if self.loaded is not None:
            await self.loaded.close()  # after the drain: running tools may use MCP servers
        if self._runner is not None:
            await self._runner.cleanup()
        await self.runtime.aclose()
        if self.telemetry is not None:
            from bot.logs import set_trace_ids

            set_trace_ids(None)
            await asyncio.to_thread(self.telemetry.shutdown)  # sends what is buffered
        if self.owns_store:
            await self.store.close()


async def build_service(
    settings: Settings,
    *,
    agents: Sequence[Agent] | None = None,
    store: Store | None = None,
    clock: Clock | None = None,
    ids: IdSource | None = None,
    worker_id: str | None = None,
    model_resolver: Callable[[str], Model] | None = None,
    checkpoint: Checkpoint | None = None,
    auth: TokenAuth | None = None,
    slack_config: SlackConfig | None = None,
    slack_client: AsyncWebClient | None = None,
    slack_limiter: ChannelLimiter | None = None,
    notifiers: Mapping[str, Notifier] | None = None,
    outbox_policy: RetryPolicy | None = None,
    pacing: Mapping[str, float] = PACING,
    worker_type: type[Worker] = Worker,
    parts: Parts | None = None,
) -> Service:
    """Build every part of the serving process from settings (nothing runs yet).

    Every dependency has a default that `signoff serve` uses; tests pass fakes.

    Args:
        settings: The settings.
        agents: The agents to run (default: ``SIGNOFF_APP`` and ``SIGNOFF_AGENTS``, with
            their MCP servers connected now and closed by `Service.stop`).
        store: The store, as it is; the caller closes it after `Service.stop`
            (default: ``SIGNOFF_DATABASE_URL``'s, migrated, and closed by `Service.stop`).
        clock: The runtime's time source (default: the system clock).
        ids: The runtime's id source (default: random ids).
        worker_id: Names this process in leases (default: host and process id).
        model_resolver: Builds agents' models from their specs (default: from the
            ``SIGNOFF_*`` model settings).
        checkpoint: Also observes the runtime's named execution points (after the
            metrics do).
        auth: Who the API and console let in (default: the operator token and
            ``SIGNOFF_API_TOKENS``).
        slack_config: The Slack edge's configuration (default: from the
            ``SIGNOFF_SLACK_*`` settings when ``SIGNOFF_SLACK_MODE`` is not ``off``).
        slack_client: Slack's Web API client (default: one for the configuration).
        slack_limiter: Spacing of Slack messages to one channel (default: one a second).
        notifiers: Notifiers by platform name that take the place of the edges' own
            (default: the edges'); a Discord edge that starts still delivers Discord's.
        outbox_policy: Retries of failed deliveries (default: the outbox's).
        pacing: Seconds between two messages to one chat channel, by platform.
        worker_type: The class of the worker (a subclass observes it).
        parts: Which parts `Service.start` runs (default: those of ``SIGNOFF_ROLE``,
            see `Parts.of_role`).

    Raises:
        ConfigurationError: A setting is invalid, one every replica must share is
            missing (a database other than SQLite), or the role cannot work with the
            database (`check_role`).
    """
    from adapters.claude_code.resume import PLATFORM as RESUME_PLATFORM
    from adapters.claude_code.resume import ResumeConfig, ResumeNotifier, resume_agents
    from adapters.web.live import LiveText
    from bot.app import build_web
    from bot.mcp_gateway import Gateways, gateway_agents, mount_gateways
    from bot.wiring import build_runtime, load_agent_set

    require_shared_settings(settings)
    check_role(settings)
    parts = parts or Parts.of_role(settings.role)
    telemetry = start_from_env()  # None unless the OTEL_* variables turn tracing on
    if telemetry is not None:
        from bot.logs import set_trace_ids

        set_trace_ids(telemetry.ids)
    metrics = Metrics()
    observe: Checkpoint = metrics.observe
    if checkpoint is not None:
        also = checkpoint

        def observe(point: str, info: dict[str, Any]) -> None:
            metrics.observe(point, info)
            also(point, info)

    live = LiveText() if settings.stream_text and parts.web else None
    if live is not None:
        observe = live.observing(observe)
    owns_store = store is None
    loaded = None
    gateways: Gateways = []
    resumes: dict[str, ResumeConfig] = {}
    if agents is None:
        loaded = load_agent_set(settings)
        await loaded.start()  # MCP servers: connected and listed, or reported unavailable
        gateways = gateway_agents(loaded)
        resumes = loaded.file.resumes if loaded.file is not None else {}
        agents = [
            *loaded.agents,
            *(agent for agent, _ in gateways),
            *resume_agents(loaded.agents, resumes),
        ]
    try:
        runtime, store = await build_runtime(
            settings,
            agents,
            checkpoint=observe,
            store=store,
            clock=clock,
            ids=ids,
            worker_id=worker_id,
            resolver=model_resolver,
            tracer=telemetry.tracer if telemetry is not None else NO_TRACER,
        )
        if loaded is not None:
            loaded.attach(runtime)  # MCP elicitations: typed-input tickets of this runtime
        pace = Pace(settings.poll_seconds, settings.poll_seconds_listening)
        worker = worker_type(runtime, concurrency=settings.workers, pace=pace)
        if loaded is not None:
            loaded.use_store(store)  # the OAuth servers' sign-ins: the runtime's database
        kept = console_secrets(settings)
        built = build_web(
            settings,
            runtime,
            worker,
            kept.operator_token,
            cookie_secret=kept.cookie_secret,
            auth=auth,
            slack_config=slack_config,
            slack_client=slack_client,
            slack_limiter=slack_limiter,
            resumes=resumes,
            mcp_sign_ins=loaded.sign_ins if loaded is not None else None,
            live=live,
            acked=metrics.acknowledged,
        )
    except BaseException:
        if loaded is not None:
            await loaded.close()
        raise
    if parts.web:
        app = built.app
        if built.auth is not None:
            mount_gateways(
                app,
                runtime,
                built.auth,
                worker.wake_runs,
                gateways,
                question_seconds=settings.mcp_question_seconds,
            )
            if loaded is not None and loaded.mcp_servers:
                from adapters.web.mcp_routes import add_mcp_refresh_route

                add_mcp_refresh_route(app, built.auth, loaded.refresh_mcp, loaded.mcp_servers)
    else:
        # The edges' notifiers are delivered to; their routes (and Slack Socket Mode,
        # which connects when its application starts) are not served here.
        app = web.Application()
    service = Service(
        settings=settings,
        runtime=runtime,
        store=store,
        metrics=metrics,
        worker=worker,
        app=app,
        notifiers={
            **built.notifiers,
            RESUME_PLATFORM: ResumeNotifier(runtime, resumes, worker.wake_runs),
            **(notifiers or {}),
        },
        slack=built.slack,
        parts=parts,
        pacing=pacing,
        outbox_policy=outbox_policy,
        operator_token=kept.operator_token,
        console_secrets=kept,
        loaded=loaded,
        owns_store=owns_store,
        role=settings.role,
        telemetry=telemetry,
    )
    if telemetry is not None:
        app.middlewares.insert(0, telemetry.middleware())  # outermost: every request
    add_health_routes(app, runtime, metrics, role=settings.role, checks=service.stopped_loops)
    app.middlewares.append(ack_timing(metrics))
    metrics.known_tools.update(name for agent in runtime.agents.values() for name in agent.tools)
    return service


@asynccontextmanager
async def open_runtime(
    settings: Settings,
    *,
    agents: Sequence[Agent] | None = None,
    checkpoint: Checkpoint | None = None,
) -> AsyncIterator[Runtime]:
    """A runtime for one command (no worker, no server), closed after the block.

    Args:
        settings: The settings.
        agents: The agents (default: ``SIGNOFF_APP`` and ``SIGNOFF_AGENTS``, with their
            MCP servers connected for the block).
        checkpoint: Observer of the runtime's named execution points.

    Raises:
        ConfigurationError: The agents, models or database URL are invalid.
        StorageError: The database cannot be reached or migrated.
    """
    from adapters.claude_code.resume import resume_agents
    from bot.mcp_gateway import gateway_agents
    from bot.wiring import build_runtime, connected_agents

    async with contextlib.AsyncExitStack() as stack:
        # A decision or resume from the command line joins its run's trace too.
        telemetry = start_from_env()
        if telemetry is not None:
            stack.callback(telemetry.shutdown)  # last: after the runtime, sends the spans
        opened = None
        if agents is None:
            loaded = opened = await stack.enter_async_context(connected_agents(settings))
            resumes = loaded.file.resumes if loaded.file is not None else {}
            agents = [
                *loaded.agents,
                *(agent for agent, _ in gateway_agents(loaded)),
                *resume_agents(loaded.agents, resumes),
            ]
        tracer = telemetry.tracer if telemetry is not None else NO_TRACER
        runtime, store = await build_runtime(settings, agents, checkpoint=checkpoint, tracer=tracer)
        if opened is not None:
            opened.attach(runtime)  # its MCP elicitations too
        try:
            yield runtime
        finally:
            await runtime.aclose()
            await store.close()


__all__ = ["PACING", "Parts", "Role", "Service", "build_service", "check_role", "open_runtime"]
