"""The audit under concurrent writers on PostgreSQL: writers in several processes' stores
commit events out of sequence order while a reader pages through the audit with
``next_after``; the reader gets every committed event exactly once, in sequence order,
never one below a number it already went past. (SQLite has one writer at a time, whose
transactions commit in sequence order.)"""

from __future__ import annotations

import asyncio
import random
from typing import TYPE_CHECKING

from runtime.services.audit import AuditLog
from runtime.store.sql import SQLStore

if TYPE_CHECKING:
    from conftest import Make

WRITERS = 8
EACH = 10


async def test_a_reader_paging_during_concurrent_writes_misses_nothing(
    sql_url: str, make: Make
) -> None:
    if not sql_url.startswith("postgresql"):
        return
    stores = [SQLStore.from_url(sql_url) for _ in range(WRITERS + 1)]
    reader = AuditLog(stores[-1])
    chance = random.Random(7)
    try:
        async with stores[0].transaction() as tx:
            await tx.insert_run(make.run("run_1"))

        async def write(index: int) -> None:
            for n in range(EACH):
                async with stores[index].transaction() as tx:
                    await tx.append_event(make.event(kind=f"w{index}-{n}"))
                    await tx.events("run_1")  # inserted now: its number is drawn
                    # Hold the transaction open for a while after drawing the number, so
                    # commits land out of sequence order.
                    for _ in range(chance.randrange(0, 20)):
                        await asyncio.sleep(0)

        writers = asyncio.gather(*(write(i) for i in range(WRITERS)))
        seen: list[tuple[int, str]] = []
        after = 0
        while True:
            done = writers.done()
            page = await reader.page(after, chance.choice((3, 100)))
            seen += [(e["seq"], e["kind"]) for e in page.events]
            assert page.next_after >= after
            after = page.next_after
            if done and not page.events:
                break
        await writers

        async with stores[0].transaction() as tx:
            committed = [(e.seq, e.kind) for e in await tx.events("run_1")]
        assert len(committed) == WRITERS * EACH
        assert seen == sorted(committed)  # each once, in order, none skipped
    finally:
        for store in stores:
            await store.close()
