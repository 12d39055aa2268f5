"""Named leases, and the figures for metrics."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import (
    ColumnElement,
    ScalarSelect,
    Table,
    bindparam,
    case,
    func,
    or_,
    select,
    update,
)

from runtime.domain.states import CallState
from runtime.store.ports.leases import Figures
from runtime.store.schema import leases, outbox, received_commands, runs, tickets, tool_calls
from runtime.store.sql.convert import OPEN, QUEUED, RUNNING, to_micros
from runtime.store.sql.executing import TransactionCore

_TAKE_LEASE = (
    update(leases)
    .where(
        leases.c.name == bindparam("b_name"),
        or_(leases.c.owner == bindparam("b_owner"), leases.c.expires_at <= bindparam("b_now")),
    )
    .values(
        owner=bindparam("b_owner"),
        expires_at=bindparam("b_until"),
        fence=case(
            (leases.c.owner == bindparam("b_owner"), leases.c.fence), else_=leases.c.fence + 1
        ),
    )
    .returning(leases.c.fence)
)
# Dropping keeps the row (and its fence, so fences only grow), expired.
_DROP_LEASE = (
    update(leases)
    .where(leases.c.name == bindparam("b_name"), leases.c.owner == bindparam("b_owner"))
    .values(expires_at=0)
)


def _count(table: Table, *where: ColumnElement[bool]) -> ScalarSelect[int]:
    return select(func.count()).select_from(table).where(*where).scalar_subquery()


# One round trip for every figure.
_STATS = select(
    _count(tickets, tickets.c.status == OPEN).label("open_tickets"),
    _count(outbox, outbox.c.state == "pending").label("outbox_pending"),
    _count(outbox, outbox.c.state == "failed").label("outbox_failed"),
)
_FIGURES = select(
    _count(tickets, tickets.c.status == OPEN).label("open_tickets"),
    _count(tickets, tickets.c.status == OPEN, tickets.c.deadline <= bindparam("b_now")).label(
        "overdue_tickets"
    ),
    _count(outbox, outbox.c.state == "pending").label("outbox_pending"),
    _count(outbox, outbox.c.state == "failed").label("outbox_failed"),
    _count(received_commands, received_commands.c.state == "pending").label("received_pending"),
    _count(runs, runs.c.status == QUEUED).label("runs_queued"),
    _count(runs, runs.c.status == RUNNING, runs.c.lease_expires_at <= bindparam("b_now")).label(
        "runs_lease_expired"
    ),
    _count(tool_calls, tool_calls.c.state == CallState.UNCERTAIN.value).label("uncertain_calls"),
)


class LeaseStatements(TransactionCore):
    """The named leases and figures part of `SQLTransaction`."""

    async def take_lease(
        self, name: str, *, owner: str, now: datetime, until: datetime
    ) -> int | None:
        """Take or extend a named lease; its fence, or None when someone else holds it."""
        params = {
            "b_name": name,
            "b_owner": owner,
            "b_now": to_micros(now),
            "b_until": to_micros(until),
        }
        row = (await self._execute(_TAKE_LEASE, params)).first()
        if row is None:
            row = (await self._execute(self._upserts().insert_lease, params)).first()
        if row is None:
            return None
        self.wrote = True
        return int(row.fence)

    async def drop_lease(self, name: str, *, owner: str) -> None:
        """Give a named lease up if `owner` holds it."""
        if (await self._execute(_DROP_LEASE, {"b_name": name, "b_owner": owner})).rowcount:
            self.wrote = True

    async def stats(self) -> dict[str, int]:
        """Figures for metrics: ``open_tickets``, ``outbox_pending``, ``outbox_failed``."""
        row = (await self._execute(_STATS)).one()
        return {
            "open_tickets": row.open_tickets,
            "outbox_pending": row.outbox_pending,
            "outbox_failed": row.outbox_failed,
        }

    async def figures(self, now: datetime) -> Figures:
        """Every database-wide figure for metrics at `now`, in one round trip."""
        row = (await self._execute(_FIGURES, {"b_now": to_micros(now)})).one()
        return Figures(
            open_tickets=row.open_tickets,
            overdue_tickets=row.overdue_tickets,
            outbox_pending=row.outbox_pending,
            outbox_failed=row.outbox_failed,
            received_pending=row.received_pending,
            runs_queued=row.runs_queued,
            runs_lease_expired=row.runs_lease_expired,
            uncertain_calls=row.uncertain_calls,
        )
