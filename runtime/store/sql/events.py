"""The flight recorder: a run's events."""

from __future__ import annotations

from sqlalchemy import bindparam, insert, select

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


class EventStatements(TransactionCore):
    """The flight recorder part of `SQLTransaction`."""

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
            await self._execute(_INSERT_EVENT, pending)

    async def flush(self) -> None:
        """Write buffered events and queue the wake-ups; the store calls it before committing.

        On PostgreSQL a ``NOTIFY`` tells every listening replica what became ready (a
        queued run, a received command, a notification); it is delivered at commit, and
        never if the transaction rolls back.
        """
        await self._flush_events()
        self.woke = frozenset(self._wake)
        if self.woke:
            await self._notify(self.woke)
        self._wake.clear()

    async def events(self, run_id: str, *, after: int = 0) -> list[EventRecord]:
        """A run's events with ``seq > after``, in order."""
        await self._flush_events()
        result = await self._execute(_EVENTS, {"run_id": run_id, "after": after})
        return [EVENTS.record(row) for row in result]
