"""PostgreSQL transactions run on asyncpg itself, each statement prepared once per connection.

SQLAlchemy's pool still hands out the connections: its size, overflow, timeouts and
recycling, and the JSON codecs its asyncpg dialect installs on each new connection. A
transaction of the store then runs on that connection's driver (`DirectConnection`):
``BEGIN``, its statements, ``COMMIT`` or ``ROLLBACK``, without SQLAlchemy's per-statement
machinery (the greenlet hand-over, the execution context, the result object). Each
statement is compiled once per store (`DirectPlans`, the same `Plan` that SQLite's writer
runs) and prepared once per server connection; later executions only bind and execute.

``BEGIN`` waits for the first statement that writes or locks rows: the plain reads before
it run on their own, and a transaction that only reads sends no ``BEGIN`` and no
``COMMIT`` (two round trips fewer). Under PostgreSQL's default isolation, read committed,
which the store uses, each statement of a transaction sees what was committed when it
started, so such a read sees the same as it would inside the transaction.

Writes whose outcome the store does not read (`DirectConnection.defer`: events, queued
notifications, new rows) wait and go with the next statement that must reach the server
(one statement: ``WITH w0 AS (INSERT ...), w1 AS (...) <statement>``), or with the
transaction's last one. A transaction whose writes all waited is one statement, without
``BEGIN`` and ``COMMIT`` (a statement is atomic by itself). All parts of such a statement
see the database as it was before it: a statement that reads or writes a table a
waiting write changes is never joined to it (the waiting writes go first), nor are two
writes of one table, except that a write may replace one still waiting (`rewrite`: a
tool call inserted and changed in one transaction is inserted as changed). Writes that
must change a row (`defer`'s ``check``) go with a statement whose rows are read: a
``SELECT`` of one row of ours, or an ``UPDATE ... RETURNING`` whose caller fails the
transaction without its row (the counts are added to the columns it returns). The
transaction's events, held back until its end, join any statement that takes waiting
writes.

Prepared statements live on one server connection, so this is only for stores that reach
PostgreSQL itself or a pooler in session mode; behind a pooler in transaction mode the
store runs its statements through SQLAlchemy with asyncpg's unnamed statements (see
`runtime.store.sql.dialects`).
"""

from __future__ import annotations

import collections
import functools
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager, suppress
from typing import Any, TypeVar, cast

from sqlalchemy.engine import Dialect
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.sql import ClauseElement, Executable

from runtime.domain.errors import StorageError
from runtime.store.sql.failures import (
    ConstraintViolated,
    driver_reason,
    unreachable,
    unreachable_reason,
)
from runtime.store.sql.plans import Plan, Rows, compile_plan
from runtime.store.sql.wake import NOTIFY

_T = TypeVar("_T")

_PLAN_CACHE = 512
"""Compiled statements a store keeps (a store runs a few dozen distinct ones)."""
_PREPARED_CACHE = 256
"""Prepared statements a connection keeps; more and the oldest are closed."""
_PREPARED = "signoff.prepared"
"""The key of a connection's prepared statements in its pool record (`info`)."""
_DEFERRED_PARAMETERS = 4096
"""Parameters of waiting writes past which they are sent (a statement takes 32767)."""
_PLACEHOLDER = re.compile(r"\$(\d+)")
_ALONE = ("WITH", "DELETE")
"""Statements never joined to waiting writes: those with a WITH of their own, and
deletes (a row a waiting write refers to could go before the reference is checked)."""
_RETURNING = " RETURNING "


@functools.lru_cache(maxsize=1024)
def _renumbered(sql: str, offset: int) -> str:
    """`sql` with its placeholders ``$n`` moved up by `offset` (to join it to others).

    The store's statements are SQLAlchemy's compilations: their only ``$`` are
    placeholders (values are never written into the text).
    """
    if not offset:
        return sql
    return _PLACEHOLDER.sub(lambda m: f"${int(m.group(1)) + offset}", sql)


