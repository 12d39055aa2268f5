"""Wake-ups between processes: what a commit made ready (PostgreSQL ``NOTIFY``)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from sqlalchemy import text

_LISTEN_CHECK_SECONDS = 5.0


WAKE_CHANNEL = "signoff_wake"
"""The PostgreSQL ``LISTEN``/``NOTIFY`` channel of wake-ups between replicas."""
WAKE_RUNS = "runs"
"""Wake-up payload: a run became ready, or a received command waits to be applied."""
WAKE_OUTBOX = "outbox"
"""Wake-up payload: a notification was queued."""


NOTIFY = text("SELECT pg_notify(:channel, :payload)")


async def listen_on(
    driver: Any,
    on_wake: Callable[[frozenset[str]], object],
    stop: asyncio.Event,
    everything: frozenset[str],
) -> None:
    """LISTEN on an asyncpg connection until `stop` is set or the connection is lost."""

    def notified(_conn: Any, _pid: int, _channel: str, payload: str) -> None:
        on_wake(frozenset(payload.split(",")) & everything or everything)

    lost = asyncio.Event()

    def closed(_conn: Any) -> None:
        lost.set()

    driver.add_termination_listener(closed)
    await driver.add_listener(WAKE_CHANNEL, notified)
    try:
        on_wake(everything)
        while not stop.is_set() and not lost.is_set() and not driver.is_closed():
            waiters = {asyncio.ensure_future(stop.wait()), asyncio.ensure_future(lost.wait())}
            # Also look now and then, in case the driver misses the socket's end.
            _done, pending = await asyncio.wait(
                waiters, timeout=_LISTEN_CHECK_SECONDS, return_when=asyncio.FIRST_COMPLETED
            )
            for waiter in pending:
                waiter.cancel()
    finally:
        driver.remove_termination_listener(closed)
        if not driver.is_closed():
            await driver.remove_listener(WAKE_CHANNEL, notified)
