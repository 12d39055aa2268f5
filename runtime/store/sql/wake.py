"""Wake-ups between processes: what a commit made ready (PostgreSQL ``NOTIFY``).

A transaction sends at most one ``NOTIFY``, at its commit, whose payload names what it
made ready (`WAKE_RUNS`, `WAKE_OUTBOX`, comma-separated). Kinds the committing process
acts on itself while it listens (`SQLStore.listen`'s ``local``) are not sent: its own
loop is told in-process, and the other replicas stay asleep. A transaction that made
nothing ready, or only local work, sends nothing.
"""

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
_LISTEN = f'LISTEN "{WAKE_CHANNEL}"'


def notify_payload(wake: frozenset[str], local: frozenset[str]) -> str | None:
    """The payload of a transaction's one ``NOTIFY``: what it made ready for others
    (`wake` less the `local` kinds this process acts on itself), or None to send none."""
    others = wake - local
    return ",".join(sorted(others)) if others else None


async def listen_for_wakeups(
    engine: AsyncEngine,
    on_wake: Callable[[frozenset[str]], object],
    stop: asyncio.Event,
    retry_seconds: float,
    on_listening: Callable[[bool], object] | None = None,
) -> None:
    """PostgreSQL: LISTEN on `WAKE_CHANNEL` until `stop` is set, opening a lost
    connection again after `retry_seconds` (see `SQLStore.listen`); `on_listening` is
    told True once the ``LISTEN`` holds and False as soon as it is lost.

    `engine` is the store's listening engine (`runtime.store.sql.dialects.postgres_engines`):
    not pooled, and reaching PostgreSQL in a session of its own, since ``LISTEN`` lasts as
    long as its session and a pooler in transaction mode would hand that on.
    """
    everything = frozenset({WAKE_RUNS, WAKE_OUTBOX})

    def listening(now: bool) -> None:
        if on_listening is not None:
            on_listening(now)

    while not stop.is_set():
        try:
            async with engine.connect() as conn:
                raw = await conn.get_raw_connection()
                driver = raw.driver_connection
                try:
                    await _listen_on(driver, on_wake, stop, everything, listening)
                finally:
                    if driver is None or driver.is_closed():
                        # Never hand a dead connection back to the pool.
                        await conn.invalidate()
        except Exception as exc:  # the driver's own errors too: keep trying
            listening(False)
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
    listening: Callable[[bool], None],
) -> None:
    """LISTEN on an asyncpg connection until `stop` is set or the connection is lost."""

    def notified(_conn: Any, _pid: int, _channel: str, payload: str) -> None:
        on_wake(frozenset(payload.split(",")) & everything or everything)

    lost = asyncio.Event()

    def closed(_conn: Any) -> None:
        lost.set()
        listening(False)  # at once, not when the loop below next looks

    driver.add_termination_listener(closed)
    await driver.add_listener(WAKE_CHANNEL, notified)
    try:
        listening(True)
        on_wake(everything)
        while not stop.is_set() and not lost.is_set() and not driver.is_closed():
            waiters = {asyncio.ensure_future(stop.wait()), asyncio.ensure_future(lost.wait())}
            # Also look now and then, in case the driver misses the socket's end: while
            # this connection is believed healthy the loops poll seldom, so a silently
            # dead one must be found out (a round trip that does not come back in time).
            # The round trip is the LISTEN again, a no-op that leaves the session's last
            # statement what it was in pg_stat_activity.
            done, pending = await asyncio.wait(
                waiters, timeout=_LISTEN_CHECK_SECONDS, return_when=asyncio.FIRST_COMPLETED
            )
            for waiter in pending:
                waiter.cancel()
            if not done and not driver.is_closed():
                try:
                    await asyncio.wait_for(driver.execute(_LISTEN), _LISTEN_CHECK_SECONDS)
                except TimeoutError:
                    driver.terminate()
                    raise
    finally:
        listening(False)
        driver.remove_termination_listener(closed)
        if not driver.is_closed():
            await driver.remove_listener(WAKE_CHANNEL, notified)
