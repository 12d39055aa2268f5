"""Wake-ups on PostgreSQL reach who acts on them: work the committing process does itself
(its ``local`` kinds while it listens) is told to it in-process and sends no ``NOTIFY``;
what it leaves to others still does, one ``NOTIFY`` per transaction naming every kind."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import pytest
from pgtest import fresh_database

from runtime.store.sql import WAKE_OUTBOX, WAKE_RUNS, SQLStore
from runtime.store.sql.wake import notify_payload

if TYPE_CHECKING:
    from conftest import Make


@dataclass
class Heard:
    """What a listener was told, in order."""

    queue: asyncio.Queue[frozenset[str]] = field(default_factory=asyncio.Queue)

    def __call__(self, kinds: frozenset[str]) -> None:
        self.queue.put_nowait(kinds)

    async def next(self) -> frozenset[str]:
        return await asyncio.wait_for(self.queue.get(), timeout=10)


@pytest.fixture
async def postgres_url() -> AsyncIterator[str]:
    async with fresh_database() as url:
        yield url


def test_the_payload_leaves_out_local_kinds() -> None:
    both = frozenset({WAKE_RUNS, WAKE_OUTBOX})
    assert notify_payload(both, frozenset()) == "outbox,runs"
    assert notify_payload(both, frozenset({WAKE_OUTBOX})) == "runs"
    assert notify_payload(frozenset({WAKE_OUTBOX}), frozenset({WAKE_OUTBOX})) is None


async def test_local_work_wakes_only_the_committing_process(postgres_url: str, make: Make) -> None:
    mine, other = SQLStore.from_url(postgres_url), SQLStore.from_url(postgres_url)
    here, there, stop = Heard(), Heard(), asyncio.Event()
    tasks = [
        asyncio.create_task(mine.listen(here, stop, local=frozenset({WAKE_OUTBOX}))),
        asyncio.create_task(other.listen(there, stop)),
    ]
    try:
        everything = {WAKE_RUNS, WAKE_OUTBOX}
        assert await here.next() == everything  # on connecting
        assert await there.next() == everything
        async with mine.transaction() as tx:
            await tx.insert_run(make.run())
            await tx.add_outbox(make.outbox())
        # In-process at commit: the local kind; by the NOTIFY, the rest only.
        assert {await here.next(), await here.next()} == {
            frozenset({WAKE_OUTBOX}),
            frozenset({WAKE_RUNS}),
        }
        assert await there.next() == {WAKE_RUNS}
        async with mine.transaction() as tx:
            await tx.add_outbox(make.outbox("o2"))
        assert await here.next() == {WAKE_OUTBOX}
        # Nothing was sent for it: the other process's next wake-up is the next commit's.
        async with other.transaction() as tx:
            await tx.add_outbox(make.outbox("o3"))
        assert await there.next() == {WAKE_OUTBOX}
        assert await here.next() == {WAKE_OUTBOX}  # another process's: by NOTIFY
        # Once its listener stops, the process's commits tell everyone again.
        stop.set()
        for task in tasks:
            await task
        stop, there = asyncio.Event(), Heard()
        tasks = [asyncio.create_task(other.listen(there, stop))]
        assert await there.next() == everything
        async with mine.transaction() as tx:
            await tx.add_outbox(make.outbox("o4"))
        assert await there.next() == {WAKE_OUTBOX}
    finally:
        stop.set()
        for task in tasks:
            await task
        await mine.close()
        await other.close()
