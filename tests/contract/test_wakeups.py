"""Wake-ups between processes: a commit on one engine reaches `listen` on another.

PostgreSQL sends them with ``NOTIFY`` (delivered at commit, never for a rollback); on
SQLite `listen` only waits for its stop event, and the loops poll.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from pgtest import fresh_database
from sqlalchemy import text

from runtime.store.sql import WAKE_OUTBOX, WAKE_RUNS, SQLStore

if TYPE_CHECKING:
    from conftest import Make


@dataclass
class Heard:
    """What a listener was told, in order."""

    kinds: list[frozenset[str]] = field(default_factory=list)
    queue: asyncio.Queue[frozenset[str]] = field(default_factory=asyncio.Queue)

    def __call__(self, kinds: frozenset[str]) -> None:
        self.kinds.append(kinds)
        self.queue.put_nowait(kinds)

    async def next(self) -> frozenset[str]:
        """The next wake-up not taken yet (waiting for it)."""
        return await asyncio.wait_for(self.queue.get(), timeout=10)


@pytest.fixture
async def postgres_url() -> AsyncIterator[str]:
    async with fresh_database() as url:
        yield url


async def test_a_commit_on_one_engine_wakes_the_other(postgres_url: str, make: Make) -> None:
    listener, writer = SQLStore.from_url(postgres_url), SQLStore.from_url(postgres_url)
    stop = asyncio.Event()
    heard = Heard()
    task = asyncio.create_task(listener.listen(heard, stop))
    try:
        # On (re)connecting, everything: whatever was missed meanwhile.
        assert await heard.next() == {WAKE_RUNS, WAKE_OUTBOX}
        with pytest.raises(RuntimeError):
            async with writer.transaction() as tx:
                await tx.insert_run(make.run("rolled_back"))
                raise RuntimeError("roll back")
        started = time.monotonic()
        async with writer.transaction() as tx:
            await tx.insert_run(make.run())
        assert await heard.next() == {WAKE_RUNS}  # not the rolled-back one first
        assert time.monotonic() - started < 2.0
        async with writer.transaction() as tx:
            await tx.add_outbox(make.outbox())
        assert await heard.next() == {WAKE_OUTBOX}
        # A run that is not ready (running, parked) wakes nobody; a queued one does.
        async with writer.transaction() as tx:
            await tx.insert_run(make.run("busy", status="running"))
            await tx.insert_run(make.run("ready"))
        assert await heard.next() == {WAKE_RUNS}
    finally:
        stop.set()
        await task
        await listener.close()
        await writer.close()


async def test_listening_again_after_the_connection_is_lost(postgres_url: str, make: Make) -> None:
    listener, writer = SQLStore.from_url(postgres_url), SQLStore.from_url(postgres_url)
    stop = asyncio.Event()
    heard = Heard()
    task = asyncio.create_task(listener.listen(heard, stop, retry_seconds=0.05))
    try:
        await heard.next()
        async with writer.engine.connect() as conn:
            await conn.execute(
                text(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE query LIKE 'LISTEN%' AND pid <> pg_backend_pid()"
                )
            )
        # Reconnected: told "everything" again, then hears new commits.
        assert await heard.next() == {WAKE_RUNS, WAKE_OUTBOX}
        async with writer.transaction() as tx:
            await tx.insert_run(make.run())
        assert await heard.next() == {WAKE_RUNS}
    finally:
        stop.set()
        await task
        await listener.close()
        await writer.close()


async def test_sqlite_listen_only_waits(tmp_path: Path) -> None:
    store = SQLStore.sqlite(tmp_path / "signoff.db")
    stop = asyncio.Event()
    heard = Heard()
    task = asyncio.create_task(store.listen(heard, stop))
    try:
        await asyncio.sleep(0)
        assert not task.done()
        stop.set()
        await asyncio.wait_for(task, timeout=5)
        assert heard.kinds == []
    finally:
        await store.close()