class _Deferred:
    """A write waiting to be sent (see `DirectConnection.defer`)."""

    __slots__ = ("check", "key", "sql", "values")

    def __init__(self, sql: str, values: list[Any], check: str | None, key: object) -> None:
        self.sql = sql
        self.values = values
        self.check = check
        self.key = key


class DirectPlans:
    """The statements of one store, compiled once each for its PostgreSQL dialect.

    Args:
        dialect: The engine's dialect (asyncpg's, with its JSON serializer).
    """

    def __init__(self, dialect: Dialect) -> None:
        self.dialect = dialect
        self._plans: dict[tuple[int, tuple[str, ...]], tuple[ClauseElement, Plan]] = {}

    def plan(self, statement: ClauseElement, keys: Sequence[str]) -> Plan:
        """The plan of `statement`; `keys` name the parameters an INSERT or UPDATE sets."""
        key = (id(statement), tuple(keys))
        cached = self._plans.get(key)
        if cached is not None:
            return cached[1]
        plan = compile_plan(statement, keys, self.dialect)
        if len(self._plans) >= _PLAN_CACHE:
            self._plans.clear()
        # The statement is kept with its plan: its id is only unique while it lives.
        self._plans[key] = (statement, plan)
        return plan


def _rowcount(status: str | None) -> int:
    # "INSERT 0 3", "UPDATE 1", "DELETE 0", "SELECT 2"
    if not status:
        return -1
    last = status.rpartition(" ")[2]
    return int(last) if last.isdigit() else -1


