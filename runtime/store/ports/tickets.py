"""The tickets' part of the store port."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Protocol

from runtime.domain.states import TicketStatus
from runtime.domain.tickets import Answer, ResumeTicket
from runtime.store.records import Position


class TicketPort(Protocol):
    """Resume tickets: what a parked run waits for, and who may decide it.

    Found by run, by call, by deadline and by the keys of those who may decide them;
    closed once, by compare-and-set.
    """

    async def insert_ticket(self, ticket: ResumeTicket) -> None:
        """Add a ticket."""
        ...

    async def get_ticket(self, ticket_id: str) -> ResumeTicket | None:
        """Read one ticket."""
        ...

    async def close_ticket(
        self,
        ticket_id: str,
        *,
        status: TicketStatus,
        at: datetime,
        decision: Answer | None = None,
        decided_by: str | None = None,
    ) -> bool:
        """Compare-and-set an open ticket to `status`. False if it was not open."""
        ...

    async def tickets_for_run(
        self, run_id: str, *, status: TicketStatus | None = None
    ) -> list[ResumeTicket]:
        """A run's tickets, oldest first."""
        ...

    async def open_tickets(
        self, *, limit: int = 100, after: Position | None = None
    ) -> list[ResumeTicket]:
        """Open tickets of every run, oldest first (by creation time, then id).

        Args:
            limit: At most this many.
            after: Only tickets that sort after this position (the last of a page).
        """
        ...

    async def decidable_tickets(
        self,
        *,
        deciders: Sequence[str],
        viewer: str,
        limit: int = 100,
        after: Position | None = None,
    ) -> list[ResumeTicket]:
        """Open tool-call tickets (with a call) one of `deciders` may decide, oldest first.

        A ticket is found under the keys `runtime.store.records.decider_keys` gives it
        (written with the ticket, dropped when it closes); four-eyes tickets of runs
        `viewer` requested are left out. The work is bounded by the page: at most
        `limit` index entries per key are read, whatever else is open. The caller still
        checks `ResumeTicket.may_decide` on what it gets.

        Args:
            deciders: The viewer's keys (`runtime.store.records.viewer_keys`).
            viewer: The viewer's user id.
            limit: At most this many.
            after: Only tickets that sort after this position (the last of a page).
        """
        ...

    async def open_ticket_for_call(self, call_id: str) -> ResumeTicket | None:
        """The open ticket waiting on a call, if any."""
        ...

    async def overdue_tickets(self, now: datetime, limit: int) -> list[ResumeTicket]:
        """Open tickets whose deadline is at or before `now`."""
        ...
