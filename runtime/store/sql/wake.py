"""Wake-ups between processes: what a commit made ready (PostgreSQL ``NOTIFY``)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

log = logging.getLogger("signoff.store")

_LISTEN_CHECK_SECONDS = 5.0


WAKE_CHANNEL = "signoff_wake"
"""The PostgreSQL ``LISTEN``/``NOTIFY`` channel of wake-ups between replicas."""
WAKE_RUNS = "runs"
"""Wake-up payload: a run became ready, or a received command waits to be applied."""
WAKE_OUTBOX = "outbox"
"""Wake-up payload: a notification was queued."""


NOTIFY = text("SELECT pg_notify(:channel, :payload)")


async def listen_for_wakeups(
    engine: AsyncEngine,
    on_wake: Callable[[frozenset[str]], object],
    stop: asyncio.Event,
    retry_seconds: float,
) -> None:
    """PostgreSQL: LISTEN on `WAKE_CHANNEL` until `stop` is set, opening a lost
    connection again after `retry_seconds` (see `SQLStore.listen`).

    `engine` is the store's listening engine (`runtime.store.sql.dialects.postgres_engines`):
    not pooled, and reaching PostgreSQL in a session of its own, since ``LISTEN`` lasts as
    long as its session and a pooler in transaction mode would hand that on.
    """
    everything = frozenset({WAKE_RUNS, WAKE_OUTBOX})
    while not stop.is_set():
        try:
            async with engine.connect() as conn:
                raw = await conn.get_raw_connection()
                driver = raw.driver_connection
                try:
                    await _listen_on(driver, on_wake, stop, everything)
                finally:
                    if driver is None or driver.is_closed():
                        # Never hand a dead connection back to the pool.
                        await conn.invalidate()
        except Exception as exc:  # the driver's own errors too: keep trying
            if stop.is_set():
                return
            log.warning("listening for wake-ups failed (%s); retrying", exc)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=retry_seconds)


async def _listen_on(
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
