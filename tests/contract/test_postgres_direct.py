"""PostgreSQL transactions on asyncpg's connections, their statements prepared once each.

What only this way of running shows: statements stay prepared on a server connection
from one transaction to the next; a connection lost between or during transactions, a
statement cancelled mid-way, or a schema changed under a prepared statement cost at most
the transaction they hit, never a connection left broken in the pool; a constraint keeps
its error; and a store behind a pooler in transaction mode, or one that logs its
statements, runs through SQLAlchemy instead.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

import asyncpg
import pytest
from pgbouncer import through_pgbouncer
from pgtest import fresh_database
from sqlalchemy import func, select, text
from sqlalchemy.engine import make_url

from runtime import StorageError
from runtime.store.sql import PoolOptions, SQLStore

if TYPE_CHECKING:
    from conftest import Make

_PREPARED_HERE = text("SELECT count(*) FROM pg_prepared_statements")
_SLEEP = text("SELECT pg_sleep(30)")


@pytest.fixture
async def postgres_url() -> AsyncIterator[str]:
    async with fresh_database() as url:
        yield url


def one_connection(url: str) -> SQLStore:
    return SQLStore.from_url(url, pool=PoolOptions(size=1, max_overflow=0, timeout_seconds=10))


async def admin(url: str) -> asyncpg.Connection:
    return await asyncpg.connect(make_url(url).set(drivername="postgresql").render_as_string(False))


async def backends(url: str, where: str = "") -> list[int]:
    """The server processes of other clients on the test's database."""
    conn = await admin(url)
    try:
        rows = await conn.fetch(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
            "AND pid <> pg_backend_pid()" + where
        )
        return [row["pid"] for row in rows]
    finally:
        await conn.close()


