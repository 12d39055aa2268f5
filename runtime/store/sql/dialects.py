"""What differs between SQLite and PostgreSQL, one small subclass each.

A transaction (`SQLTransaction`) takes from its subclass the statements only one
database has (``INSERT ... ON CONFLICT`` of its dialect, ``FOR UPDATE SKIP LOCKED``)
and what it does about concurrent transactions; the store (`SQLStore`) takes from a
`Database` how transactions of one process queue, how migrations are serialised and how
wake-ups are heard, and PostgreSQL's engines from `postgres_engines`.

Behind a pooler in transaction mode (PgBouncer's ``pool_mode = transaction``) each
transaction may run on another server connection, so nothing may outlive a transaction
on one: what the store relies on is transaction-scoped already
(``pg_advisory_xact_lock``, row locks, ``NOTIFY``, which is sent at commit), asyncpg's
statements are unnamed and parsed again for each execution, and ``LISTEN``, which holds a
session, uses a connection of its own (`PoolOptions`, ``listen_url``).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from abc import ABC, abstractmethod
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any, Literal, assert_never

from sqlalchemy import bindparam, select, text, update
from sqlalchemy.engine import URL, Dialect, make_url
from sqlalchemy.exc import OperationalError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine
from sqlalchemy.pool import NullPool

from runtime.domain.errors import StorageError
from runtime.store.schema import runs
from runtime.store.sql.postgres_direct import DirectConnection
from runtime.store.sql.runs import CLAIM_RETURNING, CLAIMABLE, CLAIMED, StoredRuns
from runtime.store.sql.sqlite_writer import Member
from runtime.store.sql.transaction import SQLTransaction
from runtime.store.sql.upserts import Upserts, build_upserts
from runtime.store.sql.wake import NOTIFY, WAKE_CHANNEL, listen_for_wakeups, notify_payload

log = logging.getLogger("signoff.store")

HORIZON_WAIT_SECONDS = 5.0
"""How long the audit waits for transactions writing events (PostgreSQL)."""
# The last number the events' sequence handed out, committed or not (NULL: none yet).
_EVENTS_LAST_SEQ = text(
    "SELECT pg_sequence_last_value(pg_get_serial_sequence('events', 'seq')::regclass)"
)
# The transactions (other than this one) that hold the ROW EXCLUSIVE lock an INSERT into
# events takes from before it draws its numbers until it ends. pg_locks is read, no lock
# is taken: writers are never held up by a reader.
_EVENT_WRITERS = text(
    "SELECT virtualtransaction FROM pg_locks "
    "WHERE locktype = 'relation' AND mode = 'RowExclusiveLock' AND granted "
    "AND database = (SELECT oid FROM pg_database WHERE datname = current_database()) "
    "AND relation = 'events'::regclass AND pid <> pg_backend_pid()"
)
_STILL_WRITING = text(
    "SELECT count(*) FROM pg_locks "
    "WHERE locktype = 'relation' AND mode = 'RowExclusiveLock' AND granted "
    "AND database = (SELECT oid FROM pg_database WHERE datname = current_database()) "
    "AND relation = 'events'::regclass AND virtualtransaction = ANY(:writers)"
)

# Any constant works; it only has to be the same in every replica.
_PG_MIGRATION_LOCK = 0x5169_0FF
_RUN_LOCK = select(runs.c.run_id).where(runs.c.run_id == bindparam("run_id")).with_for_update()
# A run another transaction has locked (being claimed, or decided) is passed over at once
# instead of waited for; the loser would find it claimed anyway.
_CLAIM_SKIP_LOCKED = (
    update(runs)
    .where(
        runs.c.run_id
        == select(runs.c.run_id)
        .where(runs.c.run_id == bindparam("b_run_id"), CLAIMABLE)
        .with_for_update(skip_locked=True)
        .scalar_subquery()
    )
    .values(CLAIMED)
)


@functools.cache
def _sqlite_upserts() -> Upserts:
    from sqlalchemy.dialects import sqlite

    return build_upserts(sqlite.insert)


@functools.cache
def _postgres_upserts() -> Upserts:
    # Imported here: a process on SQLite never loads PostgreSQL's dialect.
    from sqlalchemy.dialects import postgresql

    return build_upserts(postgresql.insert)


class SQLiteTransaction(SQLTransaction):
    """A transaction on SQLite, which serialises writers with ``BEGIN IMMEDIATE``: it
    holds the write lock from its start, so it needs no row locks."""

    claim_returning = CLAIM_RETURNING

    def _upserts(self) -> Upserts:
        return _sqlite_upserts()

    async def _lock_run(self, run_id: str) -> None:
        pass

    async def _notify(self, wake: frozenset[str]) -> None:
        pass  # the store tells its own listeners once this commits


class PostgresTransaction(SQLTransaction):
    """A transaction on PostgreSQL, which runs transactions concurrently: row locks
    serialise what must be, and ``NOTIFY`` wakes the other replicas."""

    claim_returning = _CLAIM_SKIP_LOCKED.returning(*runs.c)
    multi_row_insert = True

    quiet: frozenset[str] = frozenset()
    """What this process acts on itself (`PostgreSQL.local`): not sent to the others."""

    def _upserts(self) -> Upserts:
        return _postgres_upserts()

    async def _lock_run(self, run_id: str) -> None:
        await self._execute(_RUN_LOCK, {"run_id": run_id})

    async def _notify(self, wake: frozenset[str]) -> None:
        # Delivered at commit, and never if the transaction rolls back.
        payload = notify_payload(wake, self.quiet)
        if payload is None:
            return
        if self._direct is not None:
            await self._send_writes((WAKE_CHANNEL, payload))
        else:
            await self._execute(NOTIFY, {"channel": WAKE_CHANNEL, "payload": payload})

    async def _events_horizon(self) -> int:
        # The sequence's last number first, then who writes events: every transaction
        # that drew a number up to it has ended or is among them (see
        # `runtime.store.sql.audit`). Only those are waited for, by looking, not locking.
        last = (await self._execute(_EVENTS_LAST_SEQ)).one()[0]
        writers = [str(w) for w in (await self._execute(_EVENT_WRITERS)).scalars()]
        pause = 0.002
        deadline = asyncio.get_running_loop().time() + HORIZON_WAIT_SECONDS
        while writers:
            still = (await self._execute(_STILL_WRITING, {"writers": writers})).one()[0]
            if not still:
                break
            if asyncio.get_running_loop().time() >= deadline:
                raise StorageError(
                    f"events are still being written after {HORIZON_WAIT_SECONDS:g} s; try again"
                )
            await asyncio.sleep(pause)
            pause = min(pause * 2, 0.05)
        return int(last or 0)


class Database(ABC):
    """What a `SQLStore` does differently on one database."""

    transaction: type[SQLTransaction]
    """The transactions of this database."""

    @abstractmethod
    def lock(self) -> AbstractAsyncContextManager[Any]:
        """What a transaction of this process holds while it runs on a pooled connection."""

    @abstractmethod
    async def lock_migrations(self, conn: AsyncConnection) -> None:
        """Serialise migrations of several processes, in the migrating transaction."""

    @abstractmethod
    def busy(self, exc: OperationalError) -> bool:
        """Whether a migration failed only because another process holds the database."""

    @functools.cached_property
    def stored_runs(self) -> StoredRuns:
        """What this store's transactions last wrote to its runs' rows (see `StoredRuns`)."""
        return StoredRuns()

    def open_transaction(
        self, conn: AsyncConnection | Member | DirectConnection, dialect: Dialect
    ) -> SQLTransaction:
        """A new transaction of this database on `conn` (see `SQLStore.transaction`)."""
        tx = self.transaction(conn, dialect)
        tx.stored = self.stored_runs
        return tx

    @abstractmethod
    def committed(self, woke: frozenset[str]) -> None:
        """A transaction of this store committed, making `woke` ready."""

    @abstractmethod
    async def listen(
        self,
        on_wake: Callable[[frozenset[str]], object],
        stop: asyncio.Event,
        retry: float,
        *,
        local: frozenset[str] = frozenset(),
        on_listening: Callable[[bool], object] | None = None,
    ) -> None:
        """Report wake-ups until `stop` is set (see `SQLStore.listen`)."""


class SQLite(Database):
    """One file shared by a few processes, each hearing only its own commits."""

    transaction = SQLiteTransaction

    def __init__(self) -> None:
        self._listeners: list[Callable[[frozenset[str]], object]] = []

    def lock(self) -> AbstractAsyncContextManager[Any]:
        # Transactions of one process queue in memory instead of fighting over the file.
        return asyncio.Lock()

    async def lock_migrations(self, conn: AsyncConnection) -> None:
        pass  # BEGIN IMMEDIATE took the write lock

    def busy(self, exc: OperationalError) -> bool:
        return "locked" in str(exc.orig)

    def committed(self, woke: frozenset[str]) -> None:
        """Tell this process's listeners what a commit of this store made ready."""
        if not woke:
            return
        for on_wake in list(self._listeners):
            try:
                on_wake(woke)
            except Exception:  # a listener's bug must not fail a committed transaction
                log.exception("a wake-up listener failed")

    async def listen(
        self,
        on_wake: Callable[[frozenset[str]], object],
        stop: asyncio.Event,
        retry: float,
        *,
        local: frozenset[str] = frozenset(),
        on_listening: Callable[[bool], object] | None = None,
    ) -> None:
        # Another process's commits are found by polling: never listening, in `Pace`'s
        # terms. Every kind is told in-process, `local` or not.
        self._listeners.append(on_wake)
        try:
            await stop.wait()
        finally:
            self._listeners.remove(on_wake)


