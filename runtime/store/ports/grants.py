"""The standing grants' part of the store port."""

from __future__ import annotations

from datetime import datetime
from typing import Protocol

from runtime.store.records import GrantRecord


class GrantPort(Protocol):
    """Standing grants: calls an approver allowed ahead of time.

    A grant covers a run or a thread until it expires or is revoked.
    """

    async def insert_grant(self, grant: GrantRecord) -> None:
        """Add a grant (`ValueError` if its id exists or its run does not)."""
        ...

    async def get_grant(self, grant_id: str) -> GrantRecord | None:
        """Read one grant, active or not."""
        ...

    async def active_grants(
        self, *, agent: str, tool: str, run_id: str, thread_id: str, now: datetime
    ) -> list[GrantRecord]:
        """Grants that may cover a call of `tool` of `agent` in run `run_id` now, oldest first.

        They are not revoked, not expired at `now`, and either ``run`` grants of that run
        or ``thread`` grants of `thread_id`. The caller checks the rest (the requester,
        the agent's version, the argument constraint). Always read from the database, so
        a revocation committed anywhere counts at once.
        """
        ...

    async def list_grants(
        self,
        *,
        run_id: str | None = None,
        thread_id: str | None = None,
        scope: str | None = None,
        involving: str | None = None,
        active_at: datetime | None = None,
        limit: int = 100,
    ) -> list[GrantRecord]:
        """Grants, newest first, filtered by every argument given.

        Args:
            run_id: Only grants given in this run.
            thread_id: Only grants given in this thread.
            scope: Only ``run`` or only ``thread`` grants.
            involving: Only grants this user id gave, or given in a run they requested.
            active_at: Only grants active at this time (not revoked, not expired).
            limit: At most this many.
        """
        ...

    async def revoke_grant(self, grant_id: str, *, by: str, at: datetime) -> bool:
        """Compare-and-set: mark a grant that is not revoked yet revoked. False otherwise."""
        ...