class DirectConnection:
    """One transaction's connection: the driver's, taken from the pool by `SQLStore`.

    Args:
        plans: The store's compiled statements.
        driver: The asyncpg connection.
        prepared: The statements already prepared on this connection (kept with it in
            the pool), by SQL text.
    """

    def __init__(self, plans: DirectPlans, driver: Any, prepared: dict[str, Any]) -> None:
        self._plans = plans
        self._driver = driver
        self._prepared = prepared
        self._begun = False
        self._unsettled = False
        """A statement did not end normally: the connection may still be busy with it."""
        self._deferred: list[_Deferred] = []
        self._deferred_tables: set[str] = set()
        self._deferred_parameters = 0
        self._checked = False
        """A waiting write must change a row (`defer`'s ``check``)."""
        self._unchecked = False
        """Waiting writes that must change a row went with a statement that returned no
        row, so their counts were never read: the transaction must not commit."""
        self.gather: Callable[[], Awaitable[None]] | None = None
        """Queues what the transaction holds back (its events) as waiting writes, so that
        they go with a statement joined to the others (see `_gather`)."""
        self.gathers: str = ""
        """The table `gather` writes."""

    @property
    def broken(self) -> bool:
        """Whether the connection was lost (it must not go back to the pool)."""
        return bool(self._driver.is_closed())

    @property
    def begun(self) -> bool:
        """Whether ``BEGIN`` was sent (a statement wrote or locked rows)."""
        return self._begun

    async def begin(self) -> None:
        """Start the transaction (its ``BEGIN`` goes with its first write or lock)."""
        if self._driver.is_in_transaction():
            # Left open by a transaction that could not end (never expected: such a
            # connection is discarded); nothing of it may leak into this one.
            await self._driver.execute("ROLLBACK")

    async def commit(self) -> None:
        """Commit the transaction (its waiting writes were sent: `send_deferred`)."""
        if self._deferred:
            raise StorageError("writes of the transaction were never sent")
        if self._unchecked:
            raise StorageError("writes of the transaction that must change a row were not checked")
        if self._begun:
            await self._driver.execute("COMMIT")

    async def rollback(self) -> bool:
        """Roll the transaction back; whether the connection is fit for reuse after."""
        if self.broken:
            return False
        if not self._begun and not self._unsettled:
            return not self._driver.is_in_transaction()
        # After a statement cut short (cancelled, or failed) the ROLLBACK also shows
        # whether the connection is free again: asyncpg refuses it while the statement is
        # still being cancelled.
        try:
            await self._driver.execute("ROLLBACK")
        except Exception:  # any failure here: the connection is discarded, not reused
            return False
        return True

    async def defer(
        self,
        statement: ClauseElement,
        params: Mapping[str, Any] | Sequence[Mapping[str, Any]],
        *,
        table: str,
        check: str | None = None,
        key: object = None,
    ) -> None:
        """Queue a write of `table` whose outcome nobody reads: it is sent with the next
        statement that must reach the server, or the transaction's last (`send_deferred`).

        A constraint it breaks fails that statement, and so the transaction. The rows of
        a list of parameter sets are written in no particular order. With `check`, each
        must change one row, or the statement that sends it raises ``ValueError(check)``
        (such writes are sent inside ``BEGIN``: the failure rolls back what went with them).
        A `key` names the write for `rewrite` while it waits.

        Raises:
            ValueError: A value its column type cannot store (found now).
        """
        if table in self._deferred_tables or self._deferred_parameters > _DEFERRED_PARAMETERS:
            await self.send_deferred()
        for given in params if type(params) is list else [params]:
            given = cast(Mapping[str, Any], given)
            sql, values = self._bound(statement, given)
            self._deferred.append(_Deferred(sql, values, check, key))
            self._deferred_parameters += len(values)
        self._deferred_tables.add(table)
        self._checked = self._checked or check is not None

    def rewrite(self, key: object, statement: ClauseElement, params: Mapping[str, Any]) -> bool:
        """Put `statement` with `params` in the place of the waiting write named `key`;
        False when no such write waits (it was sent).

        Raises:
            ValueError: A value its column type cannot store.
        """
        for waiting in self._deferred:
            if waiting.key is not None and waiting.key == key:
                sql, values = self._bound(statement, params)
                self._deferred_parameters += len(values) - len(waiting.values)
                waiting.sql, waiting.values = sql, values
                return True
        return False

    def _bound(self, statement: ClauseElement, given: Mapping[str, Any]) -> tuple[str, list[Any]]:
        plan = self._plans.plan(statement, given)  # type: ignore[arg-type]
        if plan.expanding:
            return plan.expand_numbered(given)
        return plan.sql, plan.parameters(given)

    async def send_deferred(
        self, *, last: bool = False, notify: tuple[str, str] | None = None
    ) -> None:
        """Send the waiting writes now, with ``pg_notify(*notify)``.

        With `last`, nothing else follows in the transaction: when nothing was sent before
        that wrote, they go without ``BEGIN`` (one statement is atomic by itself).

        Raises:
            ConstraintViolated: A constraint of the database refused a row.
            ValueError: A write with a ``check`` changed no row.
        """
        if not self._deferred:
            if notify is not None:
                await self.execute(NOTIFY, {"channel": notify[0], "payload": notify[1]})
            return
        tail, values = "SELECT 1", []
        if notify is not None:
            tail, values = "SELECT pg_notify($1::VARCHAR, $2::VARCHAR)", list(notify)
        alone = last and not self._begun and not self._checked
        await self._settled(self._send(tail, values, begin=not alone))

    async def _send(self, tail: str, values: list[Any], *, begin: bool) -> None:
        if begin:
            await self._begin()
        await self._joined(tail, values)

    async def _joined(self, sql: str, values: Sequence[Any]) -> tuple[Any, list[Any]]:
        """Run `sql` (``$n`` placeholders, `values`) after the waiting writes, in one
        statement: the prepared statement that ran, and its rows.

        With writes that must change a row waiting, `sql` ends with the list of columns it
        returns (one of ours, a ``SELECT`` of one row and no table, or an ``UPDATE ...
        RETURNING`` whose caller fails the transaction without its row); their counts
        are added to that list, and taken off the rows returned.
        """
        parts = []
        joined: list[Any] = []
        checks: list[str] = []
        for number, waiting in enumerate(self._deferred):
            part = _renumbered(waiting.sql, len(joined))
            if waiting.check is not None:
                checks.append(waiting.check)
                part = f"{part} RETURNING 1" if " RETURNING " not in part else part
                sql = f"{sql}, (SELECT count(*) FROM w{number})"
            parts.append(f"w{number} AS ({part})")
            joined.extend(waiting.values)
        text = f"WITH {', '.join(parts)} {_renumbered(sql, len(joined))}"
        joined.extend(values)
        sent_to = frozenset(self._deferred_tables)
        self._deferred.clear()
        self._deferred_tables.clear()
        self._deferred_parameters = 0
        self._checked = False
        prepared = await self._prepare(text)
        try:
            rows = await prepared.fetch(*joined)
        except Exception as exc:
            import asyncpg  # type: ignore[import-untyped]

            if isinstance(exc, asyncpg.IntegrityConstraintViolationError):
                table = getattr(exc, "table_name", None)
                raise ConstraintViolated(str(exc), waiting=table in sent_to) from exc
            raise
        if checks:
            if not rows:
                self._unchecked = True
                return prepared, rows
            changed = list(rows[0])[-len(checks) :]
            for check, count in zip(checks, changed, strict=True):
                if count != 1:
                    raise ValueError(check)
            rows = [tuple(row)[: -len(checks)] for row in rows]
        return prepared, rows

    async def execute(
        self,
        statement: Executable,
        params: Mapping[str, Any] | Sequence[Mapping[str, Any]] | None,
        *,
        row_required: bool = False,
    ) -> Rows:
        """Run one statement (or one per parameter set, for a list of them).

        With `row_required` (an ``UPDATE ... RETURNING``), the caller fails the
        transaction when no row comes back: writes that must change a row may go with it.

        Raises:
            ConstraintViolated: A constraint of the database refused the row.
            ValueError: A value its column type cannot store.
            Exception: asyncpg's errors otherwise (the caller reports them).
        """
        assert isinstance(statement, ClauseElement)
        return await self._settled(self._run(statement, params, row_required))

    async def _settled(self, work: Awaitable[_T]) -> _T:
        """`work`'s result, with asyncpg's errors as the store raises them; until it ends
        normally the connection counts as busy with a statement (see `rollback`)."""
        self._unsettled = True
        try:
            result = await work
        except Exception as exc:
            translated = _translated(exc, self._prepared)
            if translated is exc:
                raise
            raise translated from exc
        self._unsettled = False
        return result

    async def _run(
        self,
        statement: ClauseElement,
        params: Mapping[str, Any] | Sequence[Mapping[str, Any]] | None,
        row_required: bool = False,
    ) -> Rows:
        if type(params) is list:
            if not params:
                return Rows([], 0)
            plan = self._plans.plan(statement, params[0])
            values_list = [plan.parameters(p) for p in params]
            await self._send_before()
            prepared = await self._prepare(plan.sql)
            await self._begin_before(plan)
            await prepared.executemany(values_list)
            return Rows([], -1)
        given = cast(Mapping[str, Any], params or {})
        plan = self._plans.plan(statement, given)  # type: ignore[arg-type]
        if plan.expanding:
            sql, values = plan.expand_numbered(given)
        else:
            sql, values = plan.sql, plan.parameters(given)
        if self._deferred:
            apart = self._apart(plan)
            if plan.reads and not self._begun and apart:
                pass  # a read before BEGIN: the writes wait for the transaction's last
            elif not apart or sql.startswith(_ALONE):
                await self._send_before()
            elif not self._checked or (row_required and _RETURNING in sql):
                # Joined to the waiting writes: one round trip for both.
                await self._gather(plan)
                await self._begin()
                prepared, raw = await self._joined(sql, values)
                return self._rows(plan, prepared, raw)
            # Otherwise it goes alone, ahead of writes it does not touch: they wait on.
        prepared = await self._prepare(sql)
        await self._begin_before(plan)
        return self._rows(plan, prepared, await prepared.fetch(*values))

    def _rows(self, plan: Plan, prepared: Any, raw: list[Any]) -> Rows:
        if raw and plan.row is None:
            self._learn(plan, prepared, len(raw[0]))
        return Rows(plan.read(raw), _rowcount(prepared.get_statusmsg()))

    async def _gather(self, plan: Plan) -> None:
        """Queue what the transaction holds back (`gather`) to go with `plan` too, unless
        `plan` touches its table or a write of that table waits already."""
        held = self.gathers
        if self.gather is None or held in self._deferred_tables:
            return
        if plan.tables is not None and held not in plan.tables:
            await self.gather()

    def _apart(self, plan: Plan) -> bool:
        """Whether `plan` touches no table a waiting write changes (it may join them)."""
        return plan.tables is not None and self._deferred_tables.isdisjoint(plan.tables)

    async def _send_before(self) -> None:
        """Send the waiting writes on their own, before a statement that cannot join them."""
        if self._deferred:
            await self._send("SELECT 1", [], begin=True)

    async def _begin(self) -> None:
        if not self._begun:
            await self._driver.execute("BEGIN")
            self._begun = True

    async def _begin_before(self, plan: Plan) -> None:
        if not plan.reads:
            await self._begin()

    async def _prepare(self, sql: str) -> Any:
        prepared = self._prepared.get(sql)
        if prepared is None:
            if len(self._prepared) >= _PREPARED_CACHE:
                # asyncpg closes a statement on the server once nothing refers to it.
                del self._prepared[next(iter(self._prepared))]
            prepared = await self._driver.prepare(sql)
            self._prepared[sql] = prepared
        return prepared

    def _learn(self, plan: Plan, prepared: Any, width: int) -> None:
        # The first `width` columns: those after are the counts of joined writes.
        names = [attribute.name for attribute in prepared.get_attributes()][:width]
        if plan.table is not None:
            plan.learn_returning([(name,) for name in names], self._plans.dialect)
        else:
            # A text statement: no column types to convert by (asyncpg decoded them).
            plan.row = collections.namedtuple("Row", names, rename=True)._make  # type: ignore[attr-defined]