class PostgreSQL(Database):
    """A server that replicas share, telling each other of commits with ``NOTIFY``.

    Args:
        listen: The engine of the ``LISTEN`` connection (see `postgres_engines`).
    """

    transaction = PostgresTransaction

    def __init__(self, listen: AsyncEngine) -> None:
        self._listen = listen
        self._here: list[tuple[Callable[[frozenset[str]], object], frozenset[str], asyncio.Event]]
        self._here = []
        """The listeners of this process with the kinds each acts on, until its stop."""

    def local(self) -> frozenset[str]:
        """What a listener of this process acts on itself (its ``local`` kinds), so that
        this process's commits do not wake the other replicas for it."""
        kinds: frozenset[str] = frozenset()
        for _on_wake, handled, stop in self._here:
            if not stop.is_set():
                kinds |= handled
        return kinds

    def open_transaction(
        self, conn: AsyncConnection | Member | DirectConnection, dialect: Dialect
    ) -> SQLTransaction:
        tx = PostgresTransaction(conn, dialect)
        tx.stored = self.stored_runs
        tx.quiet = self.local()
        return tx

    def lock(self) -> AbstractAsyncContextManager[Any]:
        return contextlib.nullcontext()

    async def lock_migrations(self, conn: AsyncConnection) -> None:
        await conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _PG_MIGRATION_LOCK})

    def busy(self, exc: OperationalError) -> bool:
        return False

    def committed(self, woke: frozenset[str]) -> None:
        """Tell this process's listeners of the local kinds a commit made ready (the
        transaction's ``NOTIFY`` told every listener of the others)."""
        for on_wake, handled, stop in list(self._here):
            mine = woke & handled
            if mine and not stop.is_set():
                try:
                    on_wake(mine)
                except Exception:  # a listener's bug must not fail a committed transaction
                    log.exception("a wake-up listener failed")

    async def listen(
        self,
        on_wake: Callable[[frozenset[str]], object],
        stop: asyncio.Event,
        retry: float,
        *,
        local: frozenset[str] = frozenset(),
        on_listening: Callable[[bool], object] | None = None,
    ) -> None:
        here = (on_wake, local, stop)
        self._here.append(here)
        try:
            await listen_for_wakeups(self._listen, on_wake, stop, retry, on_listening)
        finally:
            self._here.remove(here)


