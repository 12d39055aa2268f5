"""Runs: their rows, transcripts kept apart, claims and leases, listings."""

from __future__ import annotations

import functools
import json
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import partial
from typing import Any

from sqlalchemy import ColumnElement, and_, bindparam, func, insert, or_, select, update
from sqlalchemy.engine import Row

from runtime.domain.errors import LeaseLost, StorageError
from runtime.domain.states import RunStatus
from runtime.store.base import DuplicateKey
from runtime.store.records import RUN_CREATED_WITH, Position, RunFlags, RunRecord
from runtime.store.schema import run_messages, runs, ticket_deciders, tickets
from runtime.store.sql.convert import QUEUED, RUNNING, to_micros, without
from runtime.store.sql.executing import TransactionCore
from runtime.store.sql.rows import RUNS, run_values
from runtime.store.sql.wake import WAKE_RUNS

RECENT_MESSAGES = 8
"""A run's row keeps at most this many of its newest transcript entries, rewritten with
each write of the run; once more have come, they all move to `run_messages`, one row
each, written once. A step then costs the same whatever the transcript's length."""


def _sealing(run: RunRecord) -> int:
    """How many of the run's transcript entries to keep apart once it is written.

    Raises:
        ValueError: The transcript has fewer entries than are kept apart already (it
            may only grow).
    """
    total, sealed = len(run.messages), run.messages_sealed
    if total < sealed:
        raise ValueError(
            f"run {run.run_id}: its transcript has {total} entries, {sealed} were stored; "
            "a transcript only grows"
        )
    return total if total - sealed > RECENT_MESSAGES else sealed


def _unseal(run: RunRecord, sealed: int) -> None:
    run.messages_sealed = sealed


_ALWAYS_WRITTEN = frozenset({"updated_at", "lease_expires_at"})
"""Columns every `update_run` writes: ``updated_at`` changes with nearly every write, and
``lease_expires_at`` may have been moved by `renew_lease` since the row was known."""


class _Unknown:
    """A column value compared unequal to everything (one JSON cannot encode)."""

    def __eq__(self, other: object) -> bool:
        return False

    def __hash__(self) -> int:
        return id(self)


def _snapshot(run: RunRecord, values: Mapping[str, Any]) -> dict[str, Any]:
    """What `values` (a run's columns) hold, in a form that later changes to the record
    cannot reach: JSON as its text; the transcript's newest entries as how many entries
    there were and how many were kept apart (a transcript only grows, so these tell
    whether the entries in the row are the same)."""
    snapshot: dict[str, Any] = {}
    for name, value in values.items():
        if name == "recent_messages":
            snapshot[name] = (values["sealed_messages"], len(run.messages))
        elif isinstance(value, dict | list):
            try:
                snapshot[name] = json.dumps(value, sort_keys=True)
            except (TypeError, ValueError):
                snapshot[name] = _Unknown()
        else:
            snapshot[name] = value
    return snapshot


@dataclass(frozen=True, slots=True)
class _Known:
    """A run's row as this store last wrote it, or read it locked."""

    columns: dict[str, Any]
    """`_snapshot` of the row's columns (those `update_run` writes)."""
    by: weakref.ref[object]
    """The transaction that wrote or locked it."""


class StoredRuns:
    """What one store last wrote to its recent runs' rows, so that `update_run` writes only
    the columns that changed (a run's transcript, its largest column, moves with few of
    its writes).

    A row is taken as known only where nobody else can have written it since: within the
    transaction that wrote or locked it; and in later transactions while the run is
    running under the lease the known row holds (the write's `fence` matches it), which
    every other writer of a running run takes over first (raising the fence).
    """

    def __init__(self, capacity: int = 4096) -> None:
        self._rows: dict[str, _Known] = {}
        self._capacity = capacity

    def known(self, run_id: str, fence: int | None, tx: object) -> dict[str, Any] | None:
        """The columns of `run_id`'s row that `tx` may take as stored, if any."""
        known = self._rows.get(run_id)
        if known is None:
            return None
        if known.by() is tx:
            return known.columns
        if (
            fence is not None
            and known.columns.get("fence") == fence
            and known.columns.get("status") == RUNNING
        ):
            return known.columns
        return None

    def note(self, run_id: str, columns: dict[str, Any], tx: object) -> None:
        """`run_id`'s row holds `columns` now, written or locked by `tx`."""
        if run_id not in self._rows and len(self._rows) >= self._capacity:
            self._rows.clear()
        self._rows[run_id] = _Known(columns, weakref.ref(tx))

    def forget(self, run_id: str) -> None:
        """Take `run_id`'s row as unknown (a write that may not have committed)."""
        self._rows.pop(run_id, None)


