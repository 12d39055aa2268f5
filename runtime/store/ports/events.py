"""The flight recorder's part of the store port."""

from __future__ import annotations

from typing import Protocol

from runtime.store.records import EventRecord


class EventPort(Protocol):
    """Each run's flight recorder: events appended in order, never changed."""

    async def append_event(self, event: EventRecord) -> None:
        """Append to a run's flight recorder."""
        ...

    async def events(self, run_id: str, *, after: int = 0) -> list[EventRecord]:
        """A run's events with ``seq > after``, in order."""
        ...
