"""Build the serving process of `signoff serve` from its settings (`build_service`).

The process holds nothing per parked run: workers claim ready runs from the database,
drive them until they park or end, and let go. A restart (or another replica) picks up
whatever is ready, and recovers runs whose worker died once their lease expires.

Any number of replicas may serve one PostgreSQL database (or share a SQLite file on one
machine): runs, received clicks and outbox items are claimed under leases, messages to
one chat channel are paced in the database, a ``NOTIFY`` from the replica that made
work ready wakes the others at once (polling stays the fallback), and one replica at a
time holds the Discord gateway.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from aiohttp import web

from bot.console_secrets import ConsoleSecrets, console_secrets
from bot.health import Metrics, add_health_routes
from bot.notifiers import NOTIFIERS_KEY
from bot.settings import Settings, require_shared_settings
from runtime import ConfigurationError, Runtime
from runtime.outbox import Claim, Notifier, NullNotifier, RoutingNotifier
from runtime.store.base import Store
from runtime.store.sql import WAKE_OUTBOX, WAKE_RUNS, SQLStore
from runtime.worker import Worker, deadline_loop, outbox_loop

if TYPE_CHECKING:
    from bot.discord_wiring import DiscordEdge
    from bot.wiring import LoadedAgents

PACING = {"slack": 1.0, "discord": 0.2}
"""Seconds between two messages to one chat channel, across every replica: Slack allows
about one per second per channel; Discord a burst of five per five seconds, and its
429s are retried."""


@dataclass
class Service:
    """A running `signoff serve`: the web server, workers and loops of one process."""

    settings: Settings
    runtime: Runtime
    store: Store
    metrics: Metrics
    worker: Worker
    app: web.Application
    url: str = ""
    operator_token: str = ""
    console_secrets: ConsoleSecrets | None = None
    _stop: asyncio.Event = field(default_factory=asyncio.Event)
    _tasks: list[asyncio.Task[Any]] = field(default_factory=list)
    _runner: web.AppRunner | None = None
    discord: DiscordEdge | None = None
    loaded: LoadedAgents | None = None
    _outbox_wake: asyncio.Event = field(default_factory=asyncio.Event)

    async def start(self) -> str:
        """Bind the HTTP server, start the loops; return the server's base URL."""
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
        host = self.settings.bind_host
        shown = "127.0.0.1" if host in ("0.0.0.0", "::") else host
        self.url = f"http://{shown}:{port}"
        if self.settings.discord_bot_token is not None:  # the edge is loaded only when on
            from bot.discord_wiring import DiscordEdge

            edge = DiscordEdge(self.runtime, self.worker, self.settings)
            await edge.start()
            self.discord = edge
        notifier = self._notifier()
        claim = Claim(
            owner=self.runtime.worker_id,
            lease_seconds=self.settings.outbox_lease_seconds,
            pacing=PACING,
        )
        outbox = outbox_loop(
            self.runtime,
            notifier,
            self._stop,
            seconds=self.settings.poll_seconds,
            claim=claim,
            wake=self._outbox_wake,
        )
        self._tasks = [
            asyncio.create_task(self.worker.run(self._stop), name="worker"),
            asyncio.create_task(outbox, name="outbox"),
            asyncio.create_task(deadline_loop(self.runtime, self._stop), name="deadlines"),
        ]
        if isinstance(self.store, SQLStore):
            listen = self.store.listen(self._woken, self._stop)
            self._tasks.append(asyncio.create_task(listen, name="wake-ups"))
        if self.discord is not None:
            hold = self.discord.hold(self._stop)
            self._tasks.append(asyncio.create_task(hold, name="discord-lease"))
        self.worker.wake()
        return self.url

    def _woken(self, kinds: frozenset[str]) -> None:
        """Another replica (or this one) committed work: look at once."""
        if WAKE_RUNS in kinds:
            self.worker.wake()
        if WAKE_OUTBOX in kinds:
            self._outbox_wake.set()

    def _notifier(self) -> Notifier:
        routes: dict[str, Notifier] = {"console": NullNotifier()}
        extra = self.app.get(NOTIFIERS_KEY) or {}
        routes.update(extra)
        if self.discord is not None:
            routes["discord"] = self.discord.notifier
        return RoutingNotifier(routes)

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
        await self.store.close()


async def build_service(settings: Settings) -> Service:
    """Build every part of the serving process from settings (nothing runs yet).

    Raises:
        ConfigurationError: A setting is invalid, or one every replica must share is
            missing (a database other than SQLite).
    """
    from bot.app import build_app
    from bot.wiring import build_runtime, load_agent_set

    require_shared_settings(settings)
    metrics = Metrics()
    loaded = load_agent_set(settings)
    await loaded.start()  # MCP servers: connected and listed, or reported unavailable
    try:
        runtime, store = await build_runtime(settings, loaded.agents, checkpoint=metrics.observe)
        worker = Worker(runtime, concurrency=settings.workers, poll_seconds=settings.poll_seconds)
        kept = console_secrets(settings)
        operator_token = kept.operator_token
        app = build_app(settings, runtime, worker, operator_token, cookie_secret=kept.cookie_secret)
    except BaseException:
        await loaded.close()
        raise
    add_health_routes(app, runtime, metrics)
    return Service(
        settings=settings,
        runtime=runtime,
        store=store,
        metrics=metrics,
        worker=worker,
        app=app,
        operator_token=operator_token,
        console_secrets=kept,
        loaded=loaded,
    )
