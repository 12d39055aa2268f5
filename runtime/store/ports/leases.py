"""Named leases and the figures for metrics: the store port's remaining part."""

from __future__ import annotations

from datetime import datetime
from typing import Protocol


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
