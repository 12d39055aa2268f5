"""Running one statement of a transaction, and what the store makes of its errors."""

from __future__ import annotations

import sqlite3
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, ClassVar, NoReturn, Protocol

from sqlalchemy import Table
from sqlalchemy.engine import Dialect
from sqlalchemy.exc import DBAPIError, IntegrityError, SQLAlchemyError, StatementError
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.sql import ClauseElement, Executable

from runtime.domain.errors import StorageError
from runtime.store.schema import events
from runtime.store.sql.failures import ConstraintViolated, unreachable, unreachable_reason
from runtime.store.sql.postgres_direct import DirectConnection
from runtime.store.sql.sqlite_writer import Member
from runtime.store.sql.upserts import Upserts


class Result(Protocol):
    """What the store reads of a statement's result (SQLAlchemy's, or `plans.Rows`)."""

    @property
    def rowcount(self) -> int: ...

    def first(self) -> Any: ...

    def one(self) -> Any: ...

    def all(self) -> Sequence[Any]: ...

    def scalars(self) -> Iterable[Any]: ...

    def __iter__(self) -> Iterator[Any]: ...


class TransactionCore(ABC):
    """What every part of `SQLTransaction` shares: the connection, and what the
    transaction wrote, queued and must take back.

    What differs between databases is left to a subclass per database (see `dialects`).
    """

    claim_returning: ClassVar[Executable]
    """The conditional ``UPDATE ... RETURNING`` that claims a run (`claim_run`)."""

    def __init__(self, conn: AsyncConnection | Member | DirectConnection, dialect: Dialect) -> None:
        # SQLite: a member of the writer's shared transaction, statements run here;
        # PostgreSQL: the driver's connection (`postgres_direct`), or through a pooler
        # in transaction mode an async connection of the pool.
        self._member = conn if isinstance(conn, Member) else None
        self._direct = conn if isinstance(conn, DirectConnection) else None
        self._conn = conn if isinstance(conn, AsyncConnection) else None
        self._returning = bool(dialect.update_returning)
        self.wrote = False
        self._events: list[dict[str, Any]] = []
        # What other processes should look at once this commits (PostgreSQL NOTIFY).
        self._wake: set[str] = set()
        self.woke: frozenset[str] = frozenset()
        """What this transaction makes ready once committed, as `flush` found it."""
        # Bookkeeping of records to take back if this transaction does not commit.
        self._undo: list[Callable[[], None]] = []
        # Calls this transaction inserted that have no open ticket yet: no other
        # transaction can see them, so `insert_ticket` needs no look for one.
        self._fresh_calls: set[str] = set()
        # PostgreSQL: the columns of the calls this transaction inserted, while their
        # insert may still wait (`update_call` folds its write into it).
        self._inserted_calls: dict[str, dict[str, Any]] = {}
        if self._direct is not None:
            # Buffered events go with a statement that is joined to waiting writes anyway.
            self._direct.gather = self._flush_events
            self._direct.gathers = events.name

    @abstractmethod
    async def _flush_events(self) -> None:
        """Write the buffered events (`EventStatements`)."""

    def forget(self) -> None:
        """The transaction did not commit (or its outcome is unknown): take back what it
        noted in the records it wrote, so that a later write writes it again."""
        undo, self._undo = self._undo, []
        for step in reversed(undo):
            step()

    @abstractmethod
    def _upserts(self) -> Upserts:
        """This database's ``INSERT ... ON CONFLICT`` statements."""

    @abstractmethod
    async def _lock_run(self, run_id: str) -> None:
        """Serialise ticket inserts of one run with other transactions' (see `insert_ticket`)."""

    @abstractmethod
    async def _notify(self, wake: frozenset[str]) -> None:
        """Tell other processes, once this commits, what it made ready (see `flush`)."""

    async def _write(
        self,
        statement: Executable,
        params: Mapping[str, Any] | Sequence[Mapping[str, Any]],
        *,
        table: Table,
        check: str | None = None,
        key: object = None,
    ) -> None:
        """Run a write of `table` whose outcome nobody reads (an insert whose only refusal
        is a broken constraint, a delete of what may be gone; with `check`, an update that
        must change one row, or `ValueError(check)`). On PostgreSQL it waits for a later
        statement of the transaction, so a constraint it breaks fails that one, as a
        `ValueError` (see `runtime.store.sql.postgres_direct`); while it waits, `key` names
        it for `_rewrite`.
        """
        if self._direct is None:
            result = await self._execute(statement, params)
            if check is not None and result.rowcount != 1:
                raise ValueError(check)
            return
        assert isinstance(statement, ClauseElement)
        try:
            await self._direct.defer(statement, params, table=table.name, check=check, key=key)
        except Exception as exc:
            _raise_reported(exc, ValueError)

    def _rewrite(self, key: object, statement: Executable, params: Mapping[str, Any]) -> bool:
        """PostgreSQL: send `statement` with `params` instead of the write `key` names, if
        that write still waits (see `_write`); whether it did."""
        if self._direct is None:
            return False
        assert isinstance(statement, ClauseElement)
        try:
            return self._direct.rewrite(key, statement, params)
        except Exception as exc:
            _raise_reported(exc, ValueError)

    async def _send_writes(self, notify: tuple[str, str] | None = None) -> None:
        """PostgreSQL: send the writes that wait (see `_write`), as the transaction's last
        statement, with ``pg_notify(*notify)``."""
        assert self._direct is not None
        try:
            await self._direct.send_deferred(last=True, notify=notify)
        except Exception as exc:
            _raise_reported(exc, ValueError)

    async def _execute(
        self,
        statement: Executable,
        params: Mapping[str, Any] | Sequence[Mapping[str, Any]] | None = None,
        *,
        violation: type[ValueError] = ValueError,
        row_required: bool = False,
    ) -> Result:
        """Run `statement`; with `row_required` the caller fails the transaction when it
        returns no row (on PostgreSQL, writes that must change a row may go with it)."""
        try:
            if self._member is not None:
                return self._member.execute(statement, params)
            if self._direct is not None:
                return await self._direct.execute(statement, params, row_required=row_required)
            assert self._conn is not None
            return await self._conn.execute(statement, params)
        except Exception as exc:
            _raise_reported(exc, violation)


def _raise_reported(exc: Exception, violation: type[ValueError]) -> NoReturn:
    """Raise `exc` as the store reports it (see `_reported`), from `exc`."""
    reported = _reported(exc, violation)
    if reported is exc:
        raise exc
    raise reported from exc


def _reported(exc: Exception, violation: type[ValueError]) -> Exception:
    """`exc`, raised running a statement, as the store reports it (itself when it is
    neither the database's nor the driver's): a broken constraint as `violation` (a
    waiting write's as `ValueError`), a value that cannot be stored as `ValueError`, the
    rest as `StorageError`."""
    match exc:
        case ConstraintViolated():
            refused = ValueError if exc.waiting else violation
            return refused(f"constraint violated: {exc}")
        case sqlite3.IntegrityError():
            return violation(f"constraint violated: {exc}")
        case sqlite3.Error():
            return StorageError(f"database error: {exc}")
        case IntegrityError():
            return violation(f"constraint violated: {exc.orig}")
        case DBAPIError():
            return StorageError(f"database error: {exc.orig}")
        case StatementError():
            # Raised before reaching the database: a value that cannot be stored,
            # e.g. something JSON cannot encode.
            return ValueError(f"cannot store value: {exc.orig}")
        case SQLAlchemyError():
            return StorageError(f"database error: {exc}")
        case _ if unreachable(exc):
            return StorageError(f"database error: {unreachable_reason(exc)}")
        case _:
            return exc