def database_of(engine: AsyncEngine, listen: AsyncEngine | None = None) -> Database:
    """What the store does differently on the database of `engine`.

    Args:
        engine: The engine of the store's transactions.
        listen: PostgreSQL: the engine of the ``LISTEN`` connection (default: `engine`).

    Raises:
        StorageError: The store does not run on this database.
    """
    match engine.dialect.name:
        case "sqlite":
            return SQLite()
        case "postgresql":
            return PostgreSQL(listen if listen is not None else engine)
        case other:
            raise StorageError(f"signoff's store runs on SQLite and PostgreSQL, not {other}")


Pooler = Literal["none", "transaction"]
"""What stands between the store and PostgreSQL: ``none`` (the server itself, or a pooler
in session mode) or ``transaction`` (a pooler in transaction mode, e.g. PgBouncer's
``pool_mode = transaction``)."""
POOLERS: tuple[Pooler, ...] = ("none", "transaction")


@dataclass(frozen=True)
class PoolOptions:
    """How many connections a PostgreSQL store keeps, and for how long.

    A store holds at most ``size + max_overflow`` connections for its transactions, and
    one more while it listens for wake-ups (`SQLStore.listen`). Connections are opened
    as transactions need them; up to `size` of them are then kept.

    Attributes:
        size: Connections kept open in the pool once opened. The default keeps every
            connection it may open: one opened and closed again per burst costs the
            server a new process and the store its prepared statements.
        max_overflow: Connections opened beyond `size` when all are busy, closed again
            when returned.
        timeout_seconds: How long a transaction waits for a free connection before it
            fails with `StorageError`.
        recycle_seconds: A connection older than this is closed and opened anew when
            next taken (for servers, poolers and firewalls that drop idle connections);
            None keeps connections for ever.
    """

    size: int = 15
    max_overflow: int = 0
    timeout_seconds: float = 30.0
    recycle_seconds: int | None = 1800

    def __post_init__(self) -> None:
        if self.size < 1:
            raise ValueError(f"the pool size must be at least 1, not {self.size}")
        if self.max_overflow < 0:
            raise ValueError(f"max_overflow cannot be negative, not {self.max_overflow}")
        if not self.timeout_seconds > 0:
            raise ValueError(f"the pool timeout must be positive, not {self.timeout_seconds}")
        if self.recycle_seconds is not None and not self.recycle_seconds > 0:
            raise ValueError(
                f"recycle_seconds must be positive (or None: never), not {self.recycle_seconds}"
            )


