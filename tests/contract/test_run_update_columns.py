"""A run update writes only the columns that changed, yet every write reads back whole.

The SQL store remembers what it last wrote to a run's row (or read locked) and leaves
unchanged columns out of the next ``UPDATE`` under the same lease. These tests read the
row back through another store (no memory shared) after the writes that could go wrong:
one that did not commit, a lease taken over, many events in one transaction.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta

import pytest

from conftest import Make
from runtime.domain.errors import LeaseLost
from runtime.domain.states import RunStatus
from runtime.store.records import EventRecord, RunRecord
from runtime.store.sql import SQLStore


class Boom(Exception):
    pass


@pytest.fixture
async def stores(sql_url: str) -> AsyncIterator[tuple[SQLStore, SQLStore]]:
    """Two stores on one database: the writer and a reader that remembers nothing."""
    writer, reader = SQLStore.from_url(sql_url), SQLStore.from_url(sql_url)
    try:
        yield writer, reader
    finally:
        await writer.close()
        await reader.close()


def _running(make: Make) -> RunRecord:
    return make.run(
        status=RunStatus.RUNNING, lease_owner="w1", lease_expires_at=make.at(30), fence=1
    )


async def _stored(store: SQLStore, run_id: str) -> RunRecord:
    async with store.transaction() as tx:
        run = await tx.get_run(run_id)
    assert run is not None
    return run


async def test_a_write_that_did_not_commit_is_written_again(
    stores: tuple[SQLStore, SQLStore], make: Make
) -> None:
    writer, reader = stores
    run = _running(make)
    async with writer.transaction() as tx:
        await tx.insert_run(run)
    run.messages.append({"role": "assistant", "content": "one"})
    run.turns = 1
    with pytest.raises(Boom):
        async with writer.transaction() as tx:
            await tx.update_run(run, fence=1)
            raise Boom
    run.updated_at = make.at(1)
    async with writer.transaction() as tx:
        await tx.update_run(run, fence=1)
    assert await _stored(reader, run.run_id) == run


async def test_writes_under_one_lease_read_back_whole(
    stores: tuple[SQLStore, SQLStore], make: Make
) -> None:
    writer, reader = stores
    run = _running(make)
    async with writer.transaction() as tx:
        await tx.insert_run(run)
    for n in range(12):  # past the entries kept in the row: some move apart
        run.messages.append({"role": "assistant", "content": f"entry {n}"})
        if n % 3 == 0:
            run.lineage.append({"run_id": f"run_{n}", "agent": "a"})  # changed in place
        run.lease_expires_at = make.at(n + 30)
        run.updated_at = make.at(n)
        async with writer.transaction() as tx:
            await tx.update_run(run, fence=1)
        assert await _stored(reader, run.run_id) == run
    run.status = RunStatus.DONE
    run.final_text = "done"
    async with writer.transaction() as tx:
        await tx.update_run(run, fence=1)
    assert await _stored(reader, run.run_id) == run


async def test_a_lease_taken_over_is_not_written_from_memory(
    stores: tuple[SQLStore, SQLStore], make: Make
) -> None:
    writer, other = stores
    run = _running(make)
    async with writer.transaction() as tx:
        await tx.insert_run(run)
    now = make.at(0)
    async with other.transaction() as tx:
        claimed = await tx.claim_run(
            run.run_id, owner="w2", now=now + timedelta(hours=1), until=now + timedelta(hours=2)
        )
    assert claimed is not None and claimed.fence == 2
    claimed.messages.append({"role": "assistant", "content": "by w2"})
    async with other.transaction() as tx:
        await tx.update_run(claimed, fence=2)
    with pytest.raises(LeaseLost):
        async with writer.transaction() as tx:
            await tx.update_run(run, fence=1)
    # The first writer reads the run locked, and writes what it read with a change.
    async with writer.transaction() as tx:
        locked = await tx.get_run(run.run_id, for_update=True)
        assert locked is not None
        locked.status = RunStatus.QUEUED
        locked.fence += 1
        await tx.update_run(locked)
    assert await _stored(other, run.run_id) == locked
    assert locked.messages[-1] == {"role": "assistant", "content": "by w2"}


async def test_many_events_of_one_transaction_keep_their_order(
    stores: tuple[SQLStore, SQLStore], make: Make
) -> None:
    writer, reader = stores
    run = _running(make)
    async with writer.transaction() as tx:
        await tx.insert_run(run)
        for n in range(70):  # more than one multi-row statement holds
            await tx.append_event(
                EventRecord(run_id=run.run_id, at=make.at(n), kind="step", data={"n": n})
            )
    async with reader.transaction() as tx:
        events = await tx.events(run.run_id)
    assert [e.data["n"] for e in events] == list(range(70))
    assert [e.seq for e in events] == sorted(e.seq for e in events)


async def test_a_row_known_under_an_earlier_lease_is_written_whole(
    stores: tuple[SQLStore, SQLStore], make: Make
) -> None:
    writer, other = stores
    run = _running(make)
    async with writer.transaction() as tx:
        await tx.insert_run(run)
    now = make.at(0)
    async with other.transaction() as tx:
        claimed = await tx.claim_run(
            run.run_id, owner="w2", now=now + timedelta(hours=1), until=now + timedelta(hours=2)
        )
        assert claimed is not None
        claimed.turns = 5
        await tx.update_run(claimed, fence=claimed.fence)
    # Read without a lock: the writer's memory of the row is of the first lease.
    current = await _stored(writer, run.run_id)
    assert current.turns == 5
    current.turns = 0  # what the row held under the first lease
    async with writer.transaction() as tx:
        await tx.update_run(current, fence=current.fence)
    assert await _stored(other, run.run_id) == current
