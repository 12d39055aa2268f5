"""The outbox's part of the store port."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Protocol

from runtime.store.records import OutboxRecord


class OutboxPort(Protocol):
    """Notifications to deliver, queued in the transaction that caused them.

    Each holds its delivery state and the claim of the process delivering it.
    """

    async def add_outbox(self, item: OutboxRecord) -> None:
        """Queue a notification."""
        ...

    async def due_outbox(self, now: datetime, limit: int) -> list[OutboxRecord]:
        """Pending notifications whose next attempt is due, oldest first."""
        ...

    async def claim_outbox(
        self,
        now: datetime,
        limit: int,
        *,
        owner: str,
        until: datetime,
        pacing: Mapping[str, float] | None = None,
    ) -> list[OutboxRecord]:
        """Claim due notifications for delivery, oldest first; each by one process only.

        An item is claimable when it is pending, its next attempt is due and nobody holds
        an unexpired claim on it. A claimed item's lease belongs to `owner` until `until`
        and its fence grows by one. Items locked by a concurrent claim are skipped, not
        waited for.

        Args:
            now: The time.
            limit: At most this many items.
            owner: Who delivers them.
            until: When the claim expires (another process may then claim them again).
            pacing: Seconds between two messages to one channel, by platform
                (``{"slack": 1.0}``). For those platforms at most one item per channel
                is claimed, and only once the channel's previous slot has passed; the
                slot is shared by every process on the database.

        Returns:
            The claimed items, with their new lease and fence.
        """
        ...

    async def update_outbox(self, item: OutboxRecord, *, fence: int | None = None) -> bool:
        """Write a notification's delivery state back.

        Args:
            item: The new row (its lease columns are written too).
            fence: When given, a compare-and-set: the write happens only if the item is
                still pending under this fence (nobody claimed it since).

        Returns:
            False when the fence no longer matched (and nothing was written).
        """
        ...

    async def outbox_for_run(self, run_id: str) -> list[OutboxRecord]:
        """Every notification of a run, oldest first."""
        ...

    async def find_outbox(self, *, ticket_id: str, kind: str) -> OutboxRecord | None:
        """The first notification of `kind` about a ticket (to find its platform message)."""
        ...

    async def first_posted(self, run_id: str, channel: str) -> OutboxRecord | None:
        """The run's first notification that left a message in `channel` (a ``platform:
        channel`` key, see `runtime.store.records.channel_key`): the oldest delivered one
        with a platform reference there (`OutboxRecord.posted_in`), or None. An indexed
        single-row read."""
        ...