# Statements that take no per-call structure are built once.
_INSERT_RUN = insert(runs)
_INSERT_MESSAGE = insert(run_messages)
_SEALED_MESSAGES = (
    select(run_messages.c.run_id, run_messages.c.message)
    .where(run_messages.c.run_id.in_(bindparam("run_ids", expanding=True)))
    .order_by(run_messages.c.run_id, run_messages.c.seq)
)
_GET_RUN = select(runs).where(runs.c.run_id == bindparam("run_id"))
# Execution parameters name the columns to SET; the WHERE binds are prefixed so they
# cannot collide with column names.
_UPDATE_RUN = update(runs).where(runs.c.run_id == bindparam("b_run_id"))
_UPDATE_RUN_FENCED = _UPDATE_RUN.where(runs.c.fence == bindparam("b_fence"))
_GET_RUN_LOCKED = _GET_RUN.with_for_update()
_RUN_EXISTS = select(runs.c.run_id).where(runs.c.run_id == bindparam("run_id"))
_FLAG_COLUMNS = (runs.c.pause_requested, runs.c.cancel_requested)
_UPDATE_RUN_FLAGS = _UPDATE_RUN.returning(*_FLAG_COLUMNS)
_UPDATE_RUN_FENCED_FLAGS = _UPDATE_RUN_FENCED.returning(*_FLAG_COLUMNS)
_RUN_FLAGS = select(*_FLAG_COLUMNS).where(runs.c.run_id == bindparam("run_id"))
CLAIMABLE = or_(
    runs.c.status == QUEUED,
    and_(runs.c.status == RUNNING, runs.c.lease_expires_at <= bindparam("now")),
)
"""Whether a run may be claimed ``now``."""
CLAIMED: dict[str, Any] = {
    "status": RUNNING,
    "fence": runs.c.fence + 1,
    "lease_owner": bindparam("owner"),
    "lease_expires_at": bindparam("until"),
    "updated_at": bindparam("now"),
}
"""What claiming a run sets."""
_CLAIM = update(runs).where(runs.c.run_id == bindparam("b_run_id"), CLAIMABLE).values(CLAIMED)
CLAIM_RETURNING = _CLAIM.returning(*runs.c)


def _oldest_runs(*where: ColumnElement[bool]) -> Any:
    return (
        select(runs.c.run_id, runs.c.updated_at)
        .where(*where)
        .order_by(runs.c.updated_at, runs.c.run_id)
        .limit(bindparam("limit"))
        .subquery()
    )


# `CLAIMABLE` as two ordered scans of the (status, updated_at) index, each stopping at
# `limit`: with `OR` the database sorts every queued run to return the first few.
_CLAIMABLE_EITHER = (
    select(_oldest_runs(runs.c.status == QUEUED))
    .union_all(
        select(_oldest_runs(runs.c.status == RUNNING, runs.c.lease_expires_at <= bindparam("now")))
    )
    .subquery()
)
_CLAIMABLE_IDS = (
    select(_CLAIMABLE_EITHER.c.run_id)
    .order_by(_CLAIMABLE_EITHER.c.updated_at, _CLAIMABLE_EITHER.c.run_id)
    .limit(bindparam("limit"))
)
_RENEW = (
    update(runs)
    .where(
        runs.c.run_id == bindparam("b_run_id"),
        runs.c.fence == bindparam("b_fence"),
        runs.c.status == RUNNING,
    )
    .values(lease_expires_at=bindparam("until"))
)
_COUNT_RUNS = select(runs.c.status, func.count().label("n")).group_by(runs.c.status)
_CHILD_RUNS = (
    select(runs)
    .where(runs.c.parent_run_id == bindparam("parent"))
    .order_by(runs.c.created_at, runs.c.run_id)
)
_CHILD_RUN = _CHILD_RUNS.where(runs.c.task_key == bindparam("task_key"))


