"""The received commands' part of the store port."""

from __future__ import annotations

from datetime import datetime
from typing import Protocol

from runtime.store.records import ReceivedRecord


class ReceivedPort(Protocol):
    """Decisions received from a chat platform, each applied once by one process.

    A click or form is stored before it is acknowledged, then claimed and applied.
    """

    async def insert_received(self, item: ReceivedRecord) -> bool:
        """Store a received command; False if (source, delivery_id) is already stored."""
        ...

    async def pending_received(self, limit: int) -> list[ReceivedRecord]:
        """Received commands not yet applied, oldest first."""
        ...

    async def claim_received(
        self, now: datetime, limit: int, *, owner: str, until: datetime
    ) -> list[ReceivedRecord]:
        """Claim pending received commands to apply, oldest first; each by one process only.

        Skips commands another process holds an unexpired claim on (or is claiming now).
        """
        ...

    async def update_received(self, item: ReceivedRecord, *, only_pending: bool = False) -> bool:
        """Write a received command's state back.

        Args:
            item: The new row.
            only_pending: A compare-and-set: write only if the stored command is still
                ``pending`` (so a refusal never overwrites another process's apply).

        Returns:
            False when `only_pending` was given and the command was no longer pending.
        """
        ...
