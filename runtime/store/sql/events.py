"""The flight recorder: a run's events."""

from __future__ import annotations

import functools
from typing import Any, ClassVar

from sqlalchemy import TextClause, bindparam, insert, select, text

from runtime.store.records import EventRecord
from runtime.store.schema import events
from runtime.store.sql.executing import TransactionCore
from runtime.store.sql.rows import EVENTS

_EVENTS = (
    select(events)
    .where(events.c.run_id == bindparam("run_id"), events.c.seq > bindparam("after"))
    .order_by(events.c.seq)
)
_INSERT_EVENT = insert(events)
_MAX_ROWS = 32
"""The most events one multi-row ``INSERT`` writes; more take several."""


@functools.cache
def _insert_rows(columns: tuple[str, ...], count: int) -> TextClause:
    """``INSERT INTO events (...) VALUES (...), ...`` for `count` rows, parameter
    ``<column>_<row>`` each, typed as its column (so JSON is encoded as for one row).

    Built as text, once per shape: SQLAlchemy compiles a multi-row `insert` anew at each
    execution, a text statement once.
    """
    names = ", ".join(f'"{column}"' for column in columns)
    rows = ", ".join(
        "(" + ", ".join(f":{column}_{row}" for column in columns) + ")" for row in range(count)
    )
    statement = text(f"INSERT INTO events ({names}) VALUES {rows}")
    return statement.bindparams(
        *(
            bindparam(f"{column}_{row}", type_=events.c[column].type)
            for row in range(count)
            for column in columns
        )
    )


class EventStatements(TransactionCore):
    """The flight recorder part of `SQLTransaction`."""

    multi_row_insert: ClassVar[bool] = False
    """Whether buffered events go in one ``INSERT ... VALUES (...), (...)`` (over a network,
    one statement and one round trip) rather than one execution per row (SQLite: one
    ``executemany`` in-process, its statement prepared once)."""

    async def append_event(self, event: EventRecord) -> None:
        """Append to a run's flight recorder; the store assigns ``seq``."""
        values = EVENTS.values(event)
        # Written in one statement just before the commit (or before a read of events):
        # a step's several events cost one round trip.
        self._events.append(values)
        self.wrote = True

    async def _flush_events(self) -> None:
        if self._events:
            pending, self._events = self._events, []
            await self._insert_events(pending)

    async def _insert_events(self, rows: list[dict[str, Any]]) -> None:
        if not self.multi_row_insert or len(rows) == 1:
            await self._write(_INSERT_EVENT, rows, table=events)
            return
        # The database numbers the rows (`seq`) in the order they are listed, as one
        # execution per row would.
        columns = tuple(rows[0])
        for start in range(0, len(rows), _MAX_ROWS):
            chunk = rows[start : start + _MAX_ROWS]
            params = {
                f"{column}_{row}": values[column]
                for row, values in enumerate(chunk)
                for column in columns
            }
            await self._write(_insert_rows(columns, len(chunk)), params, table=events)

    async def flush(self) -> None:
        """Write buffered events and queue the wake-ups; the store calls it before committing.

        On PostgreSQL a ``NOTIFY`` tells every listening replica what became ready (a
        queued run, a received command, a notification); it is delivered at commit, and
        never if the transaction rolls back. It goes in one statement with the writes still
        waiting (see `_write`); nothing of the transaction follows.
        """
        await self._flush_events()
        self.woke = frozenset(self._wake)
        if self.woke:
            await self._notify(self.woke)
        if self._direct is not None:
            await self._send_writes()  # what is still waiting (see `_write`)
        self._wake.clear()

    async def events(self, run_id: str, *, after: int = 0) -> list[EventRecord]:
        """A run's events with ``seq > after``, in order."""
        await self._flush_events()
        result = await self._execute(_EVENTS, {"run_id": run_id, "after": after})
        return [EVENTS.record(row) for row in result]