def _translated(exc: Exception, prepared: dict[str, Any]) -> Exception:
    """asyncpg's `exc` as the store raises it; `prepared` is the connection's statements."""
    import asyncpg

    if isinstance(exc, asyncpg.IntegrityConstraintViolationError):
        return ConstraintViolated(str(exc))
    if isinstance(exc, asyncpg.InvalidCachedStatementError):
        # The schema changed under a prepared statement (a migration of another
        # process): prepare everything again; this transaction has failed.
        prepared.clear()
    return exc


@asynccontextmanager
async def direct_transaction(
    conn: AsyncConnection, plans: DirectPlans, where: str
) -> AsyncIterator[DirectConnection]:
    """Run a transaction on `conn`'s driver: commit when the block ends normally, roll
    back when it raises. `conn` is the caller's to close (returning it to the pool).

    Raises:
        StorageError: The transaction could not begin, or its commit failed (then the
            outcome is unknown).
    """
    try:
        record = await conn.get_raw_connection()
        prepared = record.info.setdefault(_PREPARED, {})
        link = DirectConnection(plans, record.driver_connection, prepared)
        await link.begin()
    except BaseException as exc:
        # Cancelled or failed half-way, the connection's state is unknown: it is closed.
        await _discard(conn)
        failed = _failed(f"{where}: could not begin a transaction", exc)
        if failed is None:
            raise
        raise failed from exc
    try:
        yield link
    except BaseException:
        if not await link.rollback():
            await _discard(conn)
        raise
    try:
        await link.commit()
    except BaseException as exc:
        if link.broken or not await link.rollback():
            await _discard(conn)
        failed = _failed("commit failed, outcome unknown", exc)
        if failed is None:
            raise
        raise failed from exc


def _failed(what: str, exc: BaseException) -> StorageError | None:
    """`exc` as the store reports it, or None when it is not the database's."""
    if not isinstance(exc, Exception):
        return None  # a cancellation, or the process ending
    if isinstance(exc, SQLAlchemyError):
        return StorageError(f"{what}: {driver_reason(exc)}")
    if unreachable(exc):
        return StorageError(f"{what}: {unreachable_reason(exc)}")
    return None


async def _discard(conn: AsyncConnection) -> None:
    # A connection in an unknown state is closed instead of going back to the pool.
    with suppress(SQLAlchemyError, OSError):
        await conn.invalidate()
