"""PostgreSQL's connections: the pool's bounds, and PgBouncer in transaction mode.

Behind PgBouncer (``pool_mode = transaction``, from ``.ci/with-postgres``) each
transaction may run on another server connection: the store must leave nothing on one
(no named prepared statements, no session settings), migrate through it, and listen for
wake-ups on a direct connection of its own. The store contract suite also runs through
it (``tests/contract/conftest.py``); these are what only a pooler or a pool shows.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

import pytest
from pgbouncer import through_pgbouncer
from pgtest import fresh_database
from sqlalchemy.pool import QueuePool
from test_wakeups import Heard

from runtime import StorageError
from runtime.store.sql import WAKE_OUTBOX, WAKE_RUNS, PoolOptions, SQLStore

if TYPE_CHECKING:
    from conftest import Make


@pytest.fixture
async def postgres_url() -> AsyncIterator[str]:
    async with fresh_database() as url:
        yield url


def pooled(direct_url: str, pool: PoolOptions | None = None) -> SQLStore:
    """A store whose transactions go through PgBouncer and whose LISTEN does not."""
    return SQLStore.from_url(
        through_pgbouncer(direct_url), pool=pool, pooler="transaction", listen_url=direct_url
    )


async def test_an_empty_database_is_migrated_through_the_pooler() -> None:
    async with fresh_database(migrated=False) as url:
        store = pooled(url)
        try:
            assert await store.schema_revision() is None
            await store.migrate()
            await store.migrate()  # again: already current, nothing to do
            assert await store.migrations_current()
            assert (await store.schema_status()).usable
        finally:
            await store.close()


async def test_concurrent_transactions_share_the_pooler_s_connections(
    postgres_url: str, make: Make
) -> None:
    # Few client connections, many transactions: each client connection runs its
    # transactions on whichever server connection PgBouncer has free, so a statement
    # prepared under a name on one would be missing, or taken, on the next.
    store = pooled(postgres_url, PoolOptions(size=2, max_overflow=2))
    try:

        async def one(index: int) -> None:
            for turn in range(5):
                run_id = f"run_{index}_{turn}"
                async with store.transaction() as tx:
                    await tx.insert_run(make.run(run_id))
                async with store.transaction() as tx:
                    found = await tx.get_run(run_id, for_update=True)
                    assert found is not None and found.run_id == run_id

        await asyncio.gather(*(one(index) for index in range(12)))
        async with store.transaction() as tx:
            assert await tx.get_run("run_11_4") is not None
    finally:
        await store.close()


async def test_a_commit_through_the_pooler_wakes_a_listener_on_the_direct_url(
    postgres_url: str, make: Make
) -> None:
    listener, writer = pooled(postgres_url), pooled(postgres_url)
    stop = asyncio.Event()
    heard = Heard()
    task = asyncio.create_task(listener.listen(heard, stop))
    try:
        assert await heard.next() == {WAKE_RUNS, WAKE_OUTBOX}
        async with writer.transaction() as tx:
            await tx.insert_run(make.run())
        assert await heard.next() == {WAKE_RUNS}
        async with writer.transaction() as tx:
            await tx.add_outbox(make.outbox())
        assert await heard.next() == {WAKE_OUTBOX}
    finally:
        stop.set()
        await task
        await listener.close()
        await writer.close()


def test_a_transaction_pooler_needs_a_listen_url(postgres_url: str) -> None:
    with pytest.raises(ValueError, match="cannot LISTEN"):
        SQLStore.from_url(through_pgbouncer(postgres_url), pooler="transaction")
    with pytest.raises(ValueError, match="listen URL must be PostgreSQL"):
        SQLStore.from_url(postgres_url, listen_url="sqlite+aiosqlite:///x.db")


async def test_listening_takes_no_connection_of_the_pool(postgres_url: str, make: Make) -> None:
    store = SQLStore.from_url(
        postgres_url, pool=PoolOptions(size=1, max_overflow=0, timeout_seconds=5)
    )
    stop = asyncio.Event()
    heard = Heard()
    task = asyncio.create_task(store.listen(heard, stop))
    try:
        await heard.next()
        async with store.transaction() as tx:
            await tx.insert_run(make.run())
        assert await heard.next() == {WAKE_RUNS}
        assert queue_pool(store).size() == 1
    finally:
        stop.set()
        await task
        await store.close()


async def test_a_transaction_that_finds_the_pool_exhausted_fails_after_the_timeout(
    postgres_url: str,
) -> None:
    store = SQLStore.from_url(
        postgres_url, pool=PoolOptions(size=1, max_overflow=0, timeout_seconds=0.2)
    )
    try:
        async with store.transaction() as held:
            await held.get_run("run_1")
            with pytest.raises(StorageError, match="cannot open"):
                async with store.transaction():
                    pass
        async with store.transaction() as tx:  # returned: free again
            assert await tx.get_run("run_1") is None
    finally:
        await store.close()


@pytest.mark.parametrize(
    ("options", "wrong"),
    [
        ({"size": 0}, "pool size must be at least 1"),
        ({"max_overflow": -1}, "max_overflow cannot be negative"),
        ({"timeout_seconds": 0}, "pool timeout must be positive"),
        ({"recycle_seconds": 0}, "recycle_seconds must be positive"),
    ],
)
def test_pool_options_out_of_range_are_refused(options: dict[str, float], wrong: str) -> None:
    with pytest.raises(ValueError, match=wrong):
        PoolOptions(**options)  # type: ignore[arg-type]


def test_sqlite_takes_no_pooler_nor_listen_url() -> None:
    with pytest.raises(ValueError, match="PostgreSQL's, not SQLite's"):
        SQLStore.from_url("sqlite+aiosqlite:///signoff.db", pooler="transaction")
    with pytest.raises(ValueError, match="PostgreSQL's, not SQLite's"):
        SQLStore.from_url(
            "sqlite+aiosqlite:///signoff.db", listen_url="postgresql://u@localhost/db"
        )


def queue_pool(store: SQLStore) -> QueuePool:
    """The pool of the store's transactions."""
    pool = store.engine.pool
    assert isinstance(pool, QueuePool), pool
    return pool