def _deciding_runs() -> Any:
    """Ids of the runs with an open ticket (not a sub-agent's) one of the ``deciders`` may
    decide (``involving`` not barred), and of every sub-agent run under them."""
    seed = (
        select(ticket_deciders.c.run_id.label("run_id"))
        .where(
            ticket_deciders.c.decider.in_(bindparam("deciders", expanding=True)),
            ticket_deciders.c.target_kind != "child",
            or_(
                ticket_deciders.c.barred.is_(None),
                ticket_deciders.c.barred != bindparam("involving"),
            ),
        )
        .cte("deciding", recursive=True)
    )
    below = select(runs.c.run_id).where(runs.c.parent_run_id == seed.c.run_id)
    tree = seed.union(below)
    return select(tree.c.run_id)


@functools.cache
def _list_runs(statuses: bool, thread: bool, involving: bool, deciders: bool, before: bool) -> Any:
    """The `list_runs` statement for one combination of filters, built once: its values
    are parameters, so a store compiles it once, not at every listing."""
    statement = select(runs)
    if statuses:
        statement = statement.where(runs.c.status.in_(bindparam("statuses", expanding=True)))
    if thread:
        statement = statement.where(runs.c.thread_id == bindparam("thread_id"))
    if involving:
        decided = select(tickets.c.run_id).where(tickets.c.decided_by == bindparam("involving"))
        seen = [
            runs.c.requester == bindparam("involving"),
            runs.c.run_id.in_(decided),
            runs.c.run_id.in_(bindparam("including", expanding=True)),
        ]
        if deciders:
            seen.append(runs.c.run_id.in_(_deciding_runs()))
        statement = statement.where(or_(*seen))
    if before:
        statement = statement.where(
            or_(
                runs.c.created_at < bindparam("before_at"),
                and_(
                    runs.c.created_at == bindparam("before_at"),
                    runs.c.run_id < bindparam("before_id"),
                ),
            )
        )
    return statement.order_by(runs.c.created_at.desc(), runs.c.run_id.desc()).limit(
        bindparam("limit")
    )


