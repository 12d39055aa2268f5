"""Reading runs, tickets, events and cards, each through the viewer's visibility."""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Generic, TypeVar

from runtime.domain.errors import RunNotFound, UnknownTicket
from runtime.domain.notifications import CARD_KINDS as CARD_KINDS
from runtime.domain.states import RunStatus, TicketStatus
from runtime.domain.tickets import Actor, Child, ResumeTicket
from runtime.domain.visibility import sees_run
from runtime.engine import delegation
from runtime.engine.deps import Deps
from runtime.engine.journal import display_args, grant_scopes
from runtime.engine.results import PendingEntry, RunResult, pending_entry, run_result
from runtime.store.base import Transaction
from runtime.store.records import CallRecord, Position, RunRecord, viewer_keys

_T = TypeVar("_T")
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True, slots=True)
class CardRef:
    """Where a ticket's card was posted.

    Attributes:
        kind: The notification that posted it (one of `CARD_KINDS`).
        ref: The platform's message reference (empty until it was posted).
        destination: Where it was addressed (the run's origin: channel, guild ...).
    """

    kind: str
    ref: dict[str, Any]
    destination: dict[str, Any]


class InvalidCursor(ValueError):
    """A listing's cursor is malformed, or was handed out to another viewer or listing."""


@dataclass(frozen=True, slots=True)
class Page(Generic[_T]):
    """One page of a listing.

    Attributes:
        items: What the page holds, in the listing's order. It may hold fewer than the
            limit (even none) while more follow: items the viewer may not see are left
            out after the store's page was read.
        next_cursor: Pass it back for the next page; None when this page is the last.
    """

    items: list[_T]
    next_cursor: str | None


def _viewer_tag(viewer: Actor | None) -> str:
    if viewer is None:
        return "host"
    return f"operator:{viewer.id}" if viewer.operator else f"user:{viewer.id}"


def encode_cursor(listing: str, viewer: Actor | None, position: Position) -> str:
    """An opaque cursor for the page after `position` of `listing`, for `viewer` only."""
    micros = (position.at - _EPOCH) // timedelta(microseconds=1)
    raw = json.dumps(
        {"l": listing, "v": _viewer_tag(viewer), "t": micros, "i": position.id},
        separators=(",", ":"),
    )
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def decode_cursor(listing: str, viewer: Actor | None, cursor: str | None) -> Position | None:
    """The position a cursor of `encode_cursor` stands for (None for no cursor).

    Raises:
        InvalidCursor: It is not one of ours, or was made for another viewer or listing.
    """
    if cursor is None or cursor == "":
        return None
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        data = json.loads(base64.urlsafe_b64decode(padded.encode("ascii")))
        at = _EPOCH + timedelta(microseconds=int(data["t"]))
        position = Position(at, str(data["i"]))
        mine = data["l"] == listing and data["v"] == _viewer_tag(viewer)
    except (ValueError, TypeError, KeyError, OverflowError, binascii.Error):
        raise InvalidCursor("the cursor is not valid; start again without one") from None
    if not isinstance(data["i"], str) or not isinstance(data["t"], int):
        raise InvalidCursor("the cursor is not valid; start again without one")
    if not mine:
        raise InvalidCursor("the cursor belongs to another listing; start again without one")
    return position


def person_keys(viewer: Actor) -> tuple[str, ...]:
    """The decider keys of every id of `viewer` (`Actor.ids`: their linked ids too)."""
    keys = (key for identity in sorted(viewer.ids) for key in viewer_keys(identity, viewer.groups))
    return tuple(dict.fromkeys(keys))


def _seq(entry: PendingEntry, calls: dict[str, CallRecord]) -> int:
    call = calls.get(entry.call.call_id)
    return call.seq if call is not None else -1


def _ordered(entries: list[PendingEntry], calls: dict[str, CallRecord]) -> tuple[PendingEntry, ...]:
    """Pending entries in the order their tickets were opened, a batch's by proposal."""
    entries.sort(key=lambda e: (e.ticket.created_at, e.call.call_id in calls, _seq(e, calls)))
    return tuple(entries)


