"""The audit: every run's events in one resumable order, and pruning finished runs.

`AuditLog` reads the flight recorders of every run by global sequence number, only up
to the store's horizon (`runtime.store.ports.audit.AuditPort.audit_horizon`): a reader
resuming after the last number it got never misses an event that commits late.

`Retention` finds the run trees (a top-level run with its sub-agent runs) that may be
pruned, gives each as archive lines, and deletes it only if it still reads exactly as
archived. A tree is kept while any of its runs is not finished or was written at or
after the cut-off, while one of its tickets is open, a notification of it is still to
be delivered, or a standing grant given in it is still active.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pydantic import BaseModel

from runtime.domain.clock import Clock
from runtime.domain.states import TicketStatus
from runtime.store.base import Store, Transaction
from runtime.store.ports.audit import AuditEvent
from runtime.store.records import RunRecord

MAX_AUDIT_PAGE = 1000
"""The most events one page of the audit holds."""
ARCHIVE_FORMAT = 1
"""The version of the archive lines' layout."""


@dataclass(frozen=True, slots=True)
class AuditPage:
    """One page of the audit.

    Attributes:
        events: The events, in sequence order, as plain dicts.
        next_after: The ``after`` of the next page: every event up to it was handed out
            or will never exist.
    """

    events: list[dict[str, Any]]
    next_after: int


def audit_json(found: AuditEvent) -> dict[str, Any]:
    """An event of the audit as a plain dict (its data as recorded, secrets masked)."""
    event = found.event
    return {
        "seq": event.seq,
        "at": event.at.isoformat(),
        "run_id": event.run_id,
        "agent": found.agent,
        "kind": event.kind,
        "actor": event.actor,
        "data": event.data,
    }


class AuditLog:
    """Every run's events, in sequence order, resumable by sequence number.

    Args:
        store: The store to read.
    """

    def __init__(self, store: Store) -> None:
        self._store = store

    async def horizon(self) -> int:
        """The sequence number up to which events are final (see `AuditPort.audit_horizon`)."""
        async with self._store.transaction() as tx:
            return await tx.audit_horizon()

    async def page(self, after: int, limit: int) -> AuditPage:
        """The events after sequence number `after`, at most `limit` (up to `MAX_AUDIT_PAGE`)."""
        limit = max(1, min(limit, MAX_AUDIT_PAGE))
        upto = await self.horizon()
        async with self._store.transaction() as tx:
            found = await tx.audit_events(after=after, upto=upto, limit=limit)
        # A short page read everything up to the horizon: nothing can appear below it.
        following = found[-1].event.seq if len(found) == limit else max(after, upto)
        return AuditPage([audit_json(item) for item in found], following)

    async def export(
        self, since: datetime | None = None, until: datetime | None = None
    ) -> AsyncIterator[dict[str, Any]]:
        """The events recorded between `since` (included) and `until` (excluded), in
        sequence order, up to the horizon when the export starts."""
        upto = await self.horizon()
        after = 0
        while True:
            async with self._store.transaction() as tx:
                found = await tx.audit_events(
                    after=after, upto=upto, limit=MAX_AUDIT_PAGE, since=since, until=until
                )
            for item in found:
                yield audit_json(item)
            if len(found) < MAX_AUDIT_PAGE:
                return
            after = found[-1].event.seq


@dataclass(frozen=True, slots=True)
class RunArchive:
    """A run tree to prune, as the lines of its archive.

    Attributes:
        run_id: The top-level run.
        run_ids: It and its sub-agent runs, parents first.
        lines: The archive: a header, then one line per row (``table`` and ``row``).
    """

    run_id: str
    run_ids: tuple[str, ...]
    lines: tuple[dict[str, Any], ...]


class Retention:
    """Finds the run trees finished before a time, and deletes them once archived.

    Args:
        store: The store to prune.
        clock: Tells whether a grant is still active.
    """

    def __init__(self, store: Store, clock: Clock) -> None:
        self._store = store
        self._clock = clock

    async def candidates(self, before: datetime, *, batch: int = 100) -> AsyncIterator[RunArchive]:
        """Every run tree that may be pruned, as it reads now, by top-level run id."""
        after: str | None = None
        while True:
            async with self._store.transaction() as tx:
                roots = await tx.finished_runs(before=before, after=after, limit=batch)
                found = [await self._archive(tx, root, before) for root in roots]
            for archive in found:
                if archive is not None:
                    yield archive
            if len(roots) < batch:
                return
            after = roots[-1].run_id

    async def delete(self, archive: RunArchive, before: datetime) -> bool:
        """Delete the tree of `archive` if it still may be pruned and reads exactly as
        archived; False (nothing deleted) otherwise, or when it is already gone."""
        async with self._store.transaction() as tx:
            root = await tx.get_run(archive.run_id, for_update=True)
            if root is None:
                return False
            now = await self._archive(tx, root, before)
            if now is None or now != archive:
                return False
            # Sub-agent runs first: their parents are named by them.
            await tx.delete_runs(list(reversed(archive.run_ids)))
        return True

    async def _archive(
        self, tx: Transaction, root: RunRecord, before: datetime
    ) -> RunArchive | None:
        now = self._clock.now()
        tree = [root]
        index = 0
        while index < len(tree):
            tree.extend(await tx.child_runs(tree[index].run_id))
            index += 1
        lines: list[dict[str, Any]] = []
        for run in tree:
            if not run.status.finished or run.updated_at >= before:
                return None
            tickets = await tx.tickets_for_run(run.run_id)
            if any(t.status is TicketStatus.OPEN for t in tickets):
                return None
            outbox = await tx.outbox_for_run(run.run_id)
            if any(item.state == "pending" for item in outbox):
                return None
            grants = await tx.list_grants(run_id=run.run_id, limit=10_000)
            if await tx.list_grants(run_id=run.run_id, active_at=now, limit=1):
                return None
            row = _plain(run)
            row.pop("messages_sealed", None)
            lines.append({"table": "runs", "row": row})
            lines.extend(
                {"table": "calls", "row": _plain(c)} for c in await tx.calls_for_run(run.run_id)
            )
            lines.extend({"table": "tickets", "row": _plain(t)} for t in tickets)
            lines.extend({"table": "events", "row": _plain(e)} for e in await tx.events(run.run_id))
            lines.extend({"table": "outbox", "row": _plain(o)} for o in outbox)
            lines.extend({"table": "grants", "row": _plain(g)} for g in grants)
        run_ids = tuple(run.run_id for run in tree)
        header = {"archive": ARCHIVE_FORMAT, "run_id": root.run_id, "run_ids": list(run_ids)}
        return RunArchive(root.run_id, run_ids, (header, *lines))


def _plain(value: Any) -> Any:
    """A record as JSON values: dataclasses and models as objects, times in ISO 8601."""
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json", by_alias=True)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [_plain(v) for v in value]
    return value
