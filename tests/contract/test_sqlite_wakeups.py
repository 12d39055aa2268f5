"""On SQLite, `SQLStore.listen` hears the store's own commits: the process's loops wake
at once for what it committed itself (another process's commits are found by polling)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from runtime.store.sql import WAKE_OUTBOX, WAKE_RUNS, SQLStore

if TYPE_CHECKING:
    from conftest import Make


async def test_a_commit_wakes_the_listeners_of_its_own_store(tmp_path: Path, make: Make) -> None:
    store = SQLStore.sqlite(tmp_path / "signoff.db")
    await store.migrate()
    heard: asyncio.Queue[frozenset[str]] = asyncio.Queue()
    stop = asyncio.Event()
    task = asyncio.create_task(store.listen(heard.put_nowait, stop))
    try:
        await asyncio.sleep(0)  # the listener is registered before its first await
        with pytest.raises(RuntimeError):
            async with store.transaction() as tx:
                await tx.insert_run(make.run("rolled_back"))
                raise RuntimeError("roll back")
        async with store.transaction() as tx:
            await tx.get_run("run_1")  # reads only: nothing to look at
        async with store.transaction() as tx:
            await tx.insert_run(make.run())
            await tx.add_outbox(make.outbox())
        # Told as the commit returns, before anything else could wake the listener.
        assert heard.get_nowait() == {WAKE_RUNS, WAKE_OUTBOX}
        assert heard.empty()
        stop.set()
        await asyncio.wait_for(task, timeout=5)
        async with store.transaction() as tx:
            await tx.add_outbox(make.outbox("ob_2"))
        assert heard.empty()  # a stopped listener hears nothing more
    finally:
        stop.set()
        await asyncio.wait_for(task, timeout=5)
        await store.close()
