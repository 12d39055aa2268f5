"""Resume tickets, and who may decide them (``ticket_deciders``)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import and_, bindparam, insert, or_, select, update

from runtime.domain.states import TicketStatus
from runtime.domain.tickets import Answer, ResumeTicket
from runtime.store._planner import unindexed
from runtime.store.records import Position
from runtime.store.schema import ticket_deciders, tickets
from runtime.store.sql.convert import OPEN, to_micros
from runtime.store.sql.executing import TransactionCore
from runtime.store.sql.rows import TICKETS, decider_rows, dump_answer

_INSERT_TICKET = insert(tickets)
_GET_TICKET = select(tickets).where(tickets.c.ticket_id == bindparam("ticket_id"))
_TICKETS_FOR_RUN = (
    select(tickets)
    .where(tickets.c.run_id == bindparam("run_id"))
    .order_by(tickets.c.created_at, tickets.c.ticket_id)
)
# The run's or the call's own index, not every open ticket's (see `_planner`).
_TICKETS_FOR_RUN_IN = (
    select(tickets)
    .where(
        tickets.c.run_id == bindparam("run_id"),
        unindexed(tickets.c.status) == bindparam("status"),
    )
    .order_by(tickets.c.created_at, tickets.c.ticket_id)
)
_OPEN_FOR_CALL = (
    select(tickets)
    .where(tickets.c.call_id == bindparam("call_id"), unindexed(tickets.c.status) == OPEN)
    .order_by(tickets.c.created_at, tickets.c.ticket_id)
    .limit(1)
)
_CLOSE_TICKET = update(tickets).where(
    tickets.c.ticket_id == bindparam("b_ticket_id"), tickets.c.status == OPEN
)
_OPEN_TICKETS = (
    select(tickets)
    .where(tickets.c.status == OPEN)
    .order_by(tickets.c.created_at, tickets.c.ticket_id)
    .limit(bindparam("limit"))
)
_OPEN_TICKETS_AFTER = (
    select(tickets)
    .where(
        tickets.c.status == OPEN,
        or_(
            tickets.c.created_at > bindparam("at"),
            and_(tickets.c.created_at == bindparam("at"), tickets.c.ticket_id > bindparam("id")),
        ),
    )
    .order_by(tickets.c.created_at, tickets.c.ticket_id)
    .limit(bindparam("limit"))
)
_INSERT_DECIDERS = insert(ticket_deciders)
_DROP_DECIDERS = ticket_deciders.delete().where(
    ticket_deciders.c.ticket_id == bindparam("b_ticket_id")
)
# One key's open tool-call tickets past a position, oldest first: a range of its index.
_DECIDABLE = (
    select(ticket_deciders.c.ticket_id, ticket_deciders.c.created_at)
    .where(
        ticket_deciders.c.decider == bindparam("decider"),
        or_(
            ticket_deciders.c.created_at > bindparam("at"),
            and_(
                ticket_deciders.c.created_at == bindparam("at"),
                ticket_deciders.c.ticket_id > bindparam("id"),
            ),
        ),
        ticket_deciders.c.call_id.is_not(None),
        or_(ticket_deciders.c.barred.is_(None), ticket_deciders.c.barred != bindparam("viewer")),
    )
    .order_by(ticket_deciders.c.created_at, ticket_deciders.c.ticket_id)
    .limit(bindparam("limit"))
)
_OVERDUE = (
    select(tickets)
    .where(
        tickets.c.status == OPEN,
        tickets.c.deadline.is_not(None),
        tickets.c.deadline <= bindparam("now"),
    )
    .order_by(tickets.c.deadline, tickets.c.ticket_id)
    .limit(bindparam("limit"))
)


class TicketStatements(TransactionCore):
    """The tickets part of `SQLTransaction`."""

    async def insert_ticket(self, ticket: ResumeTicket) -> None:
        """Add a ticket; `ValueError` if its id exists or its call already has an open one."""
        call_id = ticket.call_id
        if call_id is not None and ticket.status is TicketStatus.OPEN:
            if call_id in self._fresh_calls:
                # A call of this transaction's own, without a ticket so far: nobody else
                # can have opened one. Its next ticket is looked for like any other's.
                self._fresh_calls.discard(call_id)
            else:
                # So that the check below cannot race another transaction inserting a
                # ticket for the same call.
                await self._lock_run(ticket.run_id)
                found = await self._execute(_OPEN_FOR_CALL, {"call_id": call_id})
                if found.first() is not None:
                    raise ValueError(f"call {call_id} already has an open ticket")
        await self._write(_INSERT_TICKET, TICKETS.values(ticket), table=tickets)
        if ticket.status is TicketStatus.OPEN:
            rows = decider_rows(ticket)
            if rows:
                await self._write(_INSERT_DECIDERS, rows, table=ticket_deciders)
        self.wrote = True

    async def get_ticket(self, ticket_id: str) -> ResumeTicket | None:
        """Read one ticket."""
        row = (await self._execute(_GET_TICKET, {"ticket_id": ticket_id})).first()
        return None if row is None else TICKETS.record(row)

    async def close_ticket(
        self,
        ticket_id: str,
        *,
        status: TicketStatus,
        at: datetime,
        decision: Answer | None = None,
        decided_by: str | None = None,
    ) -> bool:
        """Compare-and-set an open ticket to `status`; False if it was not open."""
        _check_close(status, decision)
        params = {
            "b_ticket_id": ticket_id,
            "status": TicketStatus(status).value,
            "decision": dump_answer(decision),
            "decided_by": decided_by,
            "decided_at": to_micros(at),
        }
        if (await self._execute(_CLOSE_TICKET, params)).rowcount != 1:
            return False
        await self._write(_DROP_DECIDERS, {"b_ticket_id": ticket_id}, table=ticket_deciders)
        self.wrote = True
        return True

    async def tickets_for_run(
        self, run_id: str, *, status: TicketStatus | None = None
    ) -> list[ResumeTicket]:
        """A run's tickets, oldest first."""
        if status is None:
            result = await self._execute(_TICKETS_FOR_RUN, {"run_id": run_id})
        else:
            params = {"run_id": run_id, "status": TicketStatus(status).value}
            result = await self._execute(_TICKETS_FOR_RUN_IN, params)
        return [TICKETS.record(row) for row in result]

    async def open_tickets(
        self, *, limit: int = 100, after: Position | None = None
    ) -> list[ResumeTicket]:
        """Open tickets of every run, oldest first (past `after`, when given)."""
        if after is None:
            result = await self._execute(_OPEN_TICKETS, {"limit": limit})
        else:
            params = {"limit": limit, "at": to_micros(after.at), "id": after.id}
            result = await self._execute(_OPEN_TICKETS_AFTER, params)
        return [TICKETS.record(row) for row in result]

    async def decidable_tickets(
        self,
        *,
        deciders: Sequence[str],
        viewer: str,
        limit: int = 100,
        after: Position | None = None,
    ) -> list[ResumeTicket]:
        """Open tool-call tickets one of `deciders` may decide (see `Transaction`)."""
        at, last = (to_micros(after.at), after.id) if after is not None else (-1, "")
        found: dict[str, int] = {}
        for key in dict.fromkeys(deciders):
            params = {"decider": key, "at": at, "id": last, "viewer": viewer, "limit": limit}
            for row in await self._execute(_DECIDABLE, params):
                found[row.ticket_id] = row.created_at
        page = sorted(found, key=lambda ticket_id: (found[ticket_id], ticket_id))[:limit]
        if not page:
            return []
        result = await self._execute(select(tickets).where(tickets.c.ticket_id.in_(page)))
        by_id = {row.ticket_id: TICKETS.record(row) for row in result}
        return [by_id[ticket_id] for ticket_id in page if ticket_id in by_id]

    async def open_ticket_for_call(self, call_id: str) -> ResumeTicket | None:
        """The open ticket waiting on a call, if any."""
        row = (await self._execute(_OPEN_FOR_CALL, {"call_id": call_id})).first()
        return None if row is None else TICKETS.record(row)

    async def overdue_tickets(self, now: datetime, limit: int) -> list[ResumeTicket]:
        """Open tickets whose deadline is at or before `now`, earliest deadline first."""
        params = {"now": to_micros(now), "limit": limit}
        return [TICKETS.record(row) for row in await self._execute(_OVERDUE, params)]


def _check_close(status: TicketStatus, decision: Answer | None) -> None:
    if status is TicketStatus.OPEN:
        raise ValueError("closing a ticket needs a status other than open")
    if status is TicketStatus.DECIDED and decision is None:
        raise ValueError("a decided ticket needs its decision")