async def cancel_while_sleeping(url: str, task: asyncio.Task[None]) -> None:
    """Cancel `task` once its ``pg_sleep`` statement runs on the server."""
    # The server tells no one when a statement starts: it is looked for.
    deadline = asyncio.get_running_loop().time() + 10
    while not await backends(url, " AND query LIKE 'SELECT pg_sleep%'"):
        assert asyncio.get_running_loop().time() < deadline, "the statement never ran"
        assert not task.done()
        await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def terminate(url: str) -> int:
    """End every other client's connection to the test's database; how many."""
    conn = await admin(url)
    try:
        rows = await conn.fetch(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
        return len(rows)
    finally:
        await conn.close()


async def test_statements_stay_prepared_between_transactions(postgres_url: str, make: Make) -> None:
    store = one_connection(postgres_url)
    try:
        counts = []
        for run_id in ("run_1", "run_2", "run_3", "run_4"):
            async with store.transaction() as tx:
                await tx.insert_run(make.run(run_id))
                assert await tx.get_run(run_id) is not None
                counts.append((await tx._execute(_PREPARED_HERE)).one()[0])
        # The first transactions prepared their statements; the same statements again
        # prepare nothing more on the same connection.
        assert counts[0] >= 3
        assert counts[3] == counts[2] == counts[1], counts
    finally:
        await store.close()


async def test_a_connection_lost_between_transactions_costs_one_transaction(
    postgres_url: str, make: Make
) -> None:
    store = one_connection(postgres_url)
    try:
        async with store.transaction() as tx:
            await tx.insert_run(make.run())
        assert await terminate(postgres_url) == 1
        failures = 0
        for _attempt in range(2):
            try:
                async with store.transaction() as tx:
                    found = await tx.get_run("run_1")
                break
            except StorageError:
                failures += 1
        else:
            pytest.fail("the store did not recover from a lost connection")
        assert failures <= 1
        assert found is not None
    finally:
        await store.close()


async def test_a_connection_lost_inside_a_transaction_commits_nothing(
    postgres_url: str, make: Make
) -> None:
    store = one_connection(postgres_url)
    try:
        with pytest.raises(StorageError):
            async with store.transaction() as tx:
                await tx.insert_run(make.run())
                assert await terminate(postgres_url) == 1
                await tx.get_run("run_1")
        async with store.transaction() as tx:
            assert await tx.get_run("run_1") is None
            await tx.insert_run(make.run())
        async with store.transaction() as tx:
            assert await tx.get_run("run_1") is not None
    finally:
        await store.close()


async def test_a_statement_cancelled_midway_leaves_the_store_usable(
    postgres_url: str, make: Make
) -> None:
    store = one_connection(postgres_url)
    started = asyncio.Event()

    async def sleeper() -> None:
        async with store.transaction() as tx:
            await tx.insert_run(make.run())
            started.set()
            await tx._execute(_SLEEP)

    task = asyncio.create_task(sleeper())
    try:
        await started.wait()
        await cancel_while_sleeping(postgres_url, task)
        # The one connection of the pool is usable, or was replaced: the next
        # transaction runs at once, and the cancelled one committed nothing.
        async with asyncio.timeout(10):
            async with store.transaction() as tx:
                assert await tx.get_run("run_1") is None
        assert not await backends(postgres_url, " AND query LIKE 'SELECT pg_sleep%'")
    finally:
        task.cancel()
        await store.close()


async def test_a_schema_changed_under_a_prepared_statement_fails_one_transaction(
    postgres_url: str, make: Make
) -> None:
    store = one_connection(postgres_url)
    try:
        async with store.transaction() as tx:
            await tx.insert_run(make.run())
            assert await tx.get_run("run_1") is not None
        conn = await admin(postgres_url)
        try:
            # Another result type for a column the prepared read returns.
            await conn.execute("ALTER TABLE runs ALTER COLUMN agent TYPE text")
        finally:
            await conn.close()
        outcomes: list[str] = []
        for _attempt in range(2):
            try:
                async with store.transaction() as tx:
                    found = await tx.get_run("run_1")
                outcomes.append("ok")
                break
            except StorageError as exc:
                outcomes.append(str(exc))
        assert outcomes[-1] == "ok", outcomes
        assert len(outcomes) <= 2
        assert found is not None and found.agent == make.run().agent
    finally:
        await store.close()


async def test_a_constraint_keeps_its_error(postgres_url: str, make: Make) -> None:
    store = one_connection(postgres_url)
    try:
        async with store.transaction() as tx:
            await tx.insert_run(make.run())
        with pytest.raises(ValueError, match="constraint violated"):
            async with store.transaction() as tx:
                await tx.insert_run(make.run())
        async with store.transaction() as tx:
            assert [r.run_id for r in await tx.list_runs()] == ["run_1"]
    finally:
        await store.close()


async def test_pooled_and_logging_stores_run_through_sqlalchemy(postgres_url: str) -> None:
    direct = SQLStore.from_url(postgres_url)
    logging_store = SQLStore.from_url(postgres_url, echo=True)
    pooled = SQLStore.from_url(
        through_pgbouncer(postgres_url), pooler="transaction", listen_url=postgres_url
    )
    try:
        assert direct.runs_directly
        assert not logging_store.runs_directly
        assert not pooled.runs_directly
        async with pooled.transaction() as tx:
            # Nothing is left prepared on a server connection the pooler hands on.
            assert (await tx._execute(_PREPARED_HERE)).one()[0] == 0
    finally:
        for store in (direct, logging_store, pooled):
            await store.close()


async def test_a_connection_returned_inside_a_transaction_does_not_leak_it(
    postgres_url: str, make: Make
) -> None:
    store = one_connection(postgres_url)
    try:
        # The pool's one connection goes back with a transaction left open on it (what
        # a transaction cut short at the wrong moment could leave).
        async with store.engine.connect() as conn:
            record = await conn.get_raw_connection()
            driver = record.driver_connection
            assert driver is not None
            await driver.execute("BEGIN")
            await driver.execute(
                "INSERT INTO leases (name, owner, fence, expires_at) VALUES ('stray', 'x', 1, 0)"
            )
        async with store.transaction() as tx:
            await tx.insert_run(make.run())
        conn2 = await admin(postgres_url)
        try:
            assert await conn2.fetchval("SELECT count(*) FROM runs") == 1
            assert await conn2.fetchval("SELECT count(*) FROM leases") == 0
        finally:
            await conn2.close()
    finally:
        await store.close()


async def test_reads_before_the_first_write_need_no_begin(postgres_url: str, make: Make) -> None:
    store = one_connection(postgres_url)
    try:
        async with store.transaction() as tx:
            await tx.insert_run(make.run())
        async with store.transaction() as tx:
            assert tx._direct is not None
            assert await tx.get_run("run_1") is not None
            assert await tx.get_run("run_2") is None
            assert not tx._direct.begun  # two plain reads: no BEGIN, nothing to commit
        with pytest.raises(RuntimeError, match="changed my mind"):
            async with store.transaction() as tx:
                assert tx._direct is not None
                assert await tx.get_run("run_2") is None
                await tx.insert_run(make.run("run_2"))
                assert not tx._direct.begun  # the insert waits (see the tests below)
                assert await tx.get_run("run_2") is not None  # sent, after BEGIN, to read it
                assert tx._direct.begun
                raise RuntimeError("changed my mind")
        async with store.transaction() as tx:
            assert await tx.get_run("run_2") is None  # the read before it did not commit it
    finally:
        await store.close()


async def test_a_locking_read_begins_the_transaction_and_holds_its_lock(
    postgres_url: str, make: Make
) -> None:
    store = one_connection(postgres_url)
    other = await admin(postgres_url)
    try:
        async with store.transaction() as tx:
            await tx.insert_run(make.run())
        async with store.transaction() as tx:
            assert tx._direct is not None
            assert await tx.get_run("run_1", for_update=True) is not None
            assert tx._direct.begun
            with pytest.raises(asyncpg.LockNotAvailableError):
                await other.fetch("SELECT 1 FROM runs WHERE run_id = 'run_1' FOR UPDATE NOWAIT")
        # Committed: the lock is gone.
        assert await other.fetch("SELECT 1 FROM runs WHERE run_id = 'run_1' FOR UPDATE NOWAIT")
    finally:
        await other.close()
        await store.close()


async def test_a_plain_read_cancelled_midway_leaves_the_store_usable(
    postgres_url: str, make: Make
) -> None:
    # A read before any write runs outside BEGIN: cancelling it still must not hand the
    # pool a connection that is busy cancelling.
    store = one_connection(postgres_url)
    started = asyncio.Event()

    async def sleeper() -> None:
        async with store.transaction() as tx:
            assert tx._direct is not None
            started.set()
            await tx._execute(select(func.pg_sleep(30).label("slept")))

    async with store.transaction() as tx:
        await tx.insert_run(make.run())
    task = asyncio.create_task(sleeper())
    try:
        await started.wait()
        await cancel_while_sleeping(postgres_url, task)
        async with asyncio.timeout(10):
            async with store.transaction() as tx:
                assert await tx.get_run("run_1") is not None
    finally:
        task.cancel()
        await store.close()