class RunStatements(TransactionCore):
    """The runs part of `SQLTransaction`."""

    stored: StoredRuns | None = None
    """What the store knows of its runs' rows (see `StoredRuns`); None: every
    `update_run` writes every column."""

    async def _run_exists(self, run_id: str) -> bool:
        result = await self._execute(_RUN_EXISTS, {"run_id": run_id})
        return result.first() is not None

    async def insert_run(self, run: RunRecord) -> None:
        """Add a new run; `ValueError` if its id exists, `DuplicateKey` if its parent has
        a child for its task key already."""
        run.messages_sealed = 0
        sealed = _sealing(run)
        values = run_values(run, sealed)
        values["pause_requested"] = run.pause_requested
        values["cancel_requested"] = run.cancel_requested
        if run.parent_run_id is not None:
            await self._execute(_INSERT_RUN, values, violation=DuplicateKey)
        else:
            await self._write(_INSERT_RUN, values, table=runs)
        self.wrote = True
        await self._seal(run, sealed)
        self._note(run.run_id, _snapshot(run, without(values, "run_id", *RUN_CREATED_WITH)))
        if run.status is RunStatus.QUEUED:
            self._wake.add(WAKE_RUNS)

    async def get_run(self, run_id: str, *, for_update: bool = False) -> RunRecord | None:
        """Read a run; ``for_update`` locks its row (a no-op on SQLite)."""
        statement = _GET_RUN_LOCKED if for_update else _GET_RUN
        row = (await self._execute(statement, {"run_id": run_id})).first()
        if row is None:
            return None
        run = await self._run(row)
        if for_update:
            self._note_read(run, wrote=False)
        return run

    def _note_read(self, run: RunRecord, *, wrote: bool) -> None:
        """Note `run`, just read from its locked (or claimed) row, as its row stands."""
        if self.stored is not None:
            columns = without(run_values(run, run.messages_sealed), "run_id", *RUN_CREATED_WITH)
            self._note(run.run_id, _snapshot(run, columns), wrote=wrote)

    def _note(self, run_id: str, snapshot: dict[str, Any], *, wrote: bool = True) -> None:
        """Note what `run_id`'s row holds; what this transaction wrote is unknown again
        unless it commits."""
        stored = self.stored
        if stored is None:
            return
        stored.note(run_id, snapshot, self)
        if wrote:
            self._undo.append(partial(stored.forget, run_id))

    async def _seal(self, run: RunRecord, sealed: int) -> None:
        """Write the transcript entries that move out of the run's row (see
        `RECENT_MESSAGES`) and note it in the record, taken back if this does not commit."""
        before = run.messages_sealed
        if sealed == before:
            return
        entries = run.messages
        rows = [
            {"run_id": run.run_id, "seq": seq, "message": entries[seq]}
            for seq in range(before, sealed)
        ]
        await self._execute(_INSERT_MESSAGE, rows)
        run.messages_sealed = sealed
        self._undo.append(partial(_unseal, run, before))

    async def _run(self, row: Row[Any]) -> RunRecord:
        """The run of `row`, its whole transcript read."""
        return (await self._whole([RUNS.record(row)]))[0]

    async def _whole(self, found: list[RunRecord]) -> list[RunRecord]:
        """Put the entries kept apart back at the head of each run's transcript."""
        apart = {run.run_id: run for run in found if run.messages_sealed}
        if not apart:
            return found
        older: dict[str, list[dict[str, Any]]] = {run_id: [] for run_id in apart}
        for row in await self._execute(_SEALED_MESSAGES, {"run_ids": list(apart)}):
            older[row.run_id].append(row.message)
        for run_id, run in apart.items():
            entries = older[run_id]
            if len(entries) != run.messages_sealed:
                raise StorageError(
                    f"run {run_id}: {run.messages_sealed} transcript entries expected in "
                    f"run_messages, {len(entries)} found"
                )
            run.messages[:0] = entries
        return found

    async def update_run(self, run: RunRecord, *, fence: int | None = None) -> RunFlags:
        """Write what a run changes (see `Transaction.update_run`), guarded by `fence`.

        Returns the stored request flags (with ``RETURNING`` where the database has it).
        """
        sealed = _sealing(run)
        columns = without(run_values(run, sealed), "run_id", *RUN_CREATED_WITH)
        snapshot = _snapshot(run, columns)
        known = None if self.stored is None else self.stored.known(run.run_id, fence, self)
        values = columns
        if known is not None:
            values = {
                name: value
                for name, value in columns.items()
                if name in _ALWAYS_WRITTEN or known.get(name, _Unknown()) != snapshot[name]
            }
        values["b_run_id"] = run.run_id
        statement, returning = _UPDATE_RUN, _UPDATE_RUN_FLAGS
        if fence is not None:
            values["b_fence"] = fence
            statement, returning = _UPDATE_RUN_FENCED, _UPDATE_RUN_FENCED_FLAGS
        if self._returning:
            row = (await self._execute(returning, values, row_required=True)).first()
            matched = row is not None
        else:
            matched = (await self._execute(statement, values)).rowcount == 1
            row = (await self._execute(_RUN_FLAGS, {"run_id": run.run_id})).first()
        if not matched:
            if self.stored is not None:
                self.stored.forget(run.run_id)
            if fence is not None and await self._run_exists(run.run_id):
                raise LeaseLost(f"run {run.run_id}: lease fence {fence} was superseded")
            raise ValueError(f"run {run.run_id} does not exist")
        self.wrote = True
        await self._seal(run, sealed)
        self._note(run.run_id, snapshot, wrote=True)
        if run.status is RunStatus.QUEUED:
            self._wake.add(WAKE_RUNS)
        assert row is not None
        return RunFlags(bool(row.pause_requested), bool(row.cancel_requested))

    async def set_run_flags(
        self, run_id: str, *, pause: bool | None = None, cancel: bool | None = None
    ) -> None:
        """Set or clear the pause / cancel request flags; `ValueError` for an unknown run."""
        values: dict[str, Any] = {"b_run_id": run_id}
        if pause is not None:
            values["pause_requested"] = pause
        if cancel is not None:
            values["cancel_requested"] = cancel
        if len(values) == 1:
            if not await self._run_exists(run_id):
                raise ValueError(f"run {run_id} does not exist")
            return
        if (await self._execute(_UPDATE_RUN, values)).rowcount != 1:
            raise ValueError(f"run {run_id} does not exist")
        self.wrote = True

    async def claim_run(
        self, run_id: str, *, owner: str, now: datetime, until: datetime
    ) -> RunRecord | None:
        """Take the run's lease with one conditional UPDATE; None if it is not claimable."""
        params = {
            "b_run_id": run_id,
            "owner": owner,
            "now": to_micros(now),
            "until": to_micros(until),
        }
        if self._returning:
            row = (await self._execute(self.claim_returning, params)).first()
            if row is None:
                return None
            self.wrote = True
            claimed = await self._run(row)
            self._note_read(claimed, wrote=True)
            return claimed
        # Without RETURNING (SQLite < 3.35) the follow-up read is still safe: the
        # transaction holds the write lock since BEGIN IMMEDIATE.
        if (await self._execute(_CLAIM, params)).rowcount != 1:
            return None
        self.wrote = True
        found = await self.get_run(run_id)
        if found is not None:
            self._note_read(found, wrote=True)
        return found

    async def renew_lease(self, run_id: str, *, fence: int, until: datetime) -> bool:
        """Extend a held lease; False when the fence no longer matches."""
        params = {"b_run_id": run_id, "b_fence": fence, "until": to_micros(until)}
        if (await self._execute(_RENEW, params)).rowcount != 1:
            return False
        self.wrote = True
        return True

    async def claimable_runs(self, now: datetime, limit: int) -> list[str]:
        """Ids of runs a worker could claim now, least recently updated first."""
        result = await self._execute(_CLAIMABLE_IDS, {"now": to_micros(now), "limit": limit})
        return list(result.scalars())

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
        """Runs, newest first, optionally filtered (see `Transaction.list_runs`)."""
        watching = involving is not None
        statement = _list_runs(
            bool(statuses),
            thread_id is not None,
            watching,
            watching and bool(deciders),
            bool(before),
        )
        params: dict[str, Any] = {"limit": limit}
        if statuses:
            params["statuses"] = [RunStatus(s).value for s in statuses]
        if thread_id is not None:
            params["thread_id"] = thread_id
        if involving is not None:
            params.update(involving=involving, including=list(including))
            if deciders:
                params["deciders"] = list(dict.fromkeys(deciders))
        if before is not None:
            params.update(before_at=to_micros(before.at), before_id=before.id)
        result = await self._execute(statement, params)
        return await self._whole([RUNS.record(row) for row in result])

    async def count_runs(self) -> dict[str, int]:
        """How many runs there are in each status (statuses without runs are absent)."""
        return {row.status: row.n for row in await self._execute(_COUNT_RUNS)}

    async def child_run(self, parent_run_id: str, task_key: str) -> RunRecord | None:
        """The sub-agent run `parent_run_id` started for `task_key`, if any."""
        params = {"parent": parent_run_id, "task_key": task_key}
        row = (await self._execute(_CHILD_RUN, params)).first()
        return None if row is None else await self._run(row)

    async def child_runs(self, parent_run_id: str) -> list[RunRecord]:
        """The sub-agent runs `parent_run_id` started, oldest first."""
        rows = await self._execute(_CHILD_RUNS, {"parent": parent_run_id})
        return await self._whole([RUNS.record(row) for row in rows])
