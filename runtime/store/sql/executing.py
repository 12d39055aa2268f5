"""Running one statement of a transaction, and what the store makes of its errors."""

from __future__ import annotations

import sqlite3
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, ClassVar, Protocol

from sqlalchemy.engine import Dialect
from sqlalchemy.exc import DBAPIError, IntegrityError, SQLAlchemyError, StatementError
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.sql import Executable

from runtime.domain.errors import StorageError
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

    async def _execute(
        self,
        statement: Executable,
        params: Mapping[str, Any] | Sequence[Mapping[str, Any]] | None = None,
        *,
        violation: type[ValueError] = ValueError,
    ) -> Result:
        try:
            if self._member is not None:
                return self._member.execute(statement, params)
            if self._direct is not None:
                return await self._direct.execute(statement, params)
            assert self._conn is not None
            return await self._conn.execute(statement, params)
        except (sqlite3.IntegrityError, ConstraintViolated) as exc:
            raise violation(f"constraint violated: {exc}") from exc
        except sqlite3.Error as exc:
            raise StorageError(f"database error: {exc}") from exc
        except IntegrityError as exc:
            raise violation(f"constraint violated: {exc.orig}") from exc
        except DBAPIError as exc:
            raise StorageError(f"database error: {exc.orig}") from exc
        except StatementError as exc:
            # Raised before reaching the database: a value that cannot be stored,
            # e.g. something JSON cannot encode.
            raise ValueError(f"cannot store value: {exc.orig}") from exc
        except SQLAlchemyError as exc:
            raise StorageError(f"database error: {exc}") from exc
        except Exception as exc:
            if not unreachable(exc):
                raise
            raise StorageError(f"database error: {unreachable_reason(exc)}") from exc
