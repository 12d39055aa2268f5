"""An in-memory store for unit tests and examples. Same contract as the SQL store."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import TypeVar

from runtime.domain.errors import LeaseLost
from runtime.domain.states import CallState, RunStatus, TicketStatus
from runtime.domain.tickets import Answer, ResumeTicket
from runtime.store.base import DuplicateKey
from runtime.store.memory_people import MemoryPeople
from runtime.store.ports.audit import AuditEvent
from runtime.store.ports.leases import Figures
from runtime.store.records import (
    CALL_CREATED_WITH,
    RUN_CREATED_WITH,
    CallRecord,
    EventRecord,
    GrantRecord,
    IdempotencyRecord,
    OutboxRecord,
    Position,
    ReceivedRecord,
    RunFlags,
    RunRecord,
    decider_keys,
)

_FLAGS = ("pause_requested", "cancel_requested")


class _Tables:
    def __init__(self) -> None:
        self.runs: dict[str, RunRecord] = {}
        self.calls: dict[str, CallRecord] = {}
        self.tickets: dict[str, ResumeTicket] = {}
        self.events: dict[str, list[EventRecord]] = {}
        self.outbox: dict[str, OutboxRecord] = {}
        self.keys: dict[tuple[str, str], IdempotencyRecord] = {}
        self.received: dict[str, ReceivedRecord] = {}
        self.revoked: dict[str, datetime] = {}
        self.pacing: dict[str, datetime] = {}
        self.leases: dict[str, tuple[str, int, datetime]] = {}
        self.grants: dict[str, GrantRecord] = {}
        self.links: dict[str, str] = {}
        self.link_sources: dict[str, str] = {}
        self.link_codes: dict[str, tuple[str, datetime]] = {}
        self.mcp_oauth: dict[str, str] = {}

    def snapshot(self) -> _Tables:
        # Records are never mutated in place (reads and writes copy), so copying the
        # dicts is enough to roll back.
        other = _Tables()
        other.runs = dict(self.runs)
        other.calls = dict(self.calls)
        other.tickets = dict(self.tickets)
        other.events = {k: list(v) for k, v in self.events.items()}
        other.outbox = dict(self.outbox)
        other.keys = dict(self.keys)
        other.received = dict(self.received)
        other.revoked = dict(self.revoked)
        other.pacing = dict(self.pacing)
        other.leases = dict(self.leases)
        other.grants = dict(self.grants)
        other.links = dict(self.links)
        other.link_sources = dict(self.link_sources)
        other.link_codes = dict(self.link_codes)
        other.mcp_oauth = dict(self.mcp_oauth)
        return other


_T = TypeVar("_T")


def _copy(value: _T) -> _T:
    return copy.deepcopy(value)


class MemoryTransaction(MemoryPeople):
    """A transaction over `MemoryStore`; all transactions run one at a time."""

    def __init__(self, tables: _Tables) -> None:
        self._t: _Tables = tables
        self.wrote = False

    # runs (RunPort) -----------------------------------------------------------------------
    async def insert_run(self, run: RunRecord) -> None:
        if run.run_id in self._t.runs:
            raise ValueError(f"run {run.run_id} exists")
        if run.parent_run_id is not None and any(
            r.parent_run_id == run.parent_run_id and r.task_key == run.task_key
            for r in self._t.runs.values()
        ):
            raise DuplicateKey(f"run {run.parent_run_id} already has a task {run.task_key!r}")
        self.wrote = True
        self._t.runs[run.run_id] = _copy(run)

    async def get_run(self, run_id: str, *, for_update: bool = False) -> RunRecord | None:
        run = self._t.runs.get(run_id)
        return _copy(run) if run else None

    async def update_run(self, run: RunRecord, *, fence: int | None = None) -> RunFlags:
        stored = self._t.runs.get(run.run_id)
        if stored is None:
            raise ValueError(f"run {run.run_id} does not exist")
        if fence is not None and stored.fence != fence:
            raise LeaseLost(f"run {run.run_id}: lease fence {fence} was superseded")
        self.wrote = True
        new = _copy(run)
        for kept in (*_FLAGS, *RUN_CREATED_WITH):
            setattr(new, kept, getattr(stored, kept))
        self._t.runs[run.run_id] = new
        return RunFlags(stored.pause_requested, stored.cancel_requested)

    async def set_run_flags(
        self, run_id: str, *, pause: bool | None = None, cancel: bool | None = None
    ) -> None:
        stored = self._t.runs.get(run_id)
        if stored is None:
            raise ValueError(f"run {run_id} does not exist")
        self.wrote = True
        self._t.runs[run_id] = replace(
            stored,
            pause_requested=stored.pause_requested if pause is None else pause,
            cancel_requested=stored.cancel_requested if cancel is None else cancel,
        )

    async def claim_run(
        self, run_id: str, *, owner: str, now: datetime, until: datetime
    ) -> RunRecord | None:
        run = self._t.runs.get(run_id)
        if run is None or not _claimable(run, now):
            return None
        self.wrote = True
        claimed = replace(
            _copy(run),
            status=RunStatus.RUNNING,
            fence=run.fence + 1,
            lease_owner=owner,
            lease_expires_at=until,
            updated_at=now,
        )
        self._t.runs[run_id] = claimed
        return _copy(claimed)

    async def renew_lease(self, run_id: str, *, fence: int, until: datetime) -> bool:
        run = self._t.runs.get(run_id)
        if run is None or run.fence != fence or run.status is not RunStatus.RUNNING:
            return False
        self.wrote = True
        self._t.runs[run_id] = replace(run, lease_expires_at=until)
        return True

    async def claimable_runs(self, now: datetime, limit: int) -> list[str]:
        found = sorted(
            (r for r in self._t.runs.values() if _claimable(r, now)),
            key=lambda r: (r.updated_at, r.run_id),
        )
        return [r.run_id for r in found[:limit]]

    async def list_runs(
        self,
        *,
        statuses: Sequence[RunStatus] = (),
        thread_id: str | None = None,
        limit: int = 100,
        involving: str | None = None,
        including: Sequence[str] = (),
        deciders: Sequence[str] = (),
        before: Position | None = None,
    ) -> list[RunRecord]:
        involved: set[str] = set()
        if involving is not None:
            involved = set(including) | {
                t.run_id for t in self._t.tickets.values() if t.decided_by == involving
            }
            if deciders:
                involved |= self._deciding_runs(deciders, involving)
        # Newest first; runs created at the same time, the later inserted first.
        order = {run_id: n for n, run_id in enumerate(self._t.runs)}
        last = (before.at, order.get(before.id, -1)) if before is not None else None
        found = [
            r
            for r in self._t.runs.values()
            if (not statuses or r.status in statuses)
            and (thread_id is None or r.thread_id == thread_id)
            and (involving is None or r.requester == involving or r.run_id in involved)
            and (last is None or (r.created_at, order[r.run_id]) < last)
        ]
        found.sort(key=lambda r: (r.created_at, order[r.run_id]), reverse=True)
        return [_copy(r) for r in found[:limit]]

    async def count_runs(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for run in self._t.runs.values():
            counts[run.status.value] = counts.get(run.status.value, 0) + 1
        return counts

    async def child_run(self, parent_run_id: str, task_key: str) -> RunRecord | None:
        for run in self._t.runs.values():
            if run.parent_run_id == parent_run_id and run.task_key == task_key:
                return _copy(run)
        return None

    async def child_runs(self, parent_run_id: str) -> list[RunRecord]:
        found = [r for r in self._t.runs.values() if r.parent_run_id == parent_run_id]
        found.sort(key=lambda r: r.created_at)
        return [_copy(r) for r in found]

    # tool calls (CallPort) ----------------------------------------------------------------
    async def insert_call(self, call: CallRecord) -> None:
        if call.call_id in self._t.calls:
            raise ValueError(f"call {call.call_id} exists")
        if any(c.execution_key == call.execution_key for c in self._t.calls.values()):
            raise ValueError(f"execution key {call.execution_key} is taken")
        self.wrote = True
        self._t.calls[call.call_id] = _copy(call)

    async def update_call(self, call: CallRecord) -> None:
        stored = self._t.calls.get(call.call_id)
        if stored is None:
            raise ValueError(f"call {call.call_id} does not exist")
        self.wrote = True
        new = _copy(call)
        for kept in CALL_CREATED_WITH:
            setattr(new, kept, getattr(stored, kept))
        self._t.calls[call.call_id] = new

    async def get_call(self, call_id: str) -> CallRecord | None:
        call = self._t.calls.get(call_id)
        return _copy(call) if call else None

    async def calls_for_run(self, run_id: str, *, batch: int | None = None) -> list[CallRecord]:
        found = [
            c
            for c in self._t.calls.values()
            if c.run_id == run_id and (batch is None or c.batch == batch)
        ]
        found.sort(key=lambda c: (c.batch, c.seq))
        return [_copy(c) for c in found]

    async def call_by_execution_key(self, execution_key: str) -> CallRecord | None:
        for call in self._t.calls.values():
            if call.execution_key == execution_key:
                return _copy(call)
        return None

    # tickets (TicketPort) -----------------------------------------------------------------
    async def insert_ticket(self, ticket: ResumeTicket) -> None:
        if ticket.ticket_id in self._t.tickets:
            raise ValueError(f"ticket {ticket.ticket_id} exists")
        call_id = ticket.call_id
        if call_id is not None and ticket.status is TicketStatus.OPEN:
            for other in self._t.tickets.values():
                if other.call_id == call_id and other.status is TicketStatus.OPEN:
                    raise ValueError(f"call {call_id} already has an open ticket")
        self.wrote = True
        self._t.tickets[ticket.ticket_id] = ticket

    async def get_ticket(self, ticket_id: str) -> ResumeTicket | None:
        return self._t.tickets.get(ticket_id)

    async def close_ticket(
        self,
        ticket_id: str,
        *,
        status: TicketStatus,
        at: datetime,
        decision: Answer | None = None,
        decided_by: str | None = None,
    ) -> bool:
        if status is TicketStatus.OPEN:
            raise ValueError("closing a ticket needs a status other than open")
        if status is TicketStatus.DECIDED and decision is None:
            raise ValueError("a decided ticket needs its decision")
        ticket = self._t.tickets.get(ticket_id)
        if ticket is None or ticket.status is not TicketStatus.OPEN:
            return False
        self.wrote = True
        self._t.tickets[ticket_id] = ticket.model_copy(
            update={
                "status": status,
                "decision": decision,
                "decided_by": decided_by,
                "decided_at": at,
            }
        )
        return True

    async def tickets_for_run(
        self, run_id: str, *, status: TicketStatus | None = None
    ) -> list[ResumeTicket]:
        found = [
            t
            for t in self._t.tickets.values()
            if t.run_id == run_id and (status is None or t.status is status)
        ]
        return sorted(found, key=lambda t: t.created_at)

    async def open_tickets(
        self, *, limit: int = 100, after: Position | None = None
    ) -> list[ResumeTicket]:
        found = [
            t
            for t in self._t.tickets.values()
            if t.status is TicketStatus.OPEN and _past(t.created_at, t.ticket_id, after)
        ]
        return sorted(found, key=lambda t: (t.created_at, t.ticket_id))[:limit]

    async def decidable_tickets(
        self,
        *,
        deciders: Sequence[str],
        viewer: str,
        limit: int = 100,
        after: Position | None = None,
    ) -> list[ResumeTicket]:
        wanted = set(deciders)
        found = [
            t
            for t in self._t.tickets.values()
            if t.status is TicketStatus.OPEN
            and t.call_id is not None
            and _past(t.created_at, t.ticket_id, after)
            and not (t.four_eyes and t.requester == viewer)
            and wanted.intersection(decider_keys(t))
        ]
        return sorted(found, key=lambda t: (t.created_at, t.ticket_id))[:limit]

    def _deciding_runs(self, deciders: Sequence[str], viewer: str) -> set[str]:
        wanted = set(deciders)
        found = {
            t.run_id
            for t in self._t.tickets.values()
            if t.status is TicketStatus.OPEN
            and t.target.kind != "child"
            and not (t.four_eyes and t.requester == viewer)
            and wanted.intersection(decider_keys(t))
        }
        while True:
            below = {
                r.run_id
                for r in self._t.runs.values()
                if r.parent_run_id in found and r.run_id not in found
            }
            if not below:
                return found
            found |= below

    async def open_ticket_for_call(self, call_id: str) -> ResumeTicket | None:
        for ticket in self._t.tickets.values():
            if ticket.call_id == call_id and ticket.status is TicketStatus.OPEN:
                return ticket
        return None

    async def overdue_tickets(self, now: datetime, limit: int) -> list[ResumeTicket]:
        found = [
            t
            for t in self._t.tickets.values()
            if t.status is TicketStatus.OPEN and t.deadline is not None and t.deadline <= now
        ]
        return sorted(found, key=lambda t: (t.deadline or now, t.ticket_id))[:limit]

    # flight recorder (EventPort) ----------------------------------------------------------
    async def append_event(self, event: EventRecord) -> None:
        self.wrote = True
        log = self._t.events.setdefault(event.run_id, [])
        # One sequence across every run, as the SQL store's.
        seq = 1 + max((e[-1].seq for e in self._t.events.values() if e), default=0)
        log.append(replace(_copy(event), seq=seq))

    async def events(self, run_id: str, *, after: int = 0) -> list[EventRecord]:
        return [_copy(e) for e in self._t.events.get(run_id, []) if e.seq > after]

    # audit (AuditPort) --------------------------------------------------------------------
    async def audit_horizon(self) -> int:
        # Transactions run one at a time: everything stored is committed.
        return max((e[-1].seq for e in self._t.events.values() if e), default=0)

    async def audit_events(
        self,
        *,
        after: int,
        upto: int,
        limit: int,
        since: datetime | None = None,
        until: datetime | None = None,
    ) -> list[AuditEvent]:
        found = sorted(
            (
                e
                for log in self._t.events.values()
                for e in log
                if after < e.seq <= upto
                and (since is None or e.at >= since)
                and (until is None or e.at < until)
            ),
            key=lambda e: e.seq,
        )[:limit]
        return [AuditEvent(_copy(e), self._t.runs[e.run_id].agent) for e in found]

    async def finished_runs(
        self, *, before: datetime, after: str | None, limit: int
    ) -> list[RunRecord]:
        found = sorted(
            (
                r
                for r in self._t.runs.values()
                if r.parent_run_id is None
                and r.status.finished
                and r.updated_at < before
                and (after is None or r.run_id > after)
            ),
            key=lambda r: r.run_id,
        )
        return [_copy(r) for r in found[:limit]]

    async def delete_runs(self, run_ids: Sequence[str]) -> int:
        gone = {r for r in run_ids if r in self._t.runs}
        if not gone:
            return 0
        self.wrote = True
        for table in (self._t.calls, self._t.tickets, self._t.outbox, self._t.grants):
            for key in [k for k, v in table.items() if v.run_id in gone]:
                del table[key]
        for run_id in gone:
            self._t.events.pop(run_id, None)
            del self._t.runs[run_id]
        return len(gone)

    # outbox (OutboxPort) ------------------------------------------------------------------
    async def add_outbox(self, item: OutboxRecord) -> None:
        if item.outbox_id in self._t.outbox:
            raise ValueError(f"outbox item {item.outbox_id} exists")
        self.wrote = True
        self._t.outbox[item.outbox_id] = _copy(item)

    async def due_outbox(self, now: datetime, limit: int) -> list[OutboxRecord]:
        found = [
            o for o in self._t.outbox.values() if o.state == "pending" and o.next_attempt_at <= now
        ]
        found.sort(key=lambda o: o.created_at)
        return [_copy(o) for o in found[:limit]]

    async def claim_outbox(
        self,
        now: datetime,
        limit: int,
        *,
        owner: str,
        until: datetime,
        pacing: Mapping[str, float] | None = None,
    ) -> list[OutboxRecord]:
        intervals = pacing or {}
        due = [
            o
            for o in self._t.outbox.values()
            if o.state == "pending"
            and o.next_attempt_at <= now
            and (o.lease_expires_at is None or o.lease_expires_at <= now)
        ]
        due.sort(key=lambda o: (o.created_at, o.outbox_id))
        claimed: list[OutboxRecord] = []
        for item in due:
            if len(claimed) >= limit:
                break
            key = item.pacing_key
            interval = intervals.get(key.split(":", 1)[0]) if key is not None else None
            if key is not None and interval is not None:
                slot = self._t.pacing.get(key)
                if slot is not None and slot > now:
                    continue
                self._t.pacing[key] = now + timedelta(seconds=interval)
            taken = replace(item, lease_owner=owner, lease_expires_at=until, fence=item.fence + 1)
            self._t.outbox[item.outbox_id] = taken
            claimed.append(_copy(taken))
        if claimed:
            self.wrote = True
        return claimed

    async def update_outbox(self, item: OutboxRecord, *, fence: int | None = None) -> bool:
        stored = self._t.outbox.get(item.outbox_id)
        if stored is None:
            raise ValueError(f"outbox item {item.outbox_id} does not exist")
        if fence is not None and (stored.fence != fence or stored.state != "pending"):
            return False
        self.wrote = True
        self._t.outbox[item.outbox_id] = _copy(item)
        return True

    async def outbox_for_run(self, run_id: str) -> list[OutboxRecord]:
        found = [o for o in self._t.outbox.values() if o.run_id == run_id]
        found.sort(key=lambda o: o.created_at)
        return [_copy(o) for o in found]

    async def find_outbox(self, *, ticket_id: str, kind: str) -> OutboxRecord | None:
        found = [o for o in self._t.outbox.values() if o.ticket_id == ticket_id and o.kind == kind]
        found.sort(key=lambda o: o.created_at)
        return _copy(found[0]) if found else None

    async def first_posted(self, run_id: str, channel: str) -> OutboxRecord | None:
        found = [
            o for o in self._t.outbox.values() if o.run_id == run_id and o.posted_in == channel
        ]
        return _copy(min(found, key=lambda o: (o.created_at, o.outbox_id))) if found else None

    # idempotency keys and revoked sessions (KeyPort) --------------------------------------
    async def get_idempotency(self, scope: str, key: str) -> IdempotencyRecord | None:
        found = self._t.keys.get((scope, key))
        return _copy(found) if found else None

    async def insert_idempotency(self, item: IdempotencyRecord) -> None:
        if (item.scope, item.key) in self._t.keys:
            raise DuplicateKey(f"idempotency key {item.key!r} already used in {item.scope}")
        self.wrote = True
        self._t.keys[(item.scope, item.key)] = _copy(item)

    async def forget_idempotency(self, scope: str, before: datetime) -> int:
        old = [k for k, v in self._t.keys.items() if k[0] == scope and v.created_at < before]
        for key in old:
            del self._t.keys[key]
        self.wrote = self.wrote or bool(old)
        return len(old)

    async def revoke_session(self, session_id: str, expires_at: datetime) -> None:
        self.wrote = True
        self._t.revoked[session_id] = max(expires_at, self._t.revoked.get(session_id, expires_at))

    async def session_revoked(self, session_id: str) -> bool:
        return session_id in self._t.revoked

    async def forget_revoked_sessions(self, before: datetime) -> int:
        old = [k for k, until in self._t.revoked.items() if until < before]
        for key in old:
            del self._t.revoked[key]
        self.wrote = self.wrote or bool(old)
        return len(old)

    # received chat commands (ReceivedPort) ------------------------------------------------
    async def insert_received(self, item: ReceivedRecord) -> bool:
        for other in self._t.received.values():
            if (other.source, other.delivery_id) == (item.source, item.delivery_id):
                return False
        if item.command_id in self._t.received:
            raise ValueError(f"received command {item.command_id} exists")
        self.wrote = True
        self._t.received[item.command_id] = _copy(item)
        return True

    async def pending_received(self, limit: int) -> list[ReceivedRecord]:
        found = [r for r in self._t.received.values() if r.state == "pending"]
        found.sort(key=lambda r: r.received_at)
        return [_copy(r) for r in found[:limit]]

    async def claim_received(
        self, now: datetime, limit: int, *, owner: str, until: datetime
    ) -> list[ReceivedRecord]:
        found = [
            r
            for r in self._t.received.values()
            if r.state == "pending" and (r.lease_expires_at is None or r.lease_expires_at <= now)
        ]
        found.sort(key=lambda r: (r.received_at, r.command_id))
        claimed = []
        for item in found[:limit]:
            taken = replace(item, lease_owner=owner, lease_expires_at=until)
            self._t.received[item.command_id] = taken
            claimed.append(_copy(taken))
        if claimed:
            self.wrote = True
        return claimed

    async def update_received(self, item: ReceivedRecord, *, only_pending: bool = False) -> bool:
        stored = self._t.received.get(item.command_id)
        if stored is None:
            raise ValueError(f"received command {item.command_id} does not exist")
        if only_pending and stored.state != "pending":
            return False
        self.wrote = True
        self._t.received[item.command_id] = _copy(item)
        return True

    # standing grants (GrantPort) ----------------------------------------------------------
    async def insert_grant(self, grant: GrantRecord) -> None:
        if grant.grant_id in self._t.grants:
            raise ValueError(f"grant {grant.grant_id} exists")
        if grant.run_id not in self._t.runs:
            raise ValueError(f"run {grant.run_id} does not exist")
        self.wrote = True
        self._t.grants[grant.grant_id] = _copy(grant)

    async def get_grant(self, grant_id: str) -> GrantRecord | None:
        grant = self._t.grants.get(grant_id)
        return _copy(grant) if grant else None

    async def active_grants(
        self, *, agent: str, tool: str, run_id: str, thread_id: str, now: datetime
    ) -> list[GrantRecord]:
        found = [
            g
            for g in self._t.grants.values()
            if g.agent == agent
            and g.tool == tool
            and g.active(now)
            and (
                (g.scope == "run" and g.run_id == run_id)
                or (g.scope == "thread" and g.thread_id == thread_id)
            )
        ]
        found.sort(key=lambda g: (g.created_at, g.grant_id))
        return [_copy(g) for g in found]

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
        found = [
            g
            for g in self._t.grants.values()
            if (run_id is None or g.run_id == run_id)
            and (thread_id is None or g.thread_id == thread_id)
            and (scope is None or g.scope == scope)
            and (involving is None or involving in (g.granted_by, g.requester))
            and (active_at is None or g.active(active_at))
        ]
        found.sort(key=lambda g: (g.created_at, g.grant_id), reverse=True)
        return [_copy(g) for g in found[:limit]]

    async def revoke_grant(self, grant_id: str, *, by: str, at: datetime) -> bool:
        grant = self._t.grants.get(grant_id)
        if grant is None or grant.revoked_at is not None:
            return False
        self.wrote = True
        self._t.grants[grant_id] = replace(grant, revoked_at=at, revoked_by=by)
        return True

    # named leases and figures (LeasePort) -------------------------------------------------
    async def take_lease(
        self, name: str, *, owner: str, now: datetime, until: datetime
    ) -> int | None:
        held = self._t.leases.get(name)
        if held is None:
            fence = 1
        elif held[0] == owner:
            fence = held[1]
        elif held[2] <= now:
            fence = held[1] + 1
        else:
            return None
        self.wrote = True
        self._t.leases[name] = (owner, fence, until)
        return fence

    async def drop_lease(self, name: str, *, owner: str) -> None:
        held = self._t.leases.get(name)
        if held is not None and held[0] == owner:
            self.wrote = True
            # Kept, expired: fences only grow.
            self._t.leases[name] = (owner, held[1], datetime.min.replace(tzinfo=UTC))

    async def stats(self) -> dict[str, int]:
        outbox = list(self._t.outbox.values())
        return {
            "open_tickets": sum(
                1 for t in self._t.tickets.values() if t.status is TicketStatus.OPEN
            ),
            "outbox_pending": sum(1 for o in outbox if o.state == "pending"),
            "outbox_failed": sum(1 for o in outbox if o.state == "failed"),
        }

    async def figures(self, now: datetime) -> Figures:
        tickets = [t for t in self._t.tickets.values() if t.status is TicketStatus.OPEN]
        outbox = list(self._t.outbox.values())
        runs = list(self._t.runs.values())
        return Figures(
            open_tickets=len(tickets),
            overdue_tickets=sum(1 for t in tickets if t.deadline is not None and t.deadline <= now),
            outbox_pending=sum(1 for o in outbox if o.state == "pending"),
            outbox_failed=sum(1 for o in outbox if o.state == "failed"),
            received_pending=sum(1 for r in self._t.received.values() if r.state == "pending"),
            runs_queued=sum(1 for r in runs if r.status is RunStatus.QUEUED),
            runs_lease_expired=sum(
                1 for r in runs if r.status is RunStatus.RUNNING and _claimable(r, now)
            ),
            uncertain_calls=sum(
                1 for c in self._t.calls.values() if c.state is CallState.UNCERTAIN
            ),
        )


def _past(at: datetime, item_id: str, after: Position | None) -> bool:
    return after is None or (at, item_id) > (after.at, after.id)


def _claimable(run: RunRecord, now: datetime) -> bool:
    if run.status is RunStatus.QUEUED:
        return True
    return (
        run.status is RunStatus.RUNNING
        and run.lease_expires_at is not None
        and run.lease_expires_at <= now
    )


class MemoryStore:
    """Keeps everything in process memory; transactions are serialised by one lock."""

    def __init__(self) -> None:
        self._tables = _Tables()
        self._lock = asyncio.Lock()
        self._commits = 0

    async def migrate(self) -> None:
        """Nothing to create."""

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[MemoryTransaction]:
        """Run a transaction; an exception restores the state from before it."""
        async with self._lock:
            before = self._tables.snapshot()
            tx = MemoryTransaction(self._tables)
            try:
                yield tx
            except BaseException:
                self._tables.runs = before.runs
                self._tables.calls = before.calls
                self._tables.tickets = before.tickets
                self._tables.events = before.events
                self._tables.outbox = before.outbox
                self._tables.keys = before.keys
                self._tables.received = before.received
                self._tables.pacing = before.pacing
                self._tables.leases = before.leases
                self._tables.revoked = before.revoked
                self._tables.grants = before.grants
                self._tables.links = before.links
                self._tables.link_sources = before.link_sources
                self._tables.link_codes = before.link_codes
                self._tables.mcp_oauth = before.mcp_oauth
                raise
            if tx.wrote:
                self._commits += 1

    async def close(self) -> None:
        """Nothing to release."""

    @property
    def commits(self) -> int:
        """Write transactions committed so far."""
        return self._commits
