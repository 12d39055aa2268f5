"""The Alembic migrations build exactly the schema `runtime.store.schema` describes."""

from __future__ import annotations

import asyncio
import json
import logging
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, Index, MetaData, inspect, text

from runtime.store.schema import metadata
from runtime.store.sql import MIGRATIONS_DIR, SCHEMA_HEAD, SQLStore, alembic_config

if TYPE_CHECKING:
    from conftest import Make


def _diff(conn: Connection, target: MetaData) -> list[Any]:
    return list(compare_metadata(MigrationContext.configure(conn), target))


async def schema_diff(store: SQLStore, target: MetaData = metadata) -> list[Any]:
    async with store.engine.connect() as conn:
        return await conn.run_sync(_diff, target)


async def table_names(store: SQLStore) -> set[str]:
    async with store.engine.connect() as conn:
        return set(await conn.run_sync(lambda c: inspect(c).get_table_names()))


def head() -> str:
    heads = ScriptDirectory.from_config(alembic_config()).get_heads()
    assert len(heads) == 1
    return heads[0]


def test_the_known_head_is_alembics_head() -> None:
    # The store compares a database with SCHEMA_HEAD without loading Alembic: a new
    # migration must move it too.
    assert head() == SCHEMA_HEAD


async def revisions_recorded(store: SQLStore) -> list[str]:
    async with store.engine.connect() as conn:
        rows = await conn.execute(text("SELECT revision FROM schema_revisions ORDER BY revision"))
        return [row.revision for row in rows]


async def test_migrate_at_head_records_revisions_a_bare_alembic_upgrade_left_out(
    empty_sql_url: str,
) -> None:
    store = SQLStore.from_url(empty_sql_url)
    try:
        await store.migrate()
        known = await revisions_recorded(store)
        assert SCHEMA_HEAD in known
        # As after `alembic upgrade head` from the command line: the schema is current,
        # but nothing tells older versions which of our migrations they can ignore.
        async with store.engine.begin() as conn:
            await conn.execute(text("DELETE FROM schema_revisions"))
        assert (await store.schema_status()).state == "current"
        await store.migrate()
        assert await revisions_recorded(store) == known
    finally:
        await store.close()


async def test_migrated_database_matches_schema(empty_sql_url: str) -> None:
    store = SQLStore.from_url(empty_sql_url)
    try:
        await store.migrate()
        assert await schema_diff(store) == []
        assert await table_names(store) == {*metadata.tables, "alembic_version"}
    finally:
        await store.close()


async def test_schema_comparison_sees_differences(empty_sql_url: str) -> None:
    # Guards the test above: the comparison does look at indexes and columns.
    changed = MetaData(naming_convention=dict(metadata.naming_convention))
    for table in metadata.tables.values():
        table.to_metadata(changed)
    Index("ix_runs_agent", changed.tables["runs"].c.agent)
    store = SQLStore.from_url(empty_sql_url)
    try:
        await store.migrate()
        diff = await schema_diff(store, changed)
    finally:
        await store.close()
    assert [d[0] for d in diff] == ["add_index"]


async def test_revision_and_currency(empty_sql_url: str) -> None:
    store = SQLStore.from_url(empty_sql_url)
    try:
        assert await store.schema_revision() is None
        assert await store.migrations_current() is False
        await store.migrate()
        assert await store.schema_revision() == head()
        assert await store.migrations_current() is True
    finally:
        await store.close()


async def test_migrate_twice_is_harmless(empty_sql_url: str, make: Make) -> None:
    store = SQLStore.from_url(empty_sql_url)
    try:
        await store.migrate()
        async with store.transaction() as tx:
            await tx.insert_run(make.run())
        await store.migrate()
        assert await store.migrations_current() is True
        async with store.transaction() as tx:
            assert await tx.get_run("run_1") == make.run()
    finally:
        await store.close()


async def test_concurrent_migrations_from_two_stores(empty_sql_url: str) -> None:
    first = SQLStore.from_url(empty_sql_url, busy_timeout_ms=5000)
    second = SQLStore.from_url(empty_sql_url, busy_timeout_ms=5000)
    try:
        await asyncio.gather(first.migrate(), second.migrate())
        assert await first.migrations_current() is True
        assert await schema_diff(second) == []
    finally:
        await first.close()
        await second.close()


