"""The audit: every run's events in sequence order, its safe horizon, and pruning.

**The horizon.** ``events.seq`` is taken when a row is inserted, but transactions
commit in their own order: on PostgreSQL a transaction holding seq 41 may commit after
one holding seq 42. A reader resuming after 42 would never see 41. So events are only
handed out up to a horizon below which no open transaction holds a number:

- PostgreSQL, without taking a lock (`PostgresTransaction._events_horizon` in
  `dialects`): read the last number the events' sequence handed out, committed or not;
  then, from ``pg_locks``, the transactions writing events at that moment (an ``INSERT``
  holds ``ROW EXCLUSIVE`` on the table from before it draws its numbers until its
  transaction ends, so every transaction that drew a number up to the last one has ended
  or is among them). Once those have ended (looked up again, at most
  `dialects.HORIZON_WAIT_SECONDS`), every number up to the last one is committed or
  will never be, and that is the horizon. Writers that start meanwhile are neither
  waited for nor held up: their numbers are higher. Events are written just before
  their transaction commits, so the wait is short.
- SQLite: one writer at a time, transactions commit in the order of their numbers; the
  highest committed ``seq`` is the horizon.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from sqlalchemy import BindParameter, bindparam, delete, func, select

from runtime.store.ports.audit import AuditEvent
from runtime.store.records import RunRecord
from runtime.store.schema import (
    events,
    grants,
    outbox,
    run_messages,
    runs,
    ticket_deciders,
    tickets,
    tool_calls,
)
from runtime.store.sql.convert import to_micros
from runtime.store.sql.executing import TransactionCore
from runtime.store.sql.rows import EVENTS, RUNS

_FINISHED = ("done", "failed", "cancelled")
_MAX_SEQ = select(func.coalesce(func.max(events.c.seq), 0).label("horizon"))


class AuditStatements(TransactionCore):
    """The audit part of `SQLTransaction`."""

    if TYPE_CHECKING:

        async def _flush_events(self) -> None: ...

    async def audit_horizon(self) -> int:
        """The highest sequence number no open transaction can still fill in below."""
        await self._flush_events()
        return await self._events_horizon()

    async def _events_horizon(self) -> int:
        """The horizon on this database (SQLite: the highest committed number, its
        transactions commit one at a time in the order of their numbers)."""
        result = await self._execute(_MAX_SEQ)
        return int(result.one()[0] or 0)

    async def audit_events(
        self,
        *,
        after: int,
        upto: int,
        limit: int,
        since: datetime | None = None,
        until: datetime | None = None,
    ) -> list[AuditEvent]:
        """Events with ``after < seq <= upto`` (and `since` <= at < `until`), in order."""
        await self._flush_events()
        query = (
            select(events, runs.c.agent.label("run_agent"))
            .join(runs, runs.c.run_id == events.c.run_id)
            .where(events.c.seq > after, events.c.seq <= upto)
        )
        if since is not None:
            query = query.where(events.c.at >= to_micros(since))
        if until is not None:
            query = query.where(events.c.at < to_micros(until))
        result = await self._execute(query.order_by(events.c.seq).limit(limit))
        return [AuditEvent(EVENTS.record(row), row.run_agent) for row in result]

    async def finished_runs(
        self, *, before: datetime, after: str | None, limit: int
    ) -> list[RunRecord]:
        """Finished top-level runs last written before `before`, by run id."""
        query = select(runs).where(
            runs.c.parent_run_id.is_(None),
            runs.c.status.in_(_FINISHED),
            runs.c.updated_at < to_micros(before),
        )
        if after is not None:
            query = query.where(runs.c.run_id > after)
        result = await self._execute(query.order_by(runs.c.run_id).limit(limit))
        return [RUNS.record(row) for row in result]

    async def delete_runs(self, run_ids: Sequence[str]) -> int:
        """Delete the runs and every row that names them, children first."""
        if not run_ids:
            return 0
        await self._flush_events()
        ids = list(run_ids)
        wanted: BindParameter[Any] = bindparam("ids", expanding=True)
        ticket_ids = select(tickets.c.ticket_id).where(tickets.c.run_id.in_(wanted))
        for statement in (
            delete(ticket_deciders).where(ticket_deciders.c.ticket_id.in_(ticket_ids)),
            delete(tickets).where(tickets.c.run_id.in_(wanted)),
            delete(tool_calls).where(tool_calls.c.run_id.in_(wanted)),
            delete(events).where(events.c.run_id.in_(wanted)),
            delete(outbox).where(outbox.c.run_id.in_(wanted)),
            delete(grants).where(grants.c.run_id.in_(wanted)),
            delete(run_messages).where(run_messages.c.run_id.in_(wanted)),
        ):
            await self._execute(statement, {"ids": ids})
        result = await self._execute(delete(runs).where(runs.c.run_id.in_(wanted)), {"ids": ids})
        self.wrote = True
        return int(result.rowcount)
