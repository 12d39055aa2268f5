"""The store port: what the core needs from a database, as one transaction protocol.

Every method runs inside a `Transaction`; leaving ``async with store.transaction()``
normally commits, leaving it by an exception rolls everything back. Records handed in
and out are copies: changing one changes nothing until it is written back.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from datetime import datetime
from typing import Protocol

from runtime.domain.states import RunStatus, TicketStatus
from runtime.domain.tickets import Answer, ResumeTicket
from runtime.store.records import (
    CallRecord,
    EventRecord,
    GrantRecord,
    IdempotencyRecord,
    OutboxRecord,
    Position,
    ReceivedRecord,
    RunFlags,
    RunRecord,
)


class Transaction(Protocol):
    """One atomic unit of reads and writes."""

    # runs ------------------------------------------------------------------------
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

    # tool calls ---------------------------------------------------------------------
    async def insert_call(self, call: CallRecord) -> None:
        """Add a tool call."""
        ...

    async def update_call(self, call: CallRecord) -> None:
        """Write a tool call's progress back (state, attempts, result, decision ...).

        What the call was proposed with (`runtime.store.records.CALL_CREATED_WITH`: run,
        batch and position, tool, replay policy, execution key, creation time) is
        written by `insert_call` only; the arguments change with an approver's edit.
        """
        ...

    async def get_call(self, call_id: str) -> CallRecord | None:
        """Read one tool call."""
        ...

    async def calls_for_run(self, run_id: str, *, batch: int | None = None) -> list[CallRecord]:
        """A run's calls (optionally of one batch) ordered by batch and position."""
        ...

    async def call_by_execution_key(self, execution_key: str) -> CallRecord | None:
        """The call with this execution key."""
        ...

    # tickets -----------------------------------------------------------------------
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

    # flight recorder ---------------------------------------------------------------
    async def append_event(self, event: EventRecord) -> None:
        """Append to a run's flight recorder."""
        ...

    async def events(self, run_id: str, *, after: int = 0) -> list[EventRecord]:
        """A run's events with ``seq > after``, in order."""
        ...

    # outbox ------------------------------------------------------------------------
    async def add_outbox(self, item: OutboxRecord) -> None:
        """Queue a notification."""
        ...

    async def due_outbox(self, now: datetime, limit: int) -> list[OutboxRecord]:
        """Pending notifications whose next attempt is due, oldest first."""
        ...

    async def claim_outbox(
        self,
        now: datetime,
        limit: int,
        *,
        owner: str,
        until: datetime,
        pacing: Mapping[str, float] | None = None,
    ) -> list[OutboxRecord]:
        """Claim due notifications for delivery, oldest first; each by one process only.

        An item is claimable when it is pending, its next attempt is due and nobody holds
        an unexpired claim on it. A claimed item's lease belongs to `owner` until `until`
        and its fence grows by one. Items locked by a concurrent claim are skipped, not
        waited for.

        Args:
            now: The time.
            limit: At most this many items.
            owner: Who delivers them.
            until: When the claim expires (another process may then claim them again).
            pacing: Seconds between two messages to one channel, by platform
                (``{"slack": 1.0}``). For those platforms at most one item per channel
                is claimed, and only once the channel's previous slot has passed; the
                slot is shared by every process on the database.

        Returns:
            The claimed items, with their new lease and fence.
        """
        ...

    async def update_outbox(self, item: OutboxRecord, *, fence: int | None = None) -> bool:
        """Write a notification's delivery state back.

        Args:
            item: The new row (its lease columns are written too).
            fence: When given, a compare-and-set: the write happens only if the item is
                still pending under this fence (nobody claimed it since).

        Returns:
            False when the fence no longer matched (and nothing was written).
        """
        ...

    async def outbox_for_run(self, run_id: str) -> list[OutboxRecord]:
        """Every notification of a run, oldest first."""
        ...

    async def find_outbox(self, *, ticket_id: str, kind: str) -> OutboxRecord | None:
        """The first notification of `kind` about a ticket (to find its platform message)."""
        ...

    # idempotency keys and figures --------------------------------------------------
    async def get_idempotency(self, scope: str, key: str) -> IdempotencyRecord | None:
        """The record of a key already used in `scope`, if any."""
        ...

    async def insert_idempotency(self, item: IdempotencyRecord) -> None:
        """Remember a key. Raises `DuplicateKey` if (scope, key) exists."""
        ...

    async def forget_idempotency(self, scope: str, before: datetime) -> int:
        """Forget keys of `scope` first used before `before`; return how many."""
        ...

    # console sessions -------------------------------------------------------------------
    async def revoke_session(self, session_id: str, expires_at: datetime) -> None:
        """Refuse a session from now until `expires_at` (idempotent)."""
        ...

    async def session_revoked(self, session_id: str) -> bool:
        """Whether a session was revoked (and has not expired since)."""
        ...

    async def forget_revoked_sessions(self, before: datetime) -> int:
        """Forget revocations of sessions that expired before `before`; return how many."""
        ...

    # received chat commands -----------------------------------------------------------
    async def insert_received(self, item: ReceivedRecord) -> bool:
        """Store a received command; False if (source, delivery_id) is already stored."""
        ...

    async def pending_received(self, limit: int) -> list[ReceivedRecord]:
        """Received commands not yet applied, oldest first."""
        ...

    async def claim_received(
        self, now: datetime, limit: int, *, owner: str, until: datetime
    ) -> list[ReceivedRecord]:
        """Claim pending received commands to apply, oldest first; each by one process only.

        Skips commands another process holds an unexpired claim on (or is claiming now).
        """
        ...

    async def update_received(self, item: ReceivedRecord, *, only_pending: bool = False) -> bool:
        """Write a received command's state back.

        Args:
            item: The new row.
            only_pending: A compare-and-set: write only if the stored command is still
                ``pending`` (so a refusal never overwrites another process's apply).

        Returns:
            False when `only_pending` was given and the command was no longer pending.
        """
        ...

    # standing grants ---------------------------------------------------------------
    async def insert_grant(self, grant: GrantRecord) -> None:
        """Add a grant (`ValueError` if its id exists or its run does not)."""
        ...

    async def get_grant(self, grant_id: str) -> GrantRecord | None:
        """Read one grant, active or not."""
        ...

    async def active_grants(
        self, *, agent: str, tool: str, run_id: str, thread_id: str, now: datetime
    ) -> list[GrantRecord]:
        """Grants that may cover a call of `tool` of `agent` in run `run_id` now, oldest first.

        They are not revoked, not expired at `now`, and either ``run`` grants of that run
        or ``thread`` grants of `thread_id`. The caller checks the rest (the requester,
        the agent's version, the argument constraint). Always read from the database, so
        a revocation committed anywhere counts at once.
        """
        ...

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
        """Grants, newest first, filtered by every argument given.

        Args:
            run_id: Only grants given in this run.
            thread_id: Only grants given in this thread.
            scope: Only ``run`` or only ``thread`` grants.
            involving: Only grants this user id gave, or given in a run they requested.
            active_at: Only grants active at this time (not revoked, not expired).
            limit: At most this many.
        """
        ...

    async def revoke_grant(self, grant_id: str, *, by: str, at: datetime) -> bool:
        """Compare-and-set: mark a grant that is not revoked yet revoked. False otherwise."""
        ...

    # named leases -------------------------------------------------------------------
    async def take_lease(
        self, name: str, *, owner: str, now: datetime, until: datetime
    ) -> int | None:
        """Take or extend the named lease (e.g. ``discord-gateway``) for `owner`.

        Succeeds when nobody holds it, its holder's lease expired, or `owner` holds it
        already. Returns the lease's fence (it grows whenever the holder changes), or
        None when another owner holds it.
        """
        ...

    async def drop_lease(self, name: str, *, owner: str) -> None:
        """Give the named lease up, if `owner` holds it."""
        ...

    async def stats(self) -> dict[str, int]:
        """Figures for metrics: ``open_tickets``, ``outbox_pending``, ``outbox_failed``."""
        ...


class DuplicateKey(ValueError):
    """An idempotency key was inserted twice (a concurrent request won)."""


class Store(Protocol):
    """A database the runtime can use."""

    async def migrate(self) -> None:
        """Create or upgrade the schema."""
        ...

    def transaction(self) -> AbstractAsyncContextManager[Transaction]:
        """Open a transaction: commit on normal exit, roll back on an exception."""
        ...

    async def close(self) -> None:
        """Release connections."""
        ...

    @property
    def commits(self) -> int:
        """How many write transactions were committed (for benchmarks)."""
        ...
