"""SQLite without a thread round trip per statement, and with group commit.

A store on a SQLite file keeps one `sqlite3` connection for its transactions, and runs
them one at a time (`SQLiteWriter`). Statements run right on the event loop's thread:
with the write lock held and the pages in memory, one takes microseconds, less than a
hand-over to another thread would. What can take long runs on the store's own worker
thread instead, so the event loop never waits on the disk or on another process:

- ``BEGIN IMMEDIATE`` when another process holds the write lock (a first try on the
  loop fails at once; the worker thread then waits up to the busy timeout);
- ``COMMIT`` of a transaction that wrote something (the ``fsync`` of the WAL);
- opening the file, which waits up to the busy timeout for another process's lock too
  (see `wait_for_locks`).

**Group commit.** Transactions that queue while one runs join the same SQLite
transaction, each inside its own ``SAVEPOINT`` (so a failing one rolls back alone); the
last of the queue commits them all with one ``COMMIT``, and each caller leaves its
``async with`` only once that commit is durable. Under concurrency a commit (and its
``fsync``) is shared by many transactions; one alone pays one. A transaction that only
read, and saw nothing uncommitted, does not wait for a commit.

Statements are SQLAlchemy Core constructs, compiled once each for SQLite (`Plan`): the
same statements the store runs on PostgreSQL, with SQLAlchemy's own conversion of each
column type (JSON, booleans), minus its per-statement execution machinery.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import queue
import sqlite3
import threading
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, TypeVar, cast

from sqlalchemy.sql import ClauseElement, Executable
from sqlalchemy.sql.dml import UpdateBase

from runtime.domain.errors import StorageError
from runtime.store.sql.plans import Plan, Rows, compile_plan
from runtime.store.sql.sqlite_plans import OpenFailed, sqlite_dialect

_T = TypeVar("_T")

log = logging.getLogger("signoff.store")

_GROUP_MEMBERS = 128
"""At most this many transactions share a commit..."""
_GROUP_SECONDS = 0.02
"""...and a commit waits at most this long for transactions still queueing."""
_PLAN_CACHE = 512
_LOCK_PAUSE_SECONDS = (0.001, 0.05)
"""First and longest pause between two tries of a statement SQLite refused at once
because another connection holds a lock (see `wait_for_locks`)."""


# --- the connection --------------------------------------------------------------------


@dataclass
class _Group:
    """One SQLite transaction shared by the transactions that joined it."""

    committed: asyncio.Future[None]
    opened: float
    task: asyncio.Task[Any] | None
    """The task of the first member."""
    members: int = 0
    wrote: bool = False


@dataclass
class Member:
    """One transaction's view of the shared connection.

    Attributes:
        wrote: Set by the transaction when it changed something: it then waits for the
            commit.
    """

    writer: SQLiteWriter
    conn: sqlite3.Connection
    wrote: bool = False

    def execute(
        self, statement: Executable, params: Mapping[str, Any] | Sequence[Mapping[str, Any]] | None
    ) -> Rows:
        """Run one statement (or one per parameter set, for a list of them).

        Raises:
            sqlite3.Error: From the database.
            ValueError: A value its column type cannot store.
        """
        return self.writer.execute(self.conn, statement, params)


def _is_busy(exc: sqlite3.Error) -> bool:
    text = str(exc).lower()
    return "locked" in text or "busy" in text


async def _outlast(future: asyncio.Future[Any]) -> bool:
    """Wait until `future` is done, even if this task is cancelled meanwhile.

    What runs on the worker thread uses the connection: nothing else may use it, and the
    lock must not pass on, until it has finished.

    Returns:
        Whether this task was cancelled meanwhile (the caller raises `CancelledError`
        once it has dealt with the outcome).
    """
    interrupted = False
    while not future.done():
        try:
            await asyncio.shield(future)
        except asyncio.CancelledError:
            interrupted = True
    return interrupted


async def _let_others_run() -> bool:
    """Yield the event loop once; whether this task was cancelled meanwhile (the caller
    finishes what it holds first, then raises `CancelledError`)."""
    try:
        await asyncio.sleep(0)
    except asyncio.CancelledError:
        return True
    return False


async def _settle(future: asyncio.Future[_T]) -> _T:
    """Await `future` to its end even if this task is cancelled meanwhile (then re-raise)."""
    if await _outlast(future):
        future.exception()  # retrieved: the cancellation is what the caller sees
        raise asyncio.CancelledError
    return future.result()


_Job = tuple[Callable[..., Any], tuple[Any, ...], asyncio.AbstractEventLoop, "asyncio.Future[Any]"]


def _deliver(future: asyncio.Future[Any], error: BaseException | None, result: Any) -> None:
    if future.done():
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)


def _work(jobs: queue.SimpleQueue[_Job | None]) -> None:
    """The worker thread: run each job, hand its outcome to its event loop."""
    while (job := jobs.get()) is not None:
        fn, args, loop, future = job
        try:
            result, error = fn(*args), None
        except BaseException as exc:  # handed over, raised in the caller
            result, error = None, exc
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
            loop.call_soon_threadsafe(_deliver, future, error, result)
        del job, fn, args, loop, future, result, error


def _commit_unwritten(conn: sqlite3.Connection) -> sqlite3.Error | None:
    """End a transaction that wrote nothing (no sync, just the lock released); what
    failed, if anything."""
    try:
        conn.commit()
    except sqlite3.Error as exc:
        return exc
    return None


class SQLiteWriter:
    """The connection a SQLite store's transactions share, and their group commit.

    Args:
        open_connection: Opens the `sqlite3` connection (called on the worker thread).
        busy_timeout_ms: How long ``BEGIN IMMEDIATE`` waits for another process's lock.
        where: Names the database in messages.
    """

    def __init__(
        self,
        open_connection: Callable[[], sqlite3.Connection],
        *,
        busy_timeout_ms: int,
        where: str,
    ) -> None:
        self._open = open_connection
        self._busy_timeout_ms = busy_timeout_ms
        self._where = where
        self._dialect = sqlite_dialect()
        self._lock = asyncio.Lock()
        self._waiting = 0
        # The task whose transaction was the last group, alone (see `_quiet`).
        self._last_alone: asyncio.Task[Any] | None = None
        self._conn: sqlite3.Connection | None = None
        self._group: _Group | None = None
        self._jobs: queue.SimpleQueue[_Job | None] | None = None
        self._thread: threading.Thread | None = None
        self._finishers: set[asyncio.Task[None]] = set()
        self._plans: dict[tuple[int, tuple[str, ...]], tuple[ClauseElement, Plan]] = {}
        self.commits = 0
        """Transactions that wrote something and were committed."""
        self.syncs = 0
        """SQLite commits that wrote something (one per group)."""
        self.on_statement: Callable[[str, float], None] | None = None
        """Observer of every statement: its SQL and seconds (benchmarks trace with it)."""

    # -- statements ----------------------------------------------------------------------
    def plan(self, statement: ClauseElement, keys: Sequence[str]) -> Plan:
        """The compiled form of `statement`, cached for statements used again."""
        key = (id(statement), tuple(keys) if isinstance(statement, UpdateBase) else ())
        cached = self._plans.get(key)
        if cached is not None and cached[0] is statement:
            return cached[1]
        plan = compile_plan(statement, keys, self._dialect)
        if len(self._plans) >= _PLAN_CACHE:
            self._plans.clear()
        # The statement is kept with its plan: its id is only unique while it lives.
        self._plans[key] = (statement, plan)
        return plan

    def execute(
        self,
        conn: sqlite3.Connection,
        statement: Executable,
        params: Mapping[str, Any] | Sequence[Mapping[str, Any]] | None,
    ) -> Rows:
        """Run `statement` on `conn`, on this thread."""
        assert isinstance(statement, ClauseElement)
        began = time.perf_counter() if self.on_statement is not None else 0.0
        if type(params) is list:
            if not params:
                return Rows([], 0)
            plan = self.plan(statement, params[0])
            cursor = conn.executemany(plan.sql, [plan.parameters(p) for p in params])
            rows: list[Any] = []
        else:
            given = cast(Mapping[str, Any], params or {})
            plan = self.plan(statement, given)  # type: ignore[arg-type]
            if plan.expanding:
                cursor = conn.execute(*plan.expand(given))
            else:
                cursor = conn.execute(plan.sql, plan.parameters(given))
            rows = []
            if cursor.description:
                if plan.row is None:
                    plan.learn_returning(cursor.description, self._dialect)
                rows = plan.read(cursor.fetchall())
        result = Rows(rows, cursor.rowcount)
        cursor.close()
        if self.on_statement is not None:
            self.on_statement(plan.sql, time.perf_counter() - began)
        return result

    # -- transactions ------------------------------------------------------------------
    @asynccontextmanager
    async def member(self) -> AsyncIterator[Member]:
        """Join (or open) the shared SQLite transaction, for one transaction.

        Leaving normally releases this transaction's savepoint and, if it wrote (or read
        what others wrote and had not committed yet), waits until the shared transaction
        is committed. Leaving by an exception rolls back this transaction's work only.

        Raises:
            StorageError: The database could not be opened, a transaction not begun, or
                the commit failed (its outcome is then unknown).
        """
        await self._acquire()
        group: _Group | None = None
        wait = False
        member: Member | None = None
        try:
            conn = await self._connection()
            group = self._group
            if group is None:
                await self._begin(conn)
                group = self._group = _Group(
                    asyncio.get_running_loop().create_future(),
                    time.monotonic(),
                    asyncio.current_task(),
                )
            saw_writes = group.wrote
            # The first member's work is the whole transaction: it needs no savepoint.
            alone = group.members == 0
            if not alone:
                self._sql(conn, "SAVEPOINT member")
            member = Member(self, conn)
            try:
                yield member
            except BaseException as exc:
                self._undo(conn, group, exc, alone=alone)
                raise
            if not alone:
                self._sql(conn, "RELEASE member")
            group.members += 1
            group.wrote = group.wrote or member.wrote
            wait = member.wrote or saw_writes
        except BaseException:
            self._pass_on(commit_here=False)
            raise
        assert group is not None and member is not None
        interrupted = False
        if wait and self._waiting == 0:
            # About to commit alone: first let what is ready run (a request just read
            # from a socket, a task woken by the last commit). Without this a task
            # making transaction after transaction never yields the event loop, and
            # what it starves cannot queue here to share the commit.
            interrupted = await _let_others_run()
        if self._pass_on(commit_here=wait):
            # Nobody else is queued: commit here, without a task in between.
            await self._finish(group, release=True)
        if wait:
            try:
                await asyncio.shield(group.committed)
            except sqlite3.Error as exc:
                raise StorageError(f"commit failed, outcome unknown: {exc}") from exc
            if member.wrote:
                self.commits += 1
        if interrupted:
            raise asyncio.CancelledError

    @asynccontextmanager
    async def exclusive(self) -> AsyncIterator[sqlite3.Connection]:
        """The connection alone, with no transaction open (for migrations).

        Raises:
            StorageError: The database could not be opened, or an earlier group's commit
                failed.
        """
        await self._acquire()
        try:
            if self._group is not None:
                await self._finish(self._group, release=False)
            yield await self._connection()
        finally:
            self._lock.release()

    async def in_thread(self, fn: Callable[..., _T], *args: Any) -> _T:
        """Run ``fn(*args)`` on the worker thread, to its end even if cancelled."""
        return await _settle(self._submit(fn, *args))

    def _submit(self, fn: Callable[..., _T], *args: Any) -> asyncio.Future[_T]:
        if self._jobs is None or self._thread is None:
            self._jobs = queue.SimpleQueue()
            self._thread = threading.Thread(
                target=_work, args=(self._jobs,), name="signoff-sqlite", daemon=True
            )
            self._thread.start()
        loop = asyncio.get_running_loop()
        future: asyncio.Future[_T] = loop.create_future()
        self._jobs.put((fn, args, loop, future))
        return future

    async def close(self) -> None:
        """Commit what is open, close the connection and stop the worker thread."""
        if self._conn is not None:
            async with self.exclusive():
                conn, self._conn = self._conn, None
                if conn is not None:
                    conn.close()
        for task in list(self._finishers):
            with contextlib.suppress(Exception):
                await task
        jobs, thread = self._jobs, self._thread
        self._jobs = self._thread = None
        if jobs is not None and thread is not None:
            jobs.put(None)
            await asyncio.to_thread(thread.join)

    # -- inside ---------------------------------------------------------------------------
    async def _acquire(self) -> None:
        self._waiting += 1
        try:
            await self._lock.acquire()
        except asyncio.CancelledError:
            self._waiting -= 1
            if self._group is not None and not self._lock.locked() and self._waiting == 0:
                # Whoever ran last left the group open for this waiter: commit it.
                self._spawn_finish(self._group)
            raise
        self._waiting -= 1

    def _pass_on(self, *, commit_here: bool) -> bool:
        """Let the next transaction in, or end the group; True: the caller commits it.

        The lock stays held when this returns True (the caller's `_finish` releases it).
        """
        group = self._group
        if group is None:
            self._lock.release()
            return False
        if (
            self._waiting > 0
            and group.members < _GROUP_MEMBERS
            and time.monotonic() - group.opened < _GROUP_SECONDS
        ):
            self._lock.release()  # the next in the queue joins the group
            return False
        if commit_here:
            return True
        if not group.wrote:
            self._end_unwritten(group)
            return False
        self._spawn_finish(group, locked=True)
        return False

    def _end_unwritten(self, group: _Group) -> None:
        """End a group that wrote nothing here and now (no sync to wait for; the lock is
        held, and released)."""
        try:
            conn = self._conn
            assert conn is not None
            self._ended(group, conn, _commit_unwritten(conn))
        finally:
            self._lock.release()

    def _spawn_finish(self, group: _Group, *, locked: bool = False) -> None:
        async def finish() -> None:
            if not locked:
                await self._lock.acquire()
            if self._group is group:
                await self._finish(group, release=True)
            else:
                self._lock.release()

        task = asyncio.get_running_loop().create_task(finish())
        self._finishers.add(task)
        task.add_done_callback(self._finishers.discard)

    async def _finish(self, group: _Group, *, release: bool) -> None:
        """Commit (or end) the group; the lock is held, and released if `release`.

        Raises:
            StorageError: The commit failed (only when not `release`; otherwise the
                members see it).
        """
        interrupted = False
        try:
            conn = self._conn
            assert conn is not None
            failure: BaseException | None = None
            if group.wrote and self._quiet(group):
                try:
                    self._commit(conn)
                    self.syncs += 1
                except sqlite3.Error as exc:
                    failure = exc
            elif group.wrote:
                done = self._submit(self._commit, conn)
                interrupted = await _outlast(done)
                failure = done.exception()
                if failure is None:
                    self.syncs += 1
            else:
                failure = _commit_unwritten(conn)
            self._ended(group, conn, failure)
            if failure is not None and not release:
                raise StorageError(f"commit failed, outcome unknown: {failure}") from failure
        finally:
            if release:
                self._lock.release()
        if interrupted:
            raise asyncio.CancelledError

    def _ended(
        self, group: _Group, conn: sqlite3.Connection, failure: BaseException | None
    ) -> None:
        """The group's transaction is over: tell its members how it went."""
        self._group = None
        self._last_alone = group.task if group.members == 1 else None
        if failure is None:
            group.committed.set_result(None)
        else:
            self._rollback_quietly(conn)
            group.committed.set_exception(failure)
            group.committed.exception()  # those who wait see it; nobody else must

    def _quiet(self, group: _Group) -> bool:
        """Whether to commit on the event loop's thread rather than the worker's.

        When one task makes transactions one after another (this group and the one
        before were each one transaction of the same task, and none is queued), that
        task waits for this commit and nobody else uses the store: handing the commit to
        the worker thread and back would only add two thread wake-ups, which on a small
        virtual machine cost about as much as the commit itself. As soon as another task
        makes a transaction, commits go to the worker again: the event loop then runs
        the other tasks while the disk syncs, and their transactions queue up to share
        the next commit.
        """
        return (
            group.members == 1
            and self._waiting == 0
            and group.task is not None
            and group.task is self._last_alone
        )

    def _commit(self, conn: sqlite3.Connection) -> None:
        began = time.perf_counter() if self.on_statement is not None else 0.0
        conn.commit()
        if self.on_statement is not None:
            self.on_statement("COMMIT", time.perf_counter() - began)

    def _undo(
        self, conn: sqlite3.Connection, group: _Group, error: BaseException, *, alone: bool
    ) -> None:
        """Roll back one member's work; if SQLite rolled back everything, fail the group."""
        if alone:
            self._rollback_quietly(conn)
            self._group = None
            group.committed.set_result(None)  # nothing was done, nobody waits
            return
        if conn.in_transaction:
            try:
                self._sql(conn, "ROLLBACK TO member")
                self._sql(conn, "RELEASE member")
                return
            except sqlite3.Error:
                self._rollback_quietly(conn)
        # Some errors (a full disk, an I/O error) make SQLite roll back the whole
        # transaction: the members before this one lost their work too.
        self._group = None
        reason = (
            error
            if isinstance(error, sqlite3.Error)
            else sqlite3.OperationalError("the transaction was rolled back")
        )
        group.committed.set_exception(reason)
        group.committed.exception()

    @staticmethod
    def _rollback_quietly(conn: sqlite3.Connection) -> None:
        with contextlib.suppress(sqlite3.Error):
            conn.rollback()

    def _sql(self, conn: sqlite3.Connection, sql: str) -> None:
        conn.execute(sql).close()

    async def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            try:
                self._conn = await self.in_thread(self._open)
            except sqlite3.Error as exc:
                raise OpenFailed(self._where, str(exc)) from exc
        return self._conn

    async def _begin(self, conn: sqlite3.Connection) -> None:
        try:
            try:
                self._sql(conn, "BEGIN IMMEDIATE")
                return
            except sqlite3.OperationalError as exc:
                if not _is_busy(exc):
                    raise
            # Another process writes: wait for it on the worker thread, not here.
            try:
                await self.in_thread(_begin_waiting, conn, self._busy_timeout_ms)
            except asyncio.CancelledError:
                if conn.in_transaction:
                    self._rollback_quietly(conn)
                raise
        except sqlite3.Error as exc:
            raise StorageError(f"{self._where}: could not begin a transaction: {exc}") from exc


def _begin_waiting(conn: sqlite3.Connection, busy_timeout_ms: int) -> None:
    conn.execute(f"PRAGMA busy_timeout={int(busy_timeout_ms)}").close()
    try:
        conn.execute("BEGIN IMMEDIATE").close()
    finally:
        conn.execute("PRAGMA busy_timeout=0").close()


def wait_for_locks(
    conn: sqlite3.Connection, busy_timeout_ms: int, fn: Callable[[], _T], *, where: str
) -> _T:
    """Run ``fn()`` on `conn` (on a thread that may block), waiting up to the busy
    timeout while another connection holds a lock it needs; leave the busy timeout 0.

    SQLite's own busy handler waits for most locks, but where waiting could deadlock it
    refuses at once without calling it: e.g. ``PRAGMA journal_mode=WAL`` on a file not in
    WAL mode yet while another connection has begun writing, as when two processes open
    a new file at the same time. Such a refusal is tried again after a short pause,
    until the busy timeout has passed.

    Raises:
        sqlite3.Error: What ``fn`` raised; "database is locked" once the busy timeout
            has passed.
    """
    try:
        return fn()
    except sqlite3.OperationalError as exc:
        if not _is_busy(exc) or busy_timeout_ms <= 0:
            raise
    log.info(
        "%s is locked by another connection; waiting up to %.1fs for it",
        where,
        busy_timeout_ms / 1000,
    )
    deadline = time.monotonic() + busy_timeout_ms / 1000
    pause, longest = _LOCK_PAUSE_SECONDS
    conn.execute(f"PRAGMA busy_timeout={int(busy_timeout_ms)}").close()
    try:
        while True:
            try:
                return fn()
            except sqlite3.OperationalError as exc:
                left = deadline - time.monotonic()
                if not _is_busy(exc) or left <= 0:
                    raise
            time.sleep(min(pause, left))
            pause = min(pause * 2, longest)
    finally:
        conn.execute("PRAGMA busy_timeout=0").close()


def open_sqlite(
    args: Sequence[Any],
    options: Mapping[str, Any],
    *,
    synchronous: str,
    busy_timeout_ms: int = 0,
) -> sqlite3.Connection:
    """Open the transactions' connection: WAL, `synchronous`, foreign keys, no busy wait.

    Args:
        args: Positional arguments of `sqlite3.connect` (as SQLAlchemy makes them from
            the URL).
        options: Its keyword arguments.
        synchronous: ``full`` or ``normal``.
        busy_timeout_ms: How long opening waits for another connection's lock (see
            `wait_for_locks`).

    The busy timeout is 0 once open, because statements run on the event loop's thread:
    only ``BEGIN IMMEDIATE`` waits for other processes, and it does on the worker thread.
    """
    given = {**options, "timeout": 0, "isolation_level": None, "check_same_thread": False}
    conn: sqlite3.Connection = sqlite3.connect(*args, **given)
    where = str(args[0]) if args else "the database"

    def tune() -> None:
        conn.execute("PRAGMA journal_mode=WAL").close()
        conn.execute(f"PRAGMA synchronous={synchronous.upper()}").close()
        conn.execute("PRAGMA foreign_keys=ON").close()

    try:
        conn.execute("PRAGMA busy_timeout=0").close()
        wait_for_locks(conn, busy_timeout_ms, tune, where=where)
    except BaseException:
        conn.close()
        raise
    return conn
