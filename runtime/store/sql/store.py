"""`SQLStore`: transactions, migrations and wake-ups on a SQL database."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import aiosqlite
from sqlalchemy import Connection
from sqlalchemy.engine import URL, Engine, make_url
from sqlalchemy.exc import OperationalError, SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from runtime.domain.errors import StorageError
from runtime.store.sql.dialects import (
    Pooler,
    PoolOptions,
    async_postgres_url,
    database_of,
    postgres_engines,
)
from runtime.store.sql.failures import (
    describe_database,
    driver_reason,
    unreachable,
    unreachable_reason,
)
from runtime.store.sql.migrating import (
    MIGRATION_WAIT_SECONDS,
    SCHEMA_HEAD,
    SchemaStatus,
    migrate_on,
    migrate_sync,
    read_heads,
    read_schema_status,
    reading,
)
from runtime.store.sql.postgres_direct import DirectPlans, direct_transaction
from runtime.store.sql.sqlite_engine import (
    install_sqlite_hooks,
    open_aiosqlite,
    with_busy_timeout,
    writer_engine,
)
from runtime.store.sql.sqlite_plans import OpenFailed
from runtime.store.sql.sqlite_writer import SQLiteWriter, open_sqlite
from runtime.store.sql.transaction import SQLTransaction

_T = TypeVar("_T")


SYNCHRONOUS = ("full", "normal")


class SQLStore:
    """A `runtime.store.base.Store` on a SQL database.

    Build it with `from_url` or `sqlite`; the constructor takes an engine that is
    already configured (SQLite needs the hooks `from_url` installs).

    Args:
        engine: The async engine to use; the store disposes it on `close`.
        writer: SQLite only: the connection the store's transactions share (made by
            `from_url`). Without it, every transaction takes a connection of the engine.
        listen: PostgreSQL only: the engine of the ``LISTEN`` connection (see `listen`);
            the store disposes it on `close`. Without it, `engine` listens.
        direct: PostgreSQL only: run transactions on asyncpg's connections directly,
            each statement prepared once per connection (see
            `runtime.store.sql.postgres_direct`); not behind a pooler in transaction
            mode. `from_url` turns it on where it applies.
    """

    def __init__(
        self,
        engine: AsyncEngine,
        writer: SQLiteWriter | None = None,
        *,
        listen: AsyncEngine | None = None,
        direct: bool = False,
    ) -> None:
        self._engine = engine
        self._writer = writer
        self._listen_engine = listen
        self._database = database_of(engine, listen)
        self._where = describe_database(engine.url)
        self._busy_timeout_ms = 0
        self._lock = self._database.lock()
        self._commits = 0
        self._sync_engine: Engine | None = None
        self._sync_for: sqlite3.Connection | None = None
        self._plans = (
            DirectPlans(engine.dialect)
            if direct and engine.dialect.name == "postgresql" and engine.dialect.driver == "asyncpg"
            else None
        )

    @classmethod
    def from_url(
        cls,
        url: str | URL,
        *,
        busy_timeout_ms: int = 750,
        synchronous: str = "full",
        echo: bool = False,
        pool: PoolOptions | None = None,
        pooler: Pooler = "none",
        listen_url: str | URL | None = None,
    ) -> SQLStore:
        """Open a store on a database URL.

        ``sqlite://`` and ``postgresql://`` URLs get their async drivers (aiosqlite,
        asyncpg) when none is named.

        Args:
            url: A SQLAlchemy database URL.
            busy_timeout_ms: SQLite only: how long to wait for another process's lock.
            synchronous: SQLite only: ``full`` (durable on power loss) or ``normal``
                (WAL default; a power loss may lose the last commits, never corrupts).
            echo: Log every statement (of the engine; on SQLite the store's own
                transactions do not go through it; on PostgreSQL they then do, through
                SQLAlchemy).
            pool: PostgreSQL only: how many connections to keep (default `PoolOptions()`).
            pooler: PostgreSQL only: ``transaction`` when `url` goes through a pooler in
                transaction mode such as PgBouncer (see `runtime.store.sql.dialects`).
            listen_url: PostgreSQL only: where the ``LISTEN`` connection of `listen`
                goes (default: `url`); required with ``pooler="transaction"``.

        Returns:
            The store. Call `migrate` before first use.

        Raises:
            ValueError: An option does not fit the database, or a value is out of range.
        """
        parsed = make_url(url)
        if parsed.drivername == "sqlite":
            parsed = parsed.set(drivername="sqlite+aiosqlite")
        else:
            parsed = async_postgres_url(parsed)
        if parsed.get_backend_name() != "sqlite":
            if parsed.get_backend_name() != "postgresql":
                return cls(create_async_engine(parsed, echo=echo))
            shared, listen = postgres_engines(
                parsed,
                pool=pool if pool is not None else PoolOptions(),
                pooler=pooler,
                listen_url=listen_url,
                echo=echo,
            )
            # Prepared statements outlive a transaction on one server connection, which a
            # pooler in transaction mode does not give; echo logs what SQLAlchemy runs.
            return cls(shared, listen=listen, direct=pooler == "none" and not echo)
        if pooler != "none" or listen_url is not None:
            raise ValueError("a pooler and a listen URL are PostgreSQL's, not SQLite's")
        if synchronous.lower() not in SYNCHRONOUS:
            raise ValueError(f"synchronous must be one of {SYNCHRONOUS}, not {synchronous!r}")
        if busy_timeout_ms < 0:
            raise ValueError("busy_timeout_ms cannot be negative")
        options: dict[str, Any] = {}
        check_directory(parsed)
        if parsed.database not in (None, "", ":memory:"):
            # The store's transactions use the writer's connection; these serve tools.
            options.update(pool_size=1, max_overflow=2)
        engine: AsyncEngine

        async def connect() -> aiosqlite.Connection:
            return await open_aiosqlite(engine)

        engine = create_async_engine(parsed, echo=echo, async_creator=connect, **options)
        install_sqlite_hooks(
            engine, busy_timeout_ms=int(busy_timeout_ms), synchronous=synchronous.lower()
        )
        cargs, cparams = engine.dialect.create_connect_args(engine.url)
        writer = SQLiteWriter(
            partial(
                open_sqlite,
                cargs,
                cparams,
                synchronous=synchronous.lower(),
                busy_timeout_ms=int(busy_timeout_ms),
            ),
            busy_timeout_ms=int(busy_timeout_ms),
            where=describe_database(parsed),
        )
        store = cls(engine, writer)
        store._busy_timeout_ms = int(busy_timeout_ms)
        return store

    @classmethod
    def sqlite(
        cls,
        path: str | Path,
        *,
        busy_timeout_ms: int = 750,
        synchronous: str = "full",
        echo: bool = False,
    ) -> SQLStore:
        """Open a store on a SQLite file (created when missing).

        Args:
            path: The database file.
            busy_timeout_ms: How long to wait for another process's lock.
            synchronous: ``full`` or ``normal``; see `from_url`.
            echo: Log every statement of the engine; see `from_url`.
        """
        url = URL.create("sqlite+aiosqlite", database=str(path))
        return cls.from_url(
            url, busy_timeout_ms=busy_timeout_ms, synchronous=synchronous, echo=echo
        )

    @property
    def engine(self) -> AsyncEngine:
        """The underlying engine (for tools and tests).

        On SQLite the store's own transactions use a connection of their own (see
        `runtime.store.sql.sqlite_writer`); the engine opens others on the same file. An in-memory
        SQLite database is private to each connection, so there the engine sees another,
        empty one.
        """
        return self._engine

    @property
    def commits(self) -> int:
        """How many transactions that wrote something were committed."""
        return self._writer.commits if self._writer is not None else self._commits

    @property
    def syncs(self) -> int:
        """How many database commits made writes durable.

        On SQLite transactions that run at the same time share one commit (see
        `runtime.store.sql.sqlite_writer`), so this can be less than `commits`; on PostgreSQL it
        is `commits`.
        """
        return self._writer.syncs if self._writer is not None else self._commits

    @property
    def runs_directly(self) -> bool:
        """PostgreSQL: whether transactions run on asyncpg's connections directly, their
        statements prepared once per connection (see `runtime.store.sql.postgres_direct`)."""
        return self._plans is not None

    @property
    def writer(self) -> SQLiteWriter | None:
        """SQLite: the connection the store's transactions share (benchmarks trace it)."""
        return self._writer

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[SQLTransaction]:
        """Run a transaction: commit on normal exit, roll back on an exception.

        On SQLite, transactions of this store that queue while one runs share its
        commit; each leaves this block only once its writes are durable.

        Raises:
            StorageError: The database failed to begin or commit. After a failed
                commit the outcome is unknown.
        """
        made: SQLTransaction | None = None
        try:
            if self._writer is not None:
                async with self._writer.member() as member:
                    tx = made = self._database.open_transaction(member, self._engine.dialect)
                    yield tx
                    await tx.flush()
                    member.wrote = tx.wrote
                self._database.committed(tx.woke)
                return
            if self._plans is not None:
                conn = await self._connect()
                try:
                    async with direct_transaction(conn, self._plans, self._where) as link:
                        tx = made = self._database.open_transaction(link, self._engine.dialect)
                        yield tx
                        await tx.flush()
                finally:
                    with contextlib.suppress(SQLAlchemyError, OSError):
                        await conn.close()
                self._committed(tx)
                return
            async with self._lock:
                conn = await self._connect()
                try:
                    await self._begin(conn)
                    tx = made = self._database.open_transaction(conn, conn.dialect)
                    try:
                        yield tx
                        await tx.flush()
                    except BaseException:
                        await _rollback_quietly(conn)
                        raise
                    try:
                        await conn.commit()
                    except SQLAlchemyError as exc:
                        raise StorageError(f"commit failed, outcome unknown: {exc}") from exc
                    except Exception as exc:
                        if not unreachable(exc):
                            raise
                        raise StorageError(
                            f"commit failed, outcome unknown: {unreachable_reason(exc)}"
                        ) from exc
                finally:
                    with contextlib.suppress(SQLAlchemyError, OSError):
                        await conn.close()
                self._committed(tx)
        except BaseException:
            if made is not None:
                made.forget()
            raise

    def _committed(self, tx: SQLTransaction) -> None:
        """A transaction on a pooled PostgreSQL connection committed: count it, wake."""
        if tx.wrote:
            self._commits += 1
        self._database.committed(tx.woke)

    async def _begin(self, conn: AsyncConnection) -> None:
        try:
            await conn.begin()
        except SQLAlchemyError as exc:
            raise StorageError(
                f"{self._where}: could not begin a transaction: {driver_reason(exc)}"
            ) from exc
        except Exception as exc:
            if not unreachable(exc):
                raise
            raise StorageError(
                f"{self._where}: could not begin a transaction: {unreachable_reason(exc)}"
            ) from exc

    async def _connect(self) -> AsyncConnection:
        try:
            return await self._engine.connect()
        except SQLAlchemyError as exc:
            raise StorageError(f"cannot open {self._where}: {driver_reason(exc)}") from exc
        except Exception as exc:
            if not unreachable(exc):
                raise
            raise StorageError(f"cannot open {self._where}: {unreachable_reason(exc)}") from exc

    def _writer_engine(self, conn: sqlite3.Connection) -> Engine:
        if self._sync_engine is None or self._sync_for is not conn:
            self._sync_engine, self._sync_for = writer_engine(conn), conn
        return self._sync_engine

    async def _on_writer(self, fn: Callable[[Engine], _T]) -> _T:
        """Run ``fn(engine)`` on the writer's connection, alone, on its worker thread."""
        writer = self._writer
        assert writer is not None
        async with writer.exclusive() as conn:
            engine = self._writer_engine(conn)
            return await writer.in_thread(
                with_busy_timeout, conn, self._busy_timeout_ms, partial(fn, engine)
            )

    async def migrate(self) -> None:
        """Upgrade the schema to the newest migration (creating it if needed).

        Safe to run concurrently from several processes: SQLite serialises it with
        ``BEGIN IMMEDIATE``, PostgreSQL with an advisory lock. A schema that a newer
        version already migrated is left alone when it is backward-compatible with this
        version (see `schema_status`), and refused otherwise.

        Raises:
            StorageError: The database failed, or its schema is newer and incompatible.
        """
        # Another process migrating the same SQLite file holds the write lock for longer
        # than the busy timeout meant for short transactions: wait for it, a while.
        deadline = time.monotonic() + MIGRATION_WAIT_SECONDS
        while True:
            try:
                if self._writer is not None:
                    await self._on_writer(migrate_sync)
                    return
                async with self._lock, self._engine.begin() as conn:
                    await self._database.lock_migrations(conn)
                    await conn.run_sync(migrate_on)
                return
            except OperationalError as exc:
                if not self._database.busy(exc) or time.monotonic() > deadline:
                    raise StorageError(
                        f"migrating {self._where} failed: {driver_reason(exc)}"
                    ) from exc
                await asyncio.sleep(0.1)
            except SQLAlchemyError as exc:
                raise StorageError(f"migrating {self._where} failed: {driver_reason(exc)}") from exc
            except OpenFailed as exc:
                if "locked" not in exc.reason or time.monotonic() > deadline:
                    raise StorageError(f"migrating {self._where} failed: {exc.reason}") from exc
                await asyncio.sleep(0.1)
            except Exception as exc:
                if not unreachable(exc):
                    raise
                raise StorageError(
                    f"migrating {self._where} failed: {unreachable_reason(exc)}"
                ) from exc

    async def schema_revision(self) -> str | None:
        """The migration revision the database is at; None for an empty database."""
        heads = await self._current_heads()
        return heads[0] if heads else None

    async def migrations_current(self) -> bool:
        """Whether the database is at the newest migration."""
        heads = await self._current_heads()
        return set(heads) == {SCHEMA_HEAD}

    async def _read_schema(self, fn: Callable[[Connection], _T]) -> _T:
        if self._writer is not None:
            return await self._on_writer(partial(reading, fn=fn))
        async with self._lock, self._engine.connect() as conn:
            return await conn.run_sync(fn)

    async def _current_heads(self) -> tuple[str, ...]:
        try:
            return await self._read_schema(read_heads)
        except SQLAlchemyError as exc:
            raise StorageError(
                f"could not read the schema revision of {self._where}: {driver_reason(exc)}"
            ) from exc
        except Exception as exc:
            if not unreachable(exc):
                raise
            raise StorageError(
                f"could not read the schema revision of {self._where}: {unreachable_reason(exc)}"
            ) from exc

    async def schema_status(self) -> SchemaStatus:
        """Where the database's schema stands against the migrations this code ships.

        A schema newer than the code is usable when every migration after the code's
        newest one declared itself backward-compatible (``backward_compatible = True``
        in its module: it only adds what older code can ignore), as recorded in the
        ``schema_revisions`` table by whichever version ran it.

        Raises:
            StorageError: The database cannot be read.
        """
        try:
            return await self._read_schema(read_schema_status)
        except SQLAlchemyError as exc:
            raise StorageError(f"could not read the schema revision: {exc}") from exc
        except Exception as exc:
            if not unreachable(exc):
                raise
            raise StorageError(
                f"could not read the schema revision: {unreachable_reason(exc)}"
            ) from exc

    async def listen(
        self,
        on_wake: Callable[[frozenset[str]], object],
        stop: asyncio.Event,
        *,
        retry_seconds: float = 1.0,
        local: frozenset[str] = frozenset(),
        on_listening: Callable[[bool], object] | None = None,
    ) -> None:
        """Report wake-ups (work a commit made ready) until `stop` is set.

        Holds one connection (to the listen URL, see `from_url`; not one of the pool's)
        that ``LISTEN``s on `WAKE_CHANNEL`; every ``NOTIFY`` a
        committed transaction sent (see `SQLTransaction.flush`) calls `on_wake` with
        what became ready (`WAKE_RUNS`, `WAKE_OUTBOX`). A lost connection is opened
        again after `retry_seconds`, and `on_wake` is then called with everything, for
        what was missed meanwhile. On SQLite only this store's own commits are heard
        (another process's are found by polling): `on_wake` is called as each commits.

        Args:
            on_wake: Told what became ready.
            stop: Set to stop listening.
            retry_seconds: How long to wait before opening a lost connection again.
            local: The kinds this process acts on itself while it listens (e.g.
                `WAKE_OUTBOX` where an outbox loop runs): this store's commits tell
                `on_wake` of them in-process and leave them out of their ``NOTIFY``,
                so they wake no other replica (which finds them by polling, should
                this process die first).
            on_listening: Told True when the ``LISTEN`` holds and False when it is
                lost (PostgreSQL; on SQLite never: polling alone finds other
                processes' work). A `runtime.worker.Pace` polls seldom meanwhile.
        """
        await self._database.listen(
            on_wake, stop, retry_seconds, local=local, on_listening=on_listening
        )

    async def close(self) -> None:
        """Close the writer's connection (SQLite) and every pooled connection."""
        if self._writer is not None:
            await self._writer.close()
        self._sync_engine = self._sync_for = None
        await self._engine.dispose()
        if self._listen_engine is not None:
            await self._listen_engine.dispose()


def check_directory(url: URL) -> None:
    """Refuse a SQLite file whose directory does not exist (SQLite would not create it)."""
    database = url.database
    if not database or database == ":memory:" or database.startswith("file:"):
        return
    directory = Path(database).expanduser().absolute().parent
    if not directory.is_dir():
        raise ValueError(
            f"the directory {directory} of the SQLite database {database} does not exist"
        )


async def _rollback_quietly(conn: AsyncConnection) -> None:
    # The original exception matters more than a failed rollback; a connection that
    # cannot roll back is discarded instead of going back to the pool.
    try:
        await conn.rollback()
    except SQLAlchemyError:
        with contextlib.suppress(SQLAlchemyError):
            await conn.invalidate()
