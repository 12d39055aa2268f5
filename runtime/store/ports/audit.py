"""The audit's part of the store port: every run's events in one order, and pruning."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from runtime.store.records import EventRecord, RunRecord


@dataclass(frozen=True, slots=True)
class AuditEvent:
    """One flight-recorder event with the agent of its run.

    Attributes:
        event: The event; its ``seq`` is global (one order across every run).
        agent: The agent of the event's run.
    """

    event: EventRecord
    agent: str


class AuditPort(Protocol):
    """Reading every run's events in sequence order, and deleting pruned runs."""

    async def audit_horizon(self) -> int:
        """The highest sequence number below which no event can still appear.

        Every event with ``seq <=`` the answer is committed or will never exist: no
        transaction still open holds a lower number. Run it in a transaction of its own
        (on PostgreSQL it waits, briefly, for transactions writing events to end).
        """
        ...

    async def audit_events(
        self,
        *,
        after: int,
        upto: int,
        limit: int,
        since: datetime | None = None,
        until: datetime | None = None,
    ) -> list[AuditEvent]:
        """Events with ``after < seq <= upto``, in sequence order, at most `limit`.

        Args:
            after: Only events after this sequence number.
            upto: Only events up to this sequence number (an `audit_horizon`).
            limit: At most this many.
            since: Only events recorded at or after this time.
            until: Only events recorded before this time.
        """
        ...

    async def finished_runs(
        self, *, before: datetime, after: str | None, limit: int
    ) -> list[RunRecord]:
        """Top-level runs (not sub-agent runs) that finished (done, failed or cancelled)
        and were last written before `before`, by run id, after the run id `after`."""
        ...

    async def delete_runs(self, run_ids: Sequence[str]) -> int:
        """Delete these runs with everything that names them: transcripts, calls,
        tickets (and their deciders), events, notifications and grants. Returns how many
        runs were deleted."""
        ...
