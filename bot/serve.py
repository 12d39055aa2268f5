"""`signoff serve`: one asyncio process with the HTTP server and the background loops.

The process holds nothing per parked run: workers claim ready runs from the database,
drive them until they park or end, and let go. A restart (or another replica) picks up
whatever is ready, and recovers runs whose worker died once their lease expires.

Any number of replicas may serve one PostgreSQL database (or share a SQLite file on one
machine): runs, received clicks and outbox items are claimed under leases, messages to
one chat channel are paced in the database, a ``NOTIFY`` from the replica that made
work ready wakes the others at once (polling stays the fallback), and one replica at a
time holds the Discord gateway.

A process may take one role (``SIGNOFF_ROLE``): ``web`` processes serve the HTTP edges,
``worker`` processes drive the runs (see `bot.bootstrap.Parts.of_role`).
"""

from __future__ import annotations

import asyncio
import logging
import signal

from bot import collector, event_loop
from bot.bootstrap import PACING, Service, build_service, check_role
from bot.settings import Settings

log = logging.getLogger("signoff.serve")

__all__ = ["PACING", "Service", "build_service", "serve"]

_ROLES = {
    "all": "web and worker",
    "web": "web: console, API, webhooks and chat ingress; runs are driven by workers",
    "worker": "worker: drives runs and delivers cards; only /healthz, /readyz and /metrics",
}


async def serve(settings: Settings) -> None:
    """Run until SIGTERM or SIGINT, then shut down gracefully."""
    warning = check_role(settings)
    if warning is not None:
        log.warning("%s", warning)
    service = await build_service(settings)
    url = await service.start()
    collector.serving()
    agents = ", ".join(sorted(service.runtime.agents)) or "none"
    log.info(
        "signoff is serving at %s as %s (agents: %s)",
        url,
        _ROLES[settings.role],
        agents,
        extra={"url": url, "role": settings.role},
    )
    log.info("event loop: %s", event_loop.running_name())
    kept = service.console_secrets if service.parts.web else None
    # The token itself goes to stdout only, once: logs are shipped and kept.
    if kept is not None and kept.token_origin == "made":
        log.info("made up a console sign-in token (printed on stdout), kept in %s", kept.path)
    elif kept is not None and kept.token_origin == "kept":
        log.info("console sign-in token (printed on stdout) read from %s", kept.path)
    elif kept is not None and kept.token_origin == "process":
        log.warning(
            "made up a console sign-in token for this process only (printed on stdout): "
            "an in-memory database keeps nothing, so it changes with every start"
        )
    # Before the lines that say it is serving: a SIGTERM sent as soon as they are read
    # shuts down gracefully too.
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    print(f"signoff serving at {url}", flush=True)
    if service.parts.web:
        print(f"  console: {url}/login", flush=True)
        if settings.operator_token is None:
            print(f"  sign-in token: {service.operator_token}", flush=True)
    if settings.role != "all":
        print(f"  role: {settings.role} ({_ROLES[settings.role]})", flush=True)
    try:
        await stop.wait()
    finally:
        log.info(
            "shutting down: no new work; running tools get %ss", settings.shutdown_grace_seconds
        )
        await service.stop()
        log.info("signoff stopped")