class Queries:
    """Read-only views of the store; see `runtime.domain.visibility` for who sees what."""

    def __init__(self, deps: Deps) -> None:
        self._deps = deps

    async def get(self, run_id: str, viewer: Actor | None = None) -> RunResult:
        """The run with its pending entries (`RunNotFound` if unknown or not visible)."""
        async with self._deps.store.transaction() as tx:
            return await self.get_in(tx, run_id, viewer)

    async def get_in(self, tx: Transaction, run_id: str, viewer: Actor | None = None) -> RunResult:
        """`get` inside an open transaction."""
        run = await tx.get_run(run_id)
        if run is None or not await self.sees(tx, viewer, run):
            raise RunNotFound(f"no run {run_id!r}")
        below = await delegation.descendants(tx, run.run_id)
        return run_result(
            run,
            await self.pending(tx, run),
            children=[r for r in below if r.parent_run_id == run.run_id],
            children_totals=delegation.totals(below),
        )

    async def children(self, run_id: str, viewer: Actor | None = None) -> list[RunResult]:
        """The sub-agent runs `run_id` started, oldest first (`RunNotFound` as `get`)."""
        async with self._deps.store.transaction() as tx:
            run = await tx.get_run(run_id)
            if run is None or not await self.sees(tx, viewer, run):
                raise RunNotFound(f"no run {run_id!r}")
            found = await tx.child_runs(run_id)
            return [run_result(child, await self.pending(tx, child)) for child in found]

    async def sees(self, tx: Transaction, viewer: Actor | None, run: RunRecord) -> bool:
        """Whether `viewer` may see `run` (None: trusted host code): whoever may see a
        parent run sees its sub-agents' runs too."""
        if viewer is None or viewer.operator or run.requester in viewer.ids:
            return True
        if sees_run(viewer, run.requester, await tx.tickets_for_run(run.run_id)):
            return True
        for ancestor in reversed(run.lineage):
            parent = await tx.get_run(ancestor["run_id"])
            if parent is not None and sees_run(
                viewer, parent.requester, await tx.tickets_for_run(parent.run_id)
            ):
                return True
        return False

    async def ticket(self, ticket_id: str, viewer: Actor | None = None) -> ResumeTicket:
        """A ticket the viewer may see or decide (`UnknownTicket` otherwise)."""
        async with self._deps.store.transaction() as tx:
            ticket = await tx.get_ticket(ticket_id)
            visible = ticket is not None and (
                viewer is None
                or ticket.may_decide(viewer)
                or await self._sees_run_id(tx, viewer, ticket.run_id)
            )
        if ticket is None or not visible:
            raise UnknownTicket(f"no ticket {ticket_id!r} exists")
        return ticket

    async def _sees_run_id(self, tx: Transaction, viewer: Actor, run_id: str) -> bool:
        run = await tx.get_run(run_id)
        return run is not None and await self.sees(tx, viewer, run)

    async def may_see(self, run_id: str, viewer: Actor) -> bool:
        """Whether `viewer` may see the run (False for an unknown run too)."""
        async with self._deps.store.transaction() as tx:
            return await self._sees_run_id(tx, viewer, run_id)

    async def pending(self, tx: Transaction, run: RunRecord) -> tuple[PendingEntry, ...]:
        """The run's open tool-call tickets, in the order their calls were proposed; a
        call waiting on a sub-agent's run stands for that run's own pending entries."""
        if run.status.finished:
            return ()
        tickets = await tx.tickets_for_run(run.run_id, status=TicketStatus.OPEN)
        if not any(t.call_id for t in tickets):
            return ()
        calls = {c.call_id: c for c in await tx.calls_for_run(run.run_id, batch=run.batch)}
        entries: list[PendingEntry] = []
        for ticket in tickets:
            if isinstance(ticket.target, Child):
                child = await tx.get_run(ticket.target.child_run_id)
                if child is not None:
                    entries.extend(await self.pending(tx, child))
                continue
            call = calls.get(ticket.call_id or "")
            if call is None and ticket.call_id is not None:
                call = await tx.get_call(ticket.call_id)
            entry = self._entry(ticket, call)
            if entry is not None:
                entries.append(entry)
        return _ordered(entries, calls)

    def known_pending(
        self, tickets: Sequence[ResumeTicket], calls: Sequence[CallRecord]
    ) -> tuple[PendingEntry, ...]:
        """`pending` without reading: from every open ticket of a run and its current
        batch's calls, as the transaction that parked it left them (none of the tickets
        waits on a sub-agent's run)."""
        by_id = {c.call_id: c for c in calls}
        entries: list[PendingEntry] = []
        for ticket in tickets:
            entry = self._entry(ticket, by_id.get(ticket.call_id or ""))
            if entry is not None:
                entries.append(entry)
        return _ordered(entries, by_id)

    def _entry(self, ticket: ResumeTicket, call: CallRecord | None) -> PendingEntry | None:
        if call is None:
            return None
        agent = self._deps.agents.get(ticket.agent)
        masked = display_args(agent, call.tool, call.args)
        tool = agent.tools.get(call.tool) if agent is not None else None
        editable = tool.editable_for(call.args) if tool is not None else ()
        return pending_entry(ticket, call, masked, grant_scopes(agent, ticket), editable=editable)

    async def list_runs(
        self,
        statuses: Sequence[RunStatus | str],
        thread_id: str | None,
        limit: int,
        viewer: Actor | None,
    ) -> list[RunResult]:
        """Runs, newest first, that `viewer` may see (no pending lists)."""
        return (await self.run_page(statuses, thread_id, limit, viewer, None)).items

    async def run_page(
        self,
        statuses: Sequence[RunStatus | str],
        thread_id: str | None,
        limit: int,
        viewer: Actor | None,
        cursor: str | None,
    ) -> Page[RunResult]:
        """A page of the runs `viewer` may see, newest first (no pending lists).

        Who may see a run is answered by the store's indexes (see
        `runtime.store.base.Transaction.list_runs`): the work is bounded by the page,
        not by how many tickets are open.

        Raises:
            InvalidCursor: `cursor` is not one this listing gave `viewer`.
        """
        wanted = [RunStatus(s) for s in statuses]
        before = decode_cursor("runs", viewer, cursor)
        found: list[RunRecord] = []
        async with self._deps.store.transaction() as tx:
            if viewer is None or viewer.operator:
                found = await tx.list_runs(
                    statuses=wanted, thread_id=thread_id, limit=limit + 1, before=before
                )
            else:
                # Each id of the person (their linked ids too) is one indexed read.
                for identity in sorted(viewer.ids):
                    found += await tx.list_runs(
                        statuses=wanted,
                        thread_id=thread_id,
                        limit=limit + 1,
                        involving=identity,
                        deciders=person_keys(viewer),
                        before=before,
                    )
                unique = {run.run_id: run for run in found}.values()
                found = sorted(unique, key=lambda r: (r.created_at, r.run_id), reverse=True)
        shown = found[:limit]
        more = len(found) > limit and bool(shown)
        following = (
            encode_cursor("runs", viewer, Position(shown[-1].created_at, shown[-1].run_id))
            if more
            else None
        )
        return Page([run_result(run, ()) for run in shown], following)

    async def run_counts(self) -> dict[str, int]:
        """How many runs there are in each status."""
        async with self._deps.store.transaction() as tx:
            return await tx.count_runs()

    async def events(self, run_id: str, viewer: Actor | None) -> list[dict[str, Any]]:
        """The run's flight recorder as plain dicts, oldest first."""
        async with self._deps.store.transaction() as tx:
            run = await tx.get_run(run_id)
            if run is None or not await self.sees(tx, viewer, run):
                raise RunNotFound(f"no run {run_id!r}")
            found = await tx.events(run_id)
        return [
            {
                "seq": e.seq,
                "at": e.at.isoformat(),
                "run_id": e.run_id,
                "kind": e.kind,
                "actor": e.actor,
                "data": e.data,
            }
            for e in found
        ]

    async def export_events(self, run_id: str, viewer: Actor | None) -> str:
        """The run's flight recorder as JSON lines."""
        found = await self.events(run_id, viewer)
        return "".join(json.dumps(e, default=str) + "\n" for e in found)

    async def open_tickets(self, limit: int, viewer: Actor | None) -> list[PendingEntry]:
        """Open tool-call tickets across runs, oldest first, that `viewer` may decide."""
        return (await self.ticket_page(limit, viewer, None)).items

    async def ticket_page(
        self, limit: int, viewer: Actor | None, cursor: str | None
    ) -> Page[PendingEntry]:
        """A page of the open tool-call tickets `viewer` may decide, oldest first.

        For anyone but an operator the store reads only the tickets filed under the
        viewer's decider keys (see `Transaction.decidable_tickets`), at most a page of
        them per key; `ResumeTicket.may_decide` still has the last word on each.

        Raises:
            InvalidCursor: `cursor` is not one this listing gave `viewer`.
        """
        after = decode_cursor("tickets", viewer, cursor)
        restricted = viewer is not None and not viewer.operator
        async with self._deps.store.transaction() as tx:
            if viewer is None or viewer.operator:
                tickets = await tx.open_tickets(limit=limit + 1, after=after)
            else:
                tickets = await tx.decidable_tickets(
                    deciders=person_keys(viewer),
                    viewer=viewer.id,
                    limit=limit + 1,
                    after=after,
                )
            read = tickets[:limit]
            found: list[tuple[tuple[datetime, str, int], PendingEntry]] = []
            for ticket in read:
                if ticket.call_id is None:
                    continue
                if restricted and viewer is not None and not ticket.may_decide(viewer):
                    continue
                call = await tx.get_call(ticket.call_id)
                entry = self._entry(ticket, call)
                if entry is not None and call is not None:
                    found.append(((ticket.created_at, ticket.run_id, call.seq), entry))
        # The tickets of one batch open at once: they show in the model's call order.
        entries = [entry for _, entry in sorted(found, key=lambda item: item[0])]
        following = None
        if len(tickets) > limit and read:
            last = read[-1]
            following = encode_cursor("tickets", viewer, Position(last.created_at, last.ticket_id))
        return Page(entries, following)

    async def card_of(self, ticket_id: str, platform: str) -> CardRef | None:
        """Where the card asking for a ticket's decision was posted on `platform`."""
        async with self._deps.store.transaction() as tx:
            for kind in CARD_KINDS:
                item = await tx.find_outbox(ticket_id=ticket_id, kind=kind)
                if item is not None and item.destination.get("platform") == platform:
                    return CardRef(kind, dict(item.platform_ref or {}), dict(item.destination))
        return None

    async def started_by(self, *keys: tuple[str, str]) -> str | None:
        """The run the first of these ``(scope, key)`` already used started, if any."""
        async with self._deps.store.transaction() as tx:
            for scope, key in keys:
                found = await tx.get_idempotency(scope, key)
                if found is not None:
                    return found.run_id
        return None

    async def find_visible(self, run_id: str, viewer: Actor | None) -> RunRecord:
        """A run `viewer` may see (`RunNotFound` otherwise)."""
        async with self._deps.store.transaction() as tx:
            run = await tx.get_run(run_id)
            if run is None or not await self.sees(tx, viewer, run):
                raise RunNotFound(f"no run {run_id!r}")
        return run

    async def find_run(self, run_or_thread_id: str) -> RunRecord:
        """A run by id, or the latest run of a thread (`RunNotFound` if neither)."""
        async with self._deps.store.transaction() as tx:
            run = await tx.get_run(run_or_thread_id)
            if run is None:
                latest = await tx.list_runs(thread_id=run_or_thread_id, limit=1)
                run = latest[0] if latest else None
        if run is None:
            raise RunNotFound(f"no run or thread {run_or_thread_id!r}")
        return run
