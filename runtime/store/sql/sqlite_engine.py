"""SQLAlchemy's own engine on a SQLite file, and the writer's connection under it."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable
from functools import partial
from typing import Any, TypeVar

import aiosqlite
from sqlalchemy import Connection, event
from sqlalchemy.engine import Engine, create_engine
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlalchemy.pool import StaticPool

_T = TypeVar("_T")


SYNCHRONOUS = ("full", "normal")


# --- SQLite ----------------------------------------------------------------------------
#
# The store's own transactions go through `SQLiteWriter` (see `runtime.store.sql.sqlite_writer`).
# The async engine is for tools and tests that want SQLAlchemy on the same file; it gets
# the same pragmas and takes the write lock at BEGIN too.


async def open_aiosqlite(engine: AsyncEngine) -> aiosqlite.Connection:
    # The same arguments SQLAlchemy would give sqlite3.connect for this URL.
    cargs, cparams = engine.dialect.create_connect_args(engine.url)
    connection = aiosqlite.Connection(partial(sqlite3.connect, *cargs, **cparams), 64)
    # Like SQLAlchemy's own aiosqlite connect: never keep the process alive.
    connection._thread.daemon = True
    try:
        await connection
    except BaseException:
        # aiosqlite stops its thread after a failed connect but does not wait for it:
        # the thread would later report to this event loop, possibly after it closed
        # ("Event loop is closed" in the thread). Wait until it has ended.
        await asyncio.shield(asyncio.to_thread(connection._thread.join, 5.0))
        raise
    return connection


def install_sqlite_hooks(
    engine: AsyncEngine | Engine, *, busy_timeout_ms: int | None, synchronous: str | None
) -> None:
    sync_engine = engine.sync_engine if isinstance(engine, AsyncEngine) else engine

    @event.listens_for(sync_engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # Take BEGIN away from the sqlite3 module; `_on_begin` emits our own.
        dbapi_connection.isolation_level = None
        if busy_timeout_ms is None or synchronous is None:
            return  # the writer's connection, tuned already
        cursor = dbapi_connection.cursor()
        try:
            # The busy timeout first: switching to WAL may wait for another connection.
            cursor.execute(f"PRAGMA busy_timeout={busy_timeout_ms}")
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute(f"PRAGMA synchronous={synchronous.upper()}")
            cursor.execute("PRAGMA foreign_keys=ON")
        finally:
            cursor.close()

    @event.listens_for(sync_engine, "begin")
    def _on_begin(conn: Connection) -> None:
        # IMMEDIATE takes the write lock up front: a deferred transaction that reads
        # first and writes later can fail with SQLITE_BUSY without waiting.
        conn.exec_driver_sql("BEGIN IMMEDIATE")


def writer_engine(conn: sqlite3.Connection) -> Engine:
    """A synchronous engine over the writer's connection (migrations, schema checks)."""
    engine = create_engine("sqlite://", creator=lambda: conn, poolclass=StaticPool)
    install_sqlite_hooks(engine, busy_timeout_ms=None, synchronous=None)
    return engine


def with_busy_timeout(conn: sqlite3.Connection, busy_timeout_ms: int, fn: Callable[[], _T]) -> _T:
    """Run `fn` on the writer's connection, waiting for other processes' locks meanwhile."""
    conn.execute(f"PRAGMA busy_timeout={busy_timeout_ms}").close()
    try:
        return fn()
    finally:
        conn.execute("PRAGMA busy_timeout=0").close()
