"""Named leases and the figures for metrics: the store port's remaining part."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Protocol


@dataclass(frozen=True, slots=True)
class Figures:
    """Database-wide figures for metrics, read at one moment (`LeasePort.figures`).

    Attributes:
        open_tickets: Tickets waiting for a decision.
        overdue_tickets: Open tickets whose deadline passed (not expired yet).
        outbox_pending: Notifications not yet delivered.
        outbox_failed: Notifications given up on.
        received_pending: Decisions received from chat, stored and not applied yet.
        runs_queued: Runs ready for a worker to drive.
        runs_lease_expired: Running runs whose worker's lease expired (a worker died or
            stalled); the next worker to look recovers them.
        uncertain_calls: Tool calls whose outcome is unknown, waiting for a person.
    """

    open_tickets: int = 0
    overdue_tickets: int = 0
    outbox_pending: int = 0
    outbox_failed: int = 0
    received_pending: int = 0
    runs_queued: int = 0
    runs_lease_expired: int = 0
    uncertain_calls: int = 0


class LeasePort(Protocol):
    """Named leases and the figures for metrics.

    A named lease has one holder among every process on the database (e.g. the Discord
    gateway's connection).
    """

    async def take_lease(
        self, name: str, *, owner: str, now: datetime, until: datetime
    ) -> int | None:
        """Take or extend the named lease (e.g. ``discord-gateway``) for `owner`.

        Succeeds when nobody holds it, its holder's lease expired, or `owner` holds it
        already. Returns the lease's fence (it grows whenever the holder changes), or
        None when another owner holds it.
        """
        ...

    async def drop_lease(self, name: str, *, owner: str) -> None:
        """Give the named lease up, if `owner` holds it."""
        ...

    async def stats(self) -> dict[str, int]:
        """Figures for metrics: ``open_tickets``, ``outbox_pending``, ``outbox_failed``."""
        ...

    async def figures(self, now: datetime) -> Figures:
        """Every database-wide figure for metrics at `now`, in one read."""
        ...