def _unnamed() -> str:
    # The empty name is PostgreSQL's unnamed statement, which the next Parse replaces; with
    # asyncpg's statement cache off asyncpg parses it again at each execution, so no
    # statement is left on a server connection a pooler hands to another client.
    return ""


def async_postgres_url(url: str | URL) -> URL:
    """`url` with the asyncpg driver when it names none (``postgresql://``, ``postgres://``)."""
    parsed = make_url(url)
    if parsed.drivername in ("postgresql", "postgres"):
        parsed = parsed.set(drivername="postgresql+asyncpg")
    return parsed


def postgres_engines(
    url: URL,
    *,
    pool: PoolOptions,
    pooler: Pooler,
    listen_url: str | URL | None,
    echo: bool,
) -> tuple[AsyncEngine, AsyncEngine]:
    """The engines of a PostgreSQL store: its transactions', and its ``LISTEN`` connection's.

    Args:
        url: The database, possibly through a pooler.
        pool: How many connections the transactions' engine keeps.
        pooler: What stands between `url` and the server.
        listen_url: Where the ``LISTEN`` connection goes; None: `url`. Required with a
            pooler in transaction mode, which would hand the listening session to others.
        echo: Log every statement.

    Raises:
        ValueError: `listen_url` is missing, or is not PostgreSQL.
    """
    connect_args: dict[str, Any]
    match pooler:
        case "none":
            connect_args = {}
        case "transaction":
            if listen_url is None:
                raise ValueError(
                    "a pooler in transaction mode cannot LISTEN: give a listen URL that "
                    "reaches PostgreSQL directly (or through a pooler in session mode)"
                )
            connect_args = {
                "statement_cache_size": 0,
                "prepared_statement_cache_size": 0,
                "prepared_statement_name_func": _unnamed,
            }
        case _:
            assert_never(pooler)
    target = async_postgres_url(listen_url) if listen_url is not None else url
    if target.get_backend_name() != "postgresql":
        raise ValueError(f"the listen URL must be PostgreSQL's, not {target.get_backend_name()}")
    engine = create_async_engine(
        url,
        echo=echo,
        pool_size=pool.size,
        max_overflow=pool.max_overflow,
        pool_timeout=pool.timeout_seconds,
        pool_recycle=-1 if pool.recycle_seconds is None else pool.recycle_seconds,
        connect_args=connect_args,
    )
    # Not pooled: the connection is held for as long as the store listens, and a session
    # that listened is never handed to anything else.
    listen = create_async_engine(target, echo=echo, poolclass=NullPool)
    return engine, listen
