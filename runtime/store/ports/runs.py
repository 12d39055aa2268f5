"""The runs' part of the store port."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Protocol

from runtime.domain.states import RunStatus
from runtime.store.records import Position, RunFlags, RunRecord


class RunPort(Protocol):
    """Runs: their rows, the workers' leases on them, listings and sub-agent runs.

    A run's row holds its status, transcript and lease; the pause and cancel request
    flags are written apart (`set_run_flags`) so a worker's write never clears them.
    """

    async def insert_run(self, run: RunRecord) -> None:
        """Add a new run.

        Raises:
            DuplicateKey: A child run with the same parent and task key exists.
        """
        ...

    async def get_run(self, run_id: str, *, for_update: bool = False) -> RunRecord | None:
        """Read a run; ``for_update`` locks its row until the transaction ends."""
        ...

    async def update_run(self, run: RunRecord, *, fence: int | None = None) -> RunFlags:
        """Write what a run changes; return the two request flags as stored.

        Every column is written except the request flags (see `set_run_flags`) and what
        the run was created with (`runtime.store.records.RUN_CREATED_WITH`: thread,
        agent and version, input, requester, creation time, origin), which only
        `insert_run` writes. Returning the stored flags lets a worker notice a pause or
        cancel request at each write, without reading the row again.

        The transcript (``run.messages``) only grows: entries are appended, never changed
        or removed, and a store may write only what was appended since the record was
        read or last written (a SQL store refuses a transcript shorter than what it
        stored apart with `ValueError`).

        Args:
            run: The new row.
            fence: When given, the write only happens if the stored fence still equals
                it; otherwise `LeaseLost` is raised (and the transaction must roll back).
        """
        ...

    async def set_run_flags(
        self, run_id: str, *, pause: bool | None = None, cancel: bool | None = None
    ) -> None:
        """Set or clear the pause / cancel request flags."""
        ...

    async def claim_run(
        self, run_id: str, *, owner: str, now: datetime, until: datetime
    ) -> RunRecord | None:
        """Take the run's lease if it is ``queued``, or ``running`` with an expired lease.

        On success the status becomes ``running``, the fence grows by one and the lease
        belongs to `owner` until `until`. Returns the claimed row, or None.
        """
        ...

    async def renew_lease(self, run_id: str, *, fence: int, until: datetime) -> bool:
        """Extend a held lease; False when the fence no longer matches."""
        ...

    async def claimable_runs(self, now: datetime, limit: int) -> list[str]:
        """Ids of runs a worker could claim now, oldest first."""
        ...

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
        """Runs, newest first, optionally filtered. Runs created at the same time come in
        an order of the store's own (SQL: by id), the same from one page to the next.

        Args:
            statuses: Only runs in one of these statuses.
            thread_id: Only runs of this thread.
            limit: At most this many.
            involving: Only runs this user id requested or decided a ticket of, plus the
                runs named in `including` and those `deciders` give (what a user may
                see; see `runtime.domain.visibility`).
            including: Run ids that pass the `involving` filter as well.
            deciders: With `involving`: the runs with an open ticket, other than one
                waiting on a sub-agent, that one of these decider keys may decide (and
                `involving` is not barred from by four-eyes; see
                `runtime.store.records.decider_keys`) pass too, with every sub-agent run
                under them. The store finds them by index, not by reading every open
                ticket.
            before: Only runs that sort after this position (the last of a page).
        """
        ...

    async def count_runs(self) -> dict[str, int]:
        """How many runs there are in each status."""
        ...

    async def child_run(self, parent_run_id: str, task_key: str) -> RunRecord | None:
        """The sub-agent run `parent_run_id` started for `task_key`, if any."""
        ...

    async def child_runs(self, parent_run_id: str) -> list[RunRecord]:
        """The sub-agent runs `parent_run_id` started, oldest first."""
        ...
