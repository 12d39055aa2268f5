"""Statements compiled once each, bound and read without SQLAlchemy's execution machinery.

Statements are SQLAlchemy Core constructs, compiled once each for the store's database
(`Plan`): the same statements on SQLite and PostgreSQL, with SQLAlchemy's own conversion
of each column type (JSON, booleans), minus its per-statement execution machinery. SQLite's
writer (`runtime.store.sql.sqlite_writer`) and PostgreSQL's direct connections
(`runtime.store.sql.postgres_direct`) run them on their drivers.
"""

from __future__ import annotations

import collections
import operator
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, cast

from sqlalchemy import Table
from sqlalchemy.engine import Dialect
from sqlalchemy.sql import ClauseElement, CompoundSelect, Select, TableClause, TextClause
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.dml import UpdateBase
from sqlalchemy.sql.selectable import Alias, Join, Subquery
from sqlalchemy.sql.util import find_tables
from sqlalchemy.types import TypeEngine

from runtime.domain.errors import StorageError

_REQUIRED: Any = object()
_ROW_LOCKS = (" FOR UPDATE", " FOR NO KEY UPDATE", " FOR SHARE", " FOR KEY SHARE")


class Rows:
    """The rows and row count of one statement (what the store reads of a result)."""

    __slots__ = ("_rows", "rowcount")

    def __init__(self, rows: list[Any], rowcount: int) -> None:
        self._rows = rows
        self.rowcount = rowcount

    def first(self) -> Any:
        """The first row, or None."""
        return self._rows[0] if self._rows else None

    def one(self) -> Any:
        """The only row."""
        if len(self._rows) != 1:
            raise StorageError(f"expected one row, got {len(self._rows)}")
        return self._rows[0]

    def all(self) -> list[Any]:
        """Every row."""
        return list(self._rows)

    def scalars(self) -> list[Any]:
        """The first column of every row."""
        return [row[0] for row in self._rows]

    def __iter__(self) -> Iterator[Any]:
        return iter(self._rows)


class Plan:
    """A statement compiled for one database, with how to bind its parameters and read its
    rows.

    Args:
        sql: The SQL text, with the dialect's placeholders (SQLite's ``?``, asyncpg's
            ``$1``).
        binds: Per placeholder: the parameter's name, SQLAlchemy's conversion for its
            type (or None), and its fixed value (a literal in the statement) or
            `_REQUIRED`.
        table: The table an INSERT or UPDATE writes (its RETURNING columns' types).
        expanding: The parameters that are lists (``IN``), written out per execution.
        compiled: The compiled statement, for writing out lists with numbered
            placeholders (`expand_numbered`).
    """

    __slots__ = (
        "_converts",
        "_fixed",
        "_get",
        "binds",
        "compiled",
        "expanding",
        "reads",
        "results",
        "row",
        "sql",
        "table",
        "tables",
    )

    def __init__(
        self,
        sql: str,
        binds: Sequence[tuple[str, Callable[[Any], Any] | None, Any]],
        *,
        table: Table | None = None,
        expanding: frozenset[str] = frozenset(),
        compiled: SQLCompiler | None = None,
    ) -> None:
        self.sql = sql
        self.compiled = compiled
        self.reads = False
        """Whether the statement only reads, and locks no row (a ``SELECT`` without
        ``FOR UPDATE`` or ``FOR SHARE``)."""
        self.binds = tuple(binds)
        self.table = table
        self.tables: frozenset[str] | None = None
        """The tables the statement reads or writes; None when not known (text)."""
        self.expanding = expanding
        self.row: Callable[[Sequence[Any]], Any] | None = None
        """Makes a row (named fields, like SQLAlchemy's rows); None without rows, or for
        RETURNING until the first rows came back."""
        self.results: tuple[tuple[int, Callable[[Any], Any]], ...] = ()
        """Per converted column: its index and SQLAlchemy's conversion."""
        names = [name for name, _convert, _fixed in self.binds]
        self._fixed = {name: fixed for name, _c, fixed in self.binds if fixed is not _REQUIRED}
        self._get: Callable[[Mapping[str, Any]], Any] | None = (
            operator.itemgetter(*names) if len(names) > 1 else None
        )
        self._converts = tuple(
            (index, convert) for index, (_n, convert, _f) in enumerate(self.binds) if convert
        )

    def learn(self, columns: Sequence[tuple[str, TypeEngine[Any]]], dialect: Dialect) -> None:
        """Name the result columns and note how to convert each (by its type)."""
        names = [str(name) for name, _type in columns]
        self.row = collections.namedtuple("Row", names, rename=True)._make  # type: ignore[attr-defined]
        results = []
        for index, (_name, type_) in enumerate(columns):
            convert = type_.dialect_impl(dialect).result_processor(dialect, None)
            if convert is not None:
                results.append((index, convert))
        self.results = tuple(results)

    def learn_returning(self, description: Sequence[Any], dialect: Dialect) -> None:
        """Name a DML statement's RETURNING columns from the cursor's description."""
        assert self.table is not None
        columns = self.table.c
        self.learn([(d[0], columns[d[0]].type) for d in description], dialect)

    def expand(self, params: Mapping[str, Any]) -> tuple[str, list[Any]]:
        """The SQL (``?`` placeholders) and positional parameters for `params`, lists
        written out.

        An empty list becomes ``IN (NULL)``, which matches nothing.
        """
        sql = self.sql
        values: list[Any] = []
        for name, value in zip([b[0] for b in self.binds], self.parameters(params), strict=True):
            if name in self.expanding:
                items = list(value)
                marks = ", ".join("?" * len(items)) or "NULL"
                sql = sql.replace(f"__[POSTCOMPILE_{name}]", marks, 1)
                values.extend(items)
            else:
                values.append(value)
        return sql, values

    def expand_numbered(self, params: Mapping[str, Any]) -> tuple[str, list[Any]]:
        """The SQL (numbered placeholders, ``$1``) and positional parameters for `params`,
        lists written out (SQLAlchemy's own expansion of the compiled statement).

        Raises:
            ValueError: As `parameters`.
        """
        assert self.compiled is not None
        given = {**self._fixed, **params} if self._fixed else params
        try:
            state = self.compiled.construct_expanded_state(dict(given))
        except KeyError as exc:
            raise ValueError(f"the statement needs a value for {exc}") from None
        converts = {self.binds[index][0]: convert for index, convert in self._converts}
        values = list(state.positional_parameters or ())
        if converts:
            for index, name in enumerate(state.positiontup or ()):
                convert = converts.get(name)
                if convert is None:
                    # A list's items are named after it: ``ids_1``, ``ids_2``...
                    base, _, number = name.rpartition("_")
                    convert = converts.get(base) if number.isdigit() else None
                if convert is not None:
                    try:
                        values[index] = convert(values[index])
                    except (TypeError, ValueError) as exc:
                        raise ValueError(f"cannot store value: {exc}") from exc
        return state.statement, values

    def parameters(self, params: Mapping[str, Any]) -> list[Any]:
        """The positional parameters for `params`.

        Raises:
            ValueError: A parameter is missing, or its value cannot be stored (e.g.
                something JSON cannot encode).
        """
        given = {**self._fixed, **params} if self._fixed else params
        try:
            if self._get is not None:
                values = list(self._get(given))
            else:
                values = [given[name] for name, _c, _f in self.binds]
        except KeyError as exc:
            raise ValueError(f"the statement needs a value for {exc}") from None
        for index, convert in self._converts:
            value = values[index]
            try:
                if self.expanding and self.binds[index][0] in self.expanding:
                    values[index] = [convert(item) for item in value]
                else:
                    values[index] = convert(value)
            except (TypeError, ValueError) as exc:
                raise ValueError(f"cannot store value: {exc}") from exc
        return values

    def read(self, raw: list[Any]) -> list[Any]:
        """Rows as the store reads them: converted, with named fields."""
        make = self.row
        if make is None:
            return raw
        if not self.results:
            return [make(row) for row in raw]
        rows = []
        for row in raw:
            values = list(row)
            for index, convert in self.results:
                values[index] = convert(values[index])
            rows.append(make(values))
        return rows


