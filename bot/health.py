"""Health, readiness and Prometheus metrics routes, and the answer every route gives
while the database cannot be reached (503 ``storage_unavailable`` with ``Retry-After``).

The metrics themselves are `bot.metrics`'s."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web
from prometheus_client import generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from adapters.webhook.routes import STORAGE_RETRY_AFTER
from bot.metrics import Metrics
from runtime import Runtime, StorageError
from runtime.store.sql import SQLStore

log = logging.getLogger("signoff.http")


def storage_unavailable(message: str) -> web.Response:
    """The answer to a request the database could not serve: 503 with ``Retry-After``."""
    return web.json_response(
        {"error": "storage_unavailable", "message": message},
        status=503,
        headers={"Retry-After": str(STORAGE_RETRY_AFTER)},
    )


@web.middleware
async def storage_errors(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    """Any route whose database failed answers 503 ``storage_unavailable``, not 500.

    Routes that word the failure themselves (the API, webhooks) still do; this covers
    the rest (console pages, metrics, chat ingress) with one answer.
    """
    try:
        return await handler(request)
    except StorageError as exc:
        log.error("%s %s: the database failed: %s", request.method, request.path, exc)
        return storage_unavailable("The database did not answer; try again")


def add_health_routes(
    app: web.Application,
    runtime: Runtime,
    metrics: Metrics,
    *,
    role: str | None = None,
    checks: Callable[[], list[str]] | None = None,
) -> None:
    """``/healthz`` (alive), ``/readyz`` (database reachable, schema usable), ``/metrics``.

    ``/readyz`` is ready when the database answers and its schema is this version's
    newest, or newer and backward-compatible (a rolling upgrade in progress); its JSON
    says which revision it sees (``schema.revision``) next to this version's
    (``schema.code_revision``). ``/healthz`` never reads the database: the process is
    alive while it cannot be reached. Also installs `storage_errors` for every route.

    Args:
        app: Where to add the routes.
        runtime: Whose database to read.
        metrics: The figures ``/metrics`` reports.
        role: The process's role (``all``, ``web``, ``worker``), said by ``/readyz``.
        checks: What else keeps the process from being ready (e.g. a loop of its
            role that stopped); each one is listed by ``/readyz``.
    """

    async def healthz(request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def readyz(request: web.Request) -> web.Response:
        problems = []
        schema: dict[str, Any] | None = None
        unreachable = False
        try:
            async with runtime.store.transaction() as tx:
                await tx.count_runs()
        except Exception as exc:
            unreachable = True
            metrics.storage_failed()
            problems.append(f"database unreachable: {exc}")
        else:
            metrics.storage_worked()
            store = runtime.store
            if isinstance(store, SQLStore):
                try:
                    status = await store.schema_status()
                except Exception as exc:
                    unreachable = True
                    problems.append(f"database schema unreadable: {exc}")
                else:
                    schema = {
                        "revision": status.revision,
                        "code_revision": status.head,
                        "state": status.state,
                    }
                    if not status.usable:
                        problems.append(status.describe())
        if checks is not None:
            problems.extend(checks())
        body: dict[str, Any] = {"status": "unavailable" if problems else "ready"}
        if role is not None:
            body["role"] = role
        if problems:
            body["problems"] = problems
        if schema is not None:
            body["schema"] = schema
        headers: dict[str, str] = {}
        if unreachable:
            body["error"] = "storage_unavailable"
            headers["Retry-After"] = str(STORAGE_RETRY_AFTER)
        return web.json_response(body, status=503 if problems else 200, headers=headers)

    async def metrics_route(request: web.Request) -> web.Response:
        # Reads no database: the figures from it are `bot.metrics.figures_loop`'s.
        body = generate_latest(metrics.registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    app.middlewares.append(storage_errors)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics_route)