@contextmanager
def lock_waits() -> Iterator[asyncio.Event]:
    """An event set when the store reports waiting for another connection's lock (it
    logs that from its worker thread)."""
    loop = asyncio.get_running_loop()
    met = asyncio.Event()

    class Seen(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if "locked by another connection" in record.getMessage():
                loop.call_soon_threadsafe(met.set)

    logger = logging.getLogger("signoff.store")
    handler, level = Seen(), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield met
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


async def first_of(signal: asyncio.Event, task: asyncio.Task[Any]) -> None:
    """Wait until `signal` is set or `task` ends; a task that failed raises here."""
    waiter = asyncio.ensure_future(signal.wait())
    try:
        await asyncio.wait({waiter, task}, timeout=60, return_when=asyncio.FIRST_COMPLETED)
    finally:
        waiter.cancel()
    if task.done():
        task.result()
    assert signal.is_set(), "the store never met the lock"


@pytest.mark.parametrize("lock", ["BEGIN IMMEDIATE", "BEGIN EXCLUSIVE"])
async def test_opening_and_migrating_wait_for_another_connections_lock(
    tmp_path: Path, lock: str
) -> None:
    # A new file is not in WAL mode yet; while another connection writes to it, SQLite
    # refuses the switch to WAL at once (IMMEDIATE: waiting could deadlock) or after its
    # busy handler (EXCLUSIVE). Two processes opening a new file at once meet this.
    path = tmp_path / "signoff.db"
    holder = sqlite3.connect(path, isolation_level=None)
    store = SQLStore.sqlite(path, busy_timeout_ms=60_000)
    try:
        holder.execute("CREATE TABLE other (x INTEGER)")
        holder.execute(lock)
        with lock_waits() as met:
            migrating = asyncio.create_task(store.migrate())
            await first_of(met, migrating)
        holder.rollback()
        await migrating
        assert await store.migrations_current() is True
    finally:
        holder.close()
        await store.close()


async def test_reading_the_schema_revision_waits_for_another_connections_lock(
    tmp_path: Path,
) -> None:
    # What a command checks first when it does not migrate (SIGNOFF_AUTO_MIGRATE=false).
    path = tmp_path / "signoff.db"
    holder = sqlite3.connect(path, isolation_level=None)
    store = SQLStore.sqlite(path, busy_timeout_ms=60_000)
    try:
        holder.execute("CREATE TABLE other (x INTEGER)")
        holder.execute("BEGIN IMMEDIATE")
        with lock_waits() as met:
            reading = asyncio.create_task(store.schema_status())
            await first_of(met, reading)
        holder.rollback()
        assert (await reading).state == "empty"
    finally:
        holder.close()
        await store.close()


async def test_a_transaction_opening_the_file_waits_for_another_connections_lock(
    tmp_path: Path, make: Make
) -> None:
    path = tmp_path / "signoff.db"
    migrated = SQLStore.sqlite(path)
    await migrated.migrate()
    await migrated.close()
    # Back to a rollback journal, as a tool may leave it: the next open switches to WAL.
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("PRAGMA journal_mode=DELETE")
    store = SQLStore.sqlite(path, busy_timeout_ms=60_000)

    async def insert() -> None:
        async with store.transaction() as tx:
            await tx.insert_run(make.run())

    try:
        holder.execute("BEGIN IMMEDIATE")
        with lock_waits() as met:
            inserting = asyncio.create_task(insert())
            await first_of(met, inserting)
        holder.rollback()
        await inserting
        async with store.transaction() as tx:
            assert await tx.get_run("run_1") == make.run()
    finally:
        holder.close()
        await store.close()


def _check_and_downgrade(conn: Connection) -> None:
    config = alembic_config()
    config.attributes["connection"] = conn
    # `alembic check`: autogenerate finds nothing to add to the migrations.
    command.check(config)
    command.downgrade(config, "base")


async def test_autogenerate_is_clean_and_downgrade_drops_everything(empty_sql_url: str) -> None:
    store = SQLStore.from_url(empty_sql_url)
    try:
        await store.migrate()
        async with store.engine.begin() as conn:
            await conn.run_sync(_check_and_downgrade)
        assert await table_names(store) == {"alembic_version"}
        assert await store.schema_revision() is None
        await store.migrate()
        assert await schema_diff(store) == []
    finally:
        await store.close()


def _to(revision: str) -> Any:
    def move(conn: Connection) -> None:
        config = alembic_config()
        config.attributes["connection"] = conn
        if revision == "head":
            command.upgrade(config, revision)
        else:
            command.downgrade(config, revision)

    return move


async def test_transcripts_survive_0009_both_ways(empty_sql_url: str, make: Make) -> None:
    # 0009 keeps a run's older transcript entries in rows of their own; going back to
    # 0008 puts every transcript back whole in runs.messages, and forth again keeps it.
    transcript = [{"role": "user", "content": f"entry {n}"} for n in range(30)]
    store = SQLStore.from_url(empty_sql_url)
    try:
        await store.migrate()
        async with store.transaction() as tx:
            await tx.insert_run(make.run("run_1", messages=list(transcript)))
            await tx.insert_run(make.run("run_2"))
        async with store.engine.begin() as conn:
            await conn.run_sync(_to("0008"))
        async with store.engine.connect() as conn:
            rows = (await conn.execute(text("SELECT run_id, messages FROM runs"))).all()
        stored = {
            run_id: json.loads(value) if isinstance(value, str) else value for run_id, value in rows
        }
        assert stored == {"run_1": transcript, "run_2": make.run().messages}
    finally:
        await store.close()
    store = SQLStore.from_url(empty_sql_url)
    try:
        await store.migrate()
        async with store.transaction() as tx:
            run = await tx.get_run("run_1")
            assert run is not None and run.messages == transcript
            run.messages.append({"role": "assistant", "content": "done"})
            await tx.update_run(run)
        async with store.transaction() as tx:
            again = await tx.get_run("run_1")
            assert again is not None and again.messages == run.messages
            assert again.messages_sealed == 31
    finally:
        await store.close()


def test_migrations_ship_inside_the_package() -> None:
    assert (MIGRATIONS_DIR / "env.py").is_file()
    assert (MIGRATIONS_DIR / "script.py.mako").is_file()
    assert list((MIGRATIONS_DIR / "versions").glob("0001_*.py"))