def compile_plan(statement: ClauseElement, keys: Sequence[str], dialect: Dialect) -> Plan:
    """Compile `statement` for `dialect`; `keys` name the parameters an INSERT or UPDATE sets."""
    compiled = cast(
        SQLCompiler,
        statement.compile(
            dialect=dialect,
            column_keys=list(keys) if isinstance(statement, UpdateBase) else None,
        ),
    )
    binds = []
    for name in compiled.positiontup or ():
        bind = compiled.binds[name]
        fixed = _REQUIRED if bind.required else bind.effective_value
        convert = bind.type.dialect_impl(dialect).bind_processor(dialect)
        binds.append((name, convert, fixed))
    expanding = frozenset(
        name for name in compiled.positiontup or () if compiled.binds[name].expanding
    )
    # RETURNING columns are the table's; the rows say which (SQLAlchemy's own list of
    # them is memoized and can be stale on statements derived with returning()).
    table = cast(Table, statement.table) if isinstance(statement, UpdateBase) else None
    plan = Plan(
        compiled.string,
        binds,
        table=table,
        expanding=expanding,
        compiled=compiled if expanding else None,
    )
    plan.tables = _tables(statement)
    if table is not None:
        return plan
    if isinstance(statement, Select | CompoundSelect):
        plan.reads = not any(lock in plan.sql for lock in _ROW_LOCKS)
    columns = getattr(statement, "selected_columns", None)
    if columns is not None:
        plan.learn([(column.key, column.type) for column in columns], dialect)
    return plan


def _tables(statement: ClauseElement) -> frozenset[str] | None:
    """The names of the tables `statement` reads or writes, subqueries included; None when
    it is text, or names a table in a way this does not follow."""
    if isinstance(statement, TextClause):
        return None
    names = set()
    for found in find_tables(
        statement,
        check_columns=True,
        include_aliases=True,
        include_joins=True,
        include_selects=True,
        include_crud=True,
    ):
        named: Any = found.element if isinstance(found, Alias) else found
        if isinstance(named, TableClause):
            names.add(named.name)
        elif not isinstance(named, Join | Select | CompoundSelect | Subquery):
            return None
    return frozenset(names)
