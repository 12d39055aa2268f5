"""The SQL store: SQLAlchemy 2 async over SQLite (aiosqlite) or PostgreSQL (asyncpg).

SQLite is tuned for one file shared by a few processes: WAL journal, a busy timeout,
``BEGIN IMMEDIATE`` for every transaction (so a transaction that later writes never
fails to upgrade its read lock), and an `asyncio.Lock` so transactions of one process
queue in memory instead of fighting over the file lock. Its aiosqlite connections do a
statement in one thread round trip instead of SQLAlchemy's usual three or four (see
`_LeanConnection`): on short transactions those round trips are most of the cost.

PostgreSQL runs transactions concurrently. Everything that must be race-free across
replicas is a single conditional ``UPDATE`` (claiming a run, closing a ticket, fenced
writes) or takes a row lock first.

Driver errors become `StorageError` here; constraint violations (a duplicate id, a
missing run) become `ValueError`, like in `MemoryStore`. On PostgreSQL a failed
statement aborts the transaction, so let such an error end it.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import importlib
import logging
import sqlite3
import time
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeVar, assert_never

import aiosqlite
from sqlalchemy import (
    Column,
    ColumnElement,
    Connection,
    Insert,
    MetaData,
    ScalarSelect,
    String,
    Table,
    and_,
    bindparam,
    case,
    event,
    func,
    insert,
    or_,
    select,
    text,
    update,
)
from sqlalchemy import (
    inspect as sa_inspect,
)
from sqlalchemy.engine import URL, Dialect, Engine, Row, create_engine, make_url
from sqlalchemy.exc import (
    DBAPIError,
    IntegrityError,
    OperationalError,
    SQLAlchemyError,
    StatementError,
)
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine
from sqlalchemy.pool import StaticPool
from sqlalchemy.sql import Executable

from runtime.errors import LeaseLost, StorageError
from runtime.states import CallState, RunStatus, TicketStatus
from runtime.store._planner import unindexed
from runtime.store._sqlite import Member, OpenFailed, SQLiteWriter, open_sqlite
from runtime.store.base import DuplicateKey
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
    pacing_key,
)
from runtime.store.schema import (
    events,
    grants,
    idempotency_keys,
    leases,
    outbox,
    outbox_pacing,
    received_commands,
    revoked_sessions,
    run_messages,
    runs,
    schema_revisions,
    ticket_deciders,
    tickets,
    tool_calls,
)
from runtime.tickets import ANSWER, AWAIT_TARGET, Answer, ResumeTicket

if TYPE_CHECKING:
    # Alembic is imported only to migrate or to judge a schema other than ours: loading
    # it and the migration scripts costs more than the rest of a start.
    from alembic.config import Config
    from alembic.script import ScriptDirectory

MIGRATIONS_DIR = Path(__file__).parent / "migrations"
SCHEMA_HEAD = "0010"
"""The newest migration in ``migrations/versions`` (a test checks it against Alembic's).

A database at this revision is current without loading Alembic."""

log = logging.getLogger("signoff.store")

_T = TypeVar("_T")

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)
_SYNCHRONOUS = ("full", "normal")
# Any constant works; it only has to be the same in every replica.
_PG_MIGRATION_LOCK = 0x5169_0FF
_MIGRATION_WAIT_SECONDS = 60.0
_LISTEN_CHECK_SECONDS = 5.0
# Alembic's own table (not part of `metadata`, which the migrations must build exactly).
_alembic_version = Table("alembic_version", MetaData(), Column("version_num", String(32)))

WAKE_CHANNEL = "signoff_wake"
"""The PostgreSQL ``LISTEN``/``NOTIFY`` channel of wake-ups between replicas."""
WAKE_RUNS = "runs"
"""Wake-up payload: a run became ready, or a received command waits to be applied."""
WAKE_OUTBOX = "outbox"
"""Wake-up payload: a notification was queued."""

_OPEN = TicketStatus.OPEN.value
_RUNNING = RunStatus.RUNNING.value
_QUEUED = RunStatus.QUEUED.value


# --- value conversion ------------------------------------------------------------------


def to_micros(value: datetime) -> int:
    """Microseconds since the Unix epoch of a timezone-aware datetime."""
    if value.utcoffset() is None:
        raise ValueError(f"the store needs timezone-aware datetimes, got {value!r}")
    return (value - _EPOCH) // _MICROSECOND


def from_micros(value: int) -> datetime:
    """The UTC datetime `value` microseconds after the Unix epoch."""
    return _EPOCH + timedelta(microseconds=value)


def _seconds(value: float) -> timedelta:
    return timedelta(seconds=value)


def _opt_micros(value: datetime | None) -> int | None:
    return None if value is None else to_micros(value)


def _opt_datetime(value: int | None) -> datetime | None:
    return None if value is None else from_micros(value)


def _run_values(run: RunRecord, sealed: int) -> dict[str, Any]:
    """Every column of a run except the two request flags, with `sealed` transcript
    entries kept apart (in `run_messages`)."""
    return {
        "run_id": run.run_id,
        "thread_id": run.thread_id,
        "agent": run.agent,
        "agent_version": run.agent_version,
        "status": RunStatus(run.status).value,
        "input": run.input,
        "requester": run.requester,
        "created_at": to_micros(run.created_at),
        "updated_at": to_micros(run.updated_at),
        "origin": run.origin,
        "recent_messages": run.messages[sealed:],
        "sealed_messages": sealed,
        "turns": run.turns,
        "prompt_tokens": run.prompt_tokens,
        "completion_tokens": run.completion_tokens,
        "usage_incomplete": run.usage_incomplete,
        "model_attempt": run.model_attempt,
        "model_in_flight": run.model_in_flight,
        "batch": run.batch,
        "final_text": run.final_text,
        "error": run.error,
        "lease_owner": run.lease_owner,
        "lease_expires_at": _opt_micros(run.lease_expires_at),
        "fence": run.fence,
        "parent_run_id": run.parent_run_id,
        "parent_call_id": run.parent_call_id,
        "task_key": run.task_key,
        "depth": run.depth,
        "lineage": run.lineage or None,
    }


def _run_record(row: Row[Any]) -> RunRecord:
    """The run of `row`; its transcript holds only the row's own entries until the
    sealed ones are read (`SQLTransaction._whole`)."""
    return RunRecord(
        run_id=row.run_id,
        thread_id=row.thread_id,
        agent=row.agent,
        agent_version=row.agent_version,
        status=RunStatus(row.status),
        input=row.input,
        requester=row.requester,
        created_at=from_micros(row.created_at),
        updated_at=from_micros(row.updated_at),
        origin=row.origin,
        messages=list(row.recent_messages),
        turns=row.turns,
        prompt_tokens=row.prompt_tokens,
        completion_tokens=row.completion_tokens,
        usage_incomplete=row.usage_incomplete,
        model_attempt=row.model_attempt,
        model_in_flight=row.model_in_flight,
        batch=row.batch,
        final_text=row.final_text,
        error=row.error,
        pause_requested=row.pause_requested,
        cancel_requested=row.cancel_requested,
        lease_owner=row.lease_owner,
        lease_expires_at=_opt_datetime(row.lease_expires_at),
        fence=row.fence,
        parent_run_id=row.parent_run_id,
        parent_call_id=row.parent_call_id,
        task_key=row.task_key,
        depth=row.depth,
        lineage=list(row.lineage or ()),
        messages_sealed=row.sealed_messages,
    )


def _call_values(call: CallRecord) -> dict[str, Any]:
    return {
        "call_id": call.call_id,
        "run_id": call.run_id,
        "batch": call.batch,
        "seq": call.seq,
        "model_call_id": call.model_call_id,
        "tool": call.tool,
        "args": call.args,
        "state": CallState(call.state).value,
        "replay_policy": call.replay_policy,
        "execution_key": call.execution_key,
        "created_at": to_micros(call.created_at),
        "updated_at": to_micros(call.updated_at),
        "attempts": call.attempts,
        "result": call.result,
        "error": call.error,
        "answer": call.answer,
        "decided_by": call.decided_by,
        "reason": call.reason,
        "edit": call.edit,
    }


def _call_record(row: Row[Any]) -> CallRecord:
    return CallRecord(
        call_id=row.call_id,
        run_id=row.run_id,
        batch=row.batch,
        seq=row.seq,
        model_call_id=row.model_call_id,
        tool=row.tool,
        args=row.args,
        state=CallState(row.state),
        replay_policy=row.replay_policy,
        execution_key=row.execution_key,
        created_at=from_micros(row.created_at),
        updated_at=from_micros(row.updated_at),
        attempts=row.attempts,
        result=row.result,
        error=row.error,
        answer=row.answer,
        decided_by=row.decided_by,
        reason=row.reason,
        edit=row.edit,
    )


def _ticket_values(ticket: ResumeTicket) -> dict[str, Any]:
    return {
        "ticket_id": ticket.ticket_id,
        "correlation": ticket.correlation,
        "run_id": ticket.run_id,
        "thread_id": ticket.thread_id,
        "agent": ticket.agent,
        "agent_version": ticket.agent_version,
        "catalog_fingerprint": ticket.catalog_fingerprint,
        "call_id": ticket.call_id,
        "target_kind": ticket.target.kind,
        "target": AWAIT_TARGET.dump_python(ticket.target, mode="json", by_alias=True),
        "requester": ticket.requester,
        "approvers": list(ticket.approvers),
        "four_eyes": ticket.four_eyes,
        "deadline": _opt_micros(ticket.deadline),
        "status": ticket.status.value,
        "created_at": to_micros(ticket.created_at),
        "decision": _dump_answer(ticket.decision),
        "decided_by": ticket.decided_by,
        "decided_at": _opt_micros(ticket.decided_at),
        "chain": list(ticket.chain) or None,
    }


def _decider_rows(ticket: ResumeTicket) -> list[dict[str, Any]]:
    barred = ticket.requester if ticket.four_eyes else None
    return [
        {
            "ticket_id": ticket.ticket_id,
            "decider": key,
            "run_id": ticket.run_id,
            "created_at": to_micros(ticket.created_at),
            "call_id": ticket.call_id,
            "target_kind": ticket.target.kind,
            "barred": barred,
        }
        for key in decider_keys(ticket)
    ]


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


def _dump_answer(answer: Answer | None) -> dict[str, Any] | None:
    if answer is None:
        return None
    dumped: dict[str, Any] = ANSWER.dump_python(answer, mode="json", by_alias=True)
    return dumped


def _ticket(row: Row[Any]) -> ResumeTicket:
    return ResumeTicket.model_validate(
        {
            "ticket_id": row.ticket_id,
            "correlation": row.correlation,
            "run_id": row.run_id,
            "thread_id": row.thread_id,
            "agent": row.agent,
            "agent_version": row.agent_version,
            "catalog_fingerprint": row.catalog_fingerprint,
            "target": row.target,
            "requester": row.requester,
            "approvers": tuple(row.approvers),
            "four_eyes": row.four_eyes,
            "deadline": _opt_datetime(row.deadline),
            "status": TicketStatus(row.status),
            "created_at": from_micros(row.created_at),
            "decision": row.decision,
            "decided_by": row.decided_by,
            "decided_at": _opt_datetime(row.decided_at),
            "chain": tuple(row.chain or ()),
        }
    )


def _event_record(row: Row[Any]) -> EventRecord:
    return EventRecord(
        run_id=row.run_id,
        at=from_micros(row.at),
        kind=row.kind,
        data=row.data,
        actor=row.actor,
        seq=row.seq,
    )


def _outbox_values(item: OutboxRecord) -> dict[str, Any]:
    return {
        "outbox_id": item.outbox_id,
        "run_id": item.run_id,
        "kind": item.kind,
        "payload": item.payload,
        "destination": item.destination,
        "created_at": to_micros(item.created_at),
        "next_attempt_at": to_micros(item.next_attempt_at),
        "ticket_id": item.ticket_id,
        "state": item.state,
        "attempts": item.attempts,
        "last_error": item.last_error,
        "platform_ref": item.platform_ref,
        "delivered_at": _opt_micros(item.delivered_at),
        "channel_key": pacing_key(item.kind, item.destination),
        "lease_owner": item.lease_owner,
        "lease_expires_at": _opt_micros(item.lease_expires_at),
        "fence": item.fence,
    }


def _received_values(item: ReceivedRecord) -> dict[str, Any]:
    return {
        "command_id": item.command_id,
        "source": item.source,
        "delivery_id": item.delivery_id,
        "ticket_id": item.ticket_id,
        "correlation": item.correlation,
        "answer": item.answer,
        "actor": item.actor,
        "reply": item.reply,
        "received_at": to_micros(item.received_at),
        "state": item.state,
        "error_code": item.error_code,
        "error": item.error,
        "applied_at": to_micros(item.applied_at) if item.applied_at is not None else None,
        "lease_owner": item.lease_owner,
        "lease_expires_at": _opt_micros(item.lease_expires_at),
    }


def _received_record(row: Row[Any]) -> ReceivedRecord:
    return ReceivedRecord(
        command_id=row.command_id,
        source=row.source,
        delivery_id=row.delivery_id,
        ticket_id=row.ticket_id,
        correlation=row.correlation,
        answer=row.answer,
        actor=row.actor,
        reply=row.reply,
        received_at=from_micros(row.received_at),
        state=row.state,
        error_code=row.error_code,
        error=row.error,
        applied_at=from_micros(row.applied_at) if row.applied_at is not None else None,
        lease_owner=row.lease_owner,
        lease_expires_at=_opt_datetime(row.lease_expires_at),
    )


def _outbox_record(row: Row[Any]) -> OutboxRecord:
    return OutboxRecord(
        outbox_id=row.outbox_id,
        run_id=row.run_id,
        kind=row.kind,
        payload=row.payload,
        destination=row.destination,
        created_at=from_micros(row.created_at),
        next_attempt_at=from_micros(row.next_attempt_at),
        ticket_id=row.ticket_id,
        state=row.state,
        attempts=row.attempts,
        last_error=row.last_error,
        platform_ref=row.platform_ref,
        delivered_at=_opt_datetime(row.delivered_at),
        lease_owner=row.lease_owner,
        lease_expires_at=_opt_datetime(row.lease_expires_at),
        fence=row.fence,
    )


def _idempotency_record(row: Row[Any]) -> IdempotencyRecord:
    return IdempotencyRecord(
        scope=row.scope,
        key=row.key,
        fingerprint=row.fingerprint,
        run_id=row.run_id,
        created_at=from_micros(row.created_at),
    )


def _grant_values(grant: GrantRecord) -> dict[str, Any]:
    return {
        "grant_id": grant.grant_id,
        "agent": grant.agent,
        "agent_version": grant.agent_version,
        "catalog_fingerprint": grant.catalog_fingerprint,
        "tool": grant.tool,
        "scope": grant.scope,
        "run_id": grant.run_id,
        "thread_id": grant.thread_id,
        "requester": grant.requester,
        "arg_constraint": grant.constraint,
        "granted_by": grant.granted_by,
        "granted_by_name": grant.granted_by_name,
        "platform": grant.platform,
        "ticket_id": grant.ticket_id,
        "created_at": to_micros(grant.created_at),
        "expires_at": _opt_micros(grant.expires_at),
        "revoked_at": _opt_micros(grant.revoked_at),
        "revoked_by": grant.revoked_by,
    }


def _grant_record(row: Row[Any]) -> GrantRecord:
    return GrantRecord(
        grant_id=row.grant_id,
        agent=row.agent,
        agent_version=row.agent_version,
        catalog_fingerprint=row.catalog_fingerprint,
        tool=row.tool,
        scope=row.scope,
        run_id=row.run_id,
        thread_id=row.thread_id,
        requester=row.requester,
        constraint=row.arg_constraint,
        granted_by=row.granted_by,
        granted_by_name=row.granted_by_name,
        platform=row.platform,
        ticket_id=row.ticket_id,
        created_at=from_micros(row.created_at),
        expires_at=_opt_datetime(row.expires_at),
        revoked_at=_opt_datetime(row.revoked_at),
        revoked_by=row.revoked_by,
    )


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


def _without(values: dict[str, Any], *keys: str) -> dict[str, Any]:
    for key in keys:
        del values[key]
    return values


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
_LOCK_RUN = _RUN_EXISTS.with_for_update()
_FLAG_COLUMNS = (runs.c.pause_requested, runs.c.cancel_requested)
_UPDATE_RUN_FLAGS = _UPDATE_RUN.returning(*_FLAG_COLUMNS)
_UPDATE_RUN_FENCED_FLAGS = _UPDATE_RUN_FENCED.returning(*_FLAG_COLUMNS)
_RUN_FLAGS = select(*_FLAG_COLUMNS).where(runs.c.run_id == bindparam("run_id"))
_CLAIMABLE = or_(
    runs.c.status == _QUEUED,
    and_(runs.c.status == _RUNNING, runs.c.lease_expires_at <= bindparam("now")),
)
_CLAIM = (
    update(runs)
    .where(runs.c.run_id == bindparam("b_run_id"), _CLAIMABLE)
    .values(
        status=_RUNNING,
        fence=runs.c.fence + 1,
        lease_owner=bindparam("owner"),
        lease_expires_at=bindparam("until"),
        updated_at=bindparam("now"),
    )
)
# PostgreSQL: a run another transaction has locked (being claimed, or decided) is passed
# over at once instead of waited for; the loser would find it claimed anyway.
_CLAIM_SKIP_LOCKED = (
    update(runs)
    .where(
        runs.c.run_id
        == select(runs.c.run_id)
        .where(runs.c.run_id == bindparam("b_run_id"), _CLAIMABLE)
        .with_for_update(skip_locked=True)
        .scalar_subquery()
    )
    .values(
        status=_RUNNING,
        fence=runs.c.fence + 1,
        lease_owner=bindparam("owner"),
        lease_expires_at=bindparam("until"),
        updated_at=bindparam("now"),
    )
)
_CLAIM_RETURNING = _CLAIM.returning(*runs.c)
_CLAIM_SKIP_LOCKED_RETURNING = _CLAIM_SKIP_LOCKED.returning(*runs.c)


def _oldest_runs(*where: ColumnElement[bool]) -> Any:
    return (
        select(runs.c.run_id, runs.c.updated_at)
        .where(*where)
        .order_by(runs.c.updated_at, runs.c.run_id)
        .limit(bindparam("limit"))
        .subquery()
    )


# `_CLAIMABLE` as two ordered scans of the (status, updated_at) index, each stopping at
# `limit`: with `OR` the database sorts every queued run to return the first few.
_CLAIMABLE_EITHER = (
    select(_oldest_runs(runs.c.status == _QUEUED))
    .union_all(
        select(_oldest_runs(runs.c.status == _RUNNING, runs.c.lease_expires_at <= bindparam("now")))
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
        runs.c.status == _RUNNING,
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
_INSERT_CALL = insert(tool_calls)
_UPDATE_CALL = update(tool_calls).where(tool_calls.c.call_id == bindparam("b_call_id"))
_CALLS_FOR_RUN = (
    select(tool_calls)
    .where(tool_calls.c.run_id == bindparam("run_id"))
    .order_by(tool_calls.c.batch, tool_calls.c.seq)
)
_CALLS_FOR_BATCH = (
    select(tool_calls)
    .where(tool_calls.c.run_id == bindparam("run_id"), tool_calls.c.batch == bindparam("batch"))
    .order_by(tool_calls.c.seq)
)
_GET_CALL = select(tool_calls).where(tool_calls.c.call_id == bindparam("call_id"))
_CALL_BY_KEY = select(tool_calls).where(tool_calls.c.execution_key == bindparam("key"))
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
    .where(tickets.c.call_id == bindparam("call_id"), unindexed(tickets.c.status) == _OPEN)
    .order_by(tickets.c.created_at, tickets.c.ticket_id)
    .limit(1)
)
_CLOSE_TICKET = update(tickets).where(
    tickets.c.ticket_id == bindparam("b_ticket_id"), tickets.c.status == _OPEN
)
_OPEN_TICKETS = (
    select(tickets)
    .where(tickets.c.status == _OPEN)
    .order_by(tickets.c.created_at, tickets.c.ticket_id)
    .limit(bindparam("limit"))
)
_OPEN_TICKETS_AFTER = (
    select(tickets)
    .where(
        tickets.c.status == _OPEN,
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
        tickets.c.status == _OPEN,
        tickets.c.deadline.is_not(None),
        tickets.c.deadline <= bindparam("now"),
    )
    .order_by(tickets.c.deadline, tickets.c.ticket_id)
    .limit(bindparam("limit"))
)
_EVENTS = (
    select(events)
    .where(events.c.run_id == bindparam("run_id"), events.c.seq > bindparam("after"))
    .order_by(events.c.seq)
)
_INSERT_EVENT = insert(events)
_INSERT_OUTBOX = insert(outbox)
_UPDATE_OUTBOX = update(outbox).where(outbox.c.outbox_id == bindparam("b_outbox_id"))
_DUE_OUTBOX = (
    select(outbox)
    .where(outbox.c.state == "pending", outbox.c.next_attempt_at <= bindparam("now"))
    .order_by(outbox.c.created_at, outbox.c.outbox_id)
    .limit(bindparam("limit"))
)
_OUTBOX_FOR_RUN = (
    select(outbox)
    .where(outbox.c.run_id == bindparam("run_id"))
    .order_by(outbox.c.created_at, outbox.c.outbox_id)
)
_FIND_OUTBOX = (
    select(outbox)
    .where(outbox.c.ticket_id == bindparam("ticket_id"), outbox.c.kind == bindparam("kind"))
    .order_by(outbox.c.created_at, outbox.c.outbox_id)
    .limit(1)
)
_PENDING_RECEIVED = (
    select(received_commands)
    .where(received_commands.c.state == "pending")
    .order_by(received_commands.c.received_at, received_commands.c.command_id)
    .limit(bindparam("limit"))
)
_UPDATE_RECEIVED = update(received_commands).where(
    received_commands.c.command_id == bindparam("b_command_id")
)
_OUTBOX_FREE = or_(
    outbox.c.lease_expires_at.is_(None), outbox.c.lease_expires_at <= bindparam("now")
)
# Candidates for a claim, with their channel's pacing slot. FOR UPDATE SKIP LOCKED (on
# PostgreSQL; SQLite holds the write lock already) makes concurrent claims pass each
# other's rows by instead of waiting for them or taking them twice.
_OUTBOX_CANDIDATES = (
    select(outbox.c.outbox_id, outbox.c.channel_key, outbox_pacing.c.next_at)
    .select_from(
        outbox.outerjoin(outbox_pacing, outbox_pacing.c.channel_key == outbox.c.channel_key)
    )
    .where(outbox.c.state == "pending", outbox.c.next_attempt_at <= bindparam("now"), _OUTBOX_FREE)
    .order_by(outbox.c.created_at, outbox.c.outbox_id)
    .limit(bindparam("limit"))
    .with_for_update(of=outbox, skip_locked=True)
)
_CLAIM_OUTBOX = (
    update(outbox)
    .where(outbox.c.outbox_id.in_(bindparam("ids", expanding=True)))
    .values(
        lease_owner=bindparam("owner"),
        lease_expires_at=bindparam("until"),
        fence=outbox.c.fence + 1,
    )
    .returning(*outbox.c)
)
_UPDATE_OUTBOX_FENCED = _UPDATE_OUTBOX.where(
    outbox.c.fence == bindparam("b_fence"), outbox.c.state == "pending"
)
_CLAIM_RECEIVED = (
    update(received_commands)
    .where(
        received_commands.c.command_id.in_(
            select(received_commands.c.command_id)
            .where(
                received_commands.c.state == "pending",
                or_(
                    received_commands.c.lease_expires_at.is_(None),
                    received_commands.c.lease_expires_at <= bindparam("now"),
                ),
            )
            .order_by(received_commands.c.received_at, received_commands.c.command_id)
            .limit(bindparam("limit"))
            .with_for_update(skip_locked=True)
            .scalar_subquery()
        )
    )
    .values(lease_owner=bindparam("owner"), lease_expires_at=bindparam("until"))
    .returning(*received_commands.c)
)
_UPDATE_RECEIVED_PENDING = _UPDATE_RECEIVED.where(received_commands.c.state == "pending")
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
_NOTIFY = text("SELECT pg_notify(:channel, :payload)")
_INSERT_GRANT = insert(grants)
_GET_GRANT = select(grants).where(grants.c.grant_id == bindparam("grant_id"))
_GRANT_LIVE = and_(
    grants.c.revoked_at.is_(None),
    or_(grants.c.expires_at.is_(None), grants.c.expires_at > bindparam("now")),
)
_ACTIVE_GRANTS = (
    select(grants)
    .where(
        grants.c.agent == bindparam("agent"),
        grants.c.tool == bindparam("tool"),
        _GRANT_LIVE,
        or_(
            and_(grants.c.scope == "run", grants.c.run_id == bindparam("run_id")),
            and_(grants.c.scope == "thread", grants.c.thread_id == bindparam("thread_id")),
        ),
    )
    .order_by(grants.c.created_at, grants.c.grant_id)
)
_REVOKE_GRANT = (
    update(grants)
    .where(grants.c.grant_id == bindparam("b_grant_id"), grants.c.revoked_at.is_(None))
    .values(revoked_at=bindparam("at"), revoked_by=bindparam("by"))
)
_FORGET_KEYS = idempotency_keys.delete().where(
    idempotency_keys.c.scope == bindparam("scope"),
    idempotency_keys.c.created_at < bindparam("before"),
)
_SESSION_REVOKED = select(revoked_sessions.c.session_id).where(
    revoked_sessions.c.session_id == bindparam("session_id")
)
_REVOKE_SESSION = insert(revoked_sessions)
_FORGET_SESSIONS = revoked_sessions.delete().where(
    revoked_sessions.c.expires_at < bindparam("before")
)
_RECEIVED_ID = select(received_commands.c.command_id).where(
    received_commands.c.command_id == bindparam("command_id")
)
_INSERT_KEY = insert(idempotency_keys)
_GET_KEY = select(idempotency_keys).where(
    idempotency_keys.c.scope == bindparam("scope"), idempotency_keys.c.key == bindparam("key")
)


@dataclass(frozen=True)
class _Upserts:
    """The statements that need an engine's own ``INSERT ... ON CONFLICT``."""

    take_slot: Insert
    insert_lease: Insert
    insert_received: Insert


@functools.cache
def _upserts(dialect: str) -> _Upserts:
    if dialect not in ("postgresql", "sqlite"):
        raise StorageError(f"signoff's store runs on SQLite and PostgreSQL, not {dialect}")
    # Imported here: a process on one database never loads the other's dialect.
    module: Any = importlib.import_module(f"sqlalchemy.dialects.{dialect}")
    slot = module.insert(outbox_pacing).values(
        channel_key=bindparam("key"), next_at=bindparam("next_at")
    )
    key = [outbox_pacing.c.channel_key]
    lease = module.insert(leases).values(
        name=bindparam("b_name"),
        owner=bindparam("b_owner"),
        fence=1,
        expires_at=bindparam("b_until"),
    )
    return _Upserts(
        # A channel's slot is taken only when it is free: of two claims racing for it,
        # the second sees the first's row and updates nothing.
        take_slot=slot.on_conflict_do_update(
            index_elements=key,
            set_={"next_at": slot.excluded.next_at},
            where=outbox_pacing.c.next_at <= bindparam("now"),
        ),
        insert_lease=lease.on_conflict_do_nothing(index_elements=[leases.c.name]).returning(
            leases.c.fence
        ),
        # A delivery stored before inserts nothing, in the one statement (on PostgreSQL a
        # unique violation would abort the transaction it is part of).
        insert_received=module.insert(received_commands).on_conflict_do_nothing(
            index_elements=[received_commands.c.source, received_commands.c.delivery_id]
        ),
    )


def _count(table: Table, *where: ColumnElement[bool]) -> ScalarSelect[int]:
    return select(func.count()).select_from(table).where(*where).scalar_subquery()


# One round trip for every figure.
_STATS = select(
    _count(tickets, tickets.c.status == _OPEN).label("open_tickets"),
    _count(outbox, outbox.c.state == "pending").label("outbox_pending"),
    _count(outbox, outbox.c.state == "failed").label("outbox_failed"),
)


class _Result(Protocol):
    """What the store reads of a statement's result (SQLAlchemy's, or `_sqlite.Rows`)."""

    @property
    def rowcount(self) -> int: ...

    def first(self) -> Any: ...

    def one(self) -> Any: ...

    def all(self) -> Sequence[Any]: ...

    def scalars(self) -> Iterable[Any]: ...

    def __iter__(self) -> Iterator[Any]: ...


class SQLTransaction:
    """One database transaction, implementing `runtime.store.base.Transaction`.

    Obtain it from `SQLStore.transaction`; it is only usable inside that block.

    Attributes:
        wrote: Whether any statement changed a row.
    """

    def __init__(self, conn: AsyncConnection | Member, dialect: Dialect) -> None:
        # SQLite: a member of the writer's shared transaction, statements run here;
        # PostgreSQL: an async connection of the pool.
        self._member = conn if isinstance(conn, Member) else None
        self._conn = conn if isinstance(conn, AsyncConnection) else None
        self._returning = bool(dialect.update_returning)
        self._dialect = dialect.name
        # SQLite serialises writers with BEGIN IMMEDIATE; other engines need row locks.
        self._row_locks = dialect.name != "sqlite"
        self.wrote = False
        self._events: list[dict[str, Any]] = []
        # What other processes should look at once this commits (PostgreSQL NOTIFY).
        self._wake: set[str] = set()
        self.woke: frozenset[str] = frozenset()
        """What this transaction makes ready once committed, as `flush` found it."""
        # Bookkeeping of records to take back if this transaction does not commit.
        self._undo: list[Callable[[], None]] = []

    def forget(self) -> None:
        """The transaction did not commit (or its outcome is unknown): take back what it
        noted in the records it wrote, so that a later write writes it again."""
        undo, self._undo = self._undo, []
        for step in reversed(undo):
            step()

    async def _execute(
        self,
        statement: Executable,
        params: Mapping[str, Any] | Sequence[Mapping[str, Any]] | None = None,
        *,
        violation: type[ValueError] = ValueError,
    ) -> _Result:
        try:
            if self._member is not None:
                return self._member.execute(statement, params)
            assert self._conn is not None
            return await self._conn.execute(statement, params)
        except sqlite3.IntegrityError as exc:
            raise violation(f"constraint violated: {exc}") from exc
        except sqlite3.Error as exc:
            raise StorageError(f"database error: {exc}") from exc
        except IntegrityError as exc:
            raise violation(f"constraint violated: {exc.orig}") from exc
        except DBAPIError as exc:
            raise StorageError(f"database error: {exc.orig}") from exc
        except StatementError as exc:
            # Raised before reaching the database: a value that cannot be stored,
            # e.g. something JSON cannot encode.
            raise ValueError(f"cannot store value: {exc.orig}") from exc
        except SQLAlchemyError as exc:
            raise StorageError(f"database error: {exc}") from exc
        except Exception as exc:
            if not unreachable(exc):
                raise
            raise StorageError(f"database error: {_unreachable_reason(exc)}") from exc

    async def _run_exists(self, run_id: str) -> bool:
        result = await self._execute(_RUN_EXISTS, {"run_id": run_id})
        return result.first() is not None

    # runs ---------------------------------------------------------------------------
    async def insert_run(self, run: RunRecord) -> None:
        """Add a new run; `ValueError` if its id exists, `DuplicateKey` if its parent has
        a child for its task key already."""
        run.messages_sealed = 0
        sealed = _sealing(run)
        values = _run_values(run, sealed)
        values["pause_requested"] = run.pause_requested
        values["cancel_requested"] = run.cancel_requested
        child = run.parent_run_id is not None
        await self._execute(_INSERT_RUN, values, violation=DuplicateKey if child else ValueError)
        self.wrote = True
        await self._seal(run, sealed)
        if run.status is RunStatus.QUEUED:
            self._wake.add(WAKE_RUNS)

    async def get_run(self, run_id: str, *, for_update: bool = False) -> RunRecord | None:
        """Read a run; ``for_update`` locks its row (a no-op on SQLite)."""
        statement = _GET_RUN_LOCKED if for_update else _GET_RUN
        row = (await self._execute(statement, {"run_id": run_id})).first()
        return None if row is None else await self._run(row)

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
        return (await self._whole([_run_record(row)]))[0]

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
        values = _without(_run_values(run, sealed), "run_id", *RUN_CREATED_WITH)
        values["b_run_id"] = run.run_id
        statement, returning = _UPDATE_RUN, _UPDATE_RUN_FLAGS
        if fence is not None:
            values["b_fence"] = fence
            statement, returning = _UPDATE_RUN_FENCED, _UPDATE_RUN_FENCED_FLAGS
        if self._returning:
            row = (await self._execute(returning, values)).first()
            matched = row is not None
        else:
            matched = (await self._execute(statement, values)).rowcount == 1
            row = (await self._execute(_RUN_FLAGS, {"run_id": run.run_id})).first()
        if not matched:
            if fence is not None and await self._run_exists(run.run_id):
                raise LeaseLost(f"run {run.run_id}: lease fence {fence} was superseded")
            raise ValueError(f"run {run.run_id} does not exist")
        self.wrote = True
        await self._seal(run, sealed)
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
            claim = _CLAIM_SKIP_LOCKED_RETURNING if self._row_locks else _CLAIM_RETURNING
            row = (await self._execute(claim, params)).first()
            if row is None:
                return None
            self.wrote = True
            return await self._run(row)
        # Without RETURNING (SQLite < 3.35) the follow-up read is still safe: the
        # transaction holds the write lock since BEGIN IMMEDIATE.
        if (await self._execute(_CLAIM, params)).rowcount != 1:
            return None
        self.wrote = True
        return await self.get_run(run_id)

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
        return await self._whole([_run_record(row) for row in result])

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
        return await self._whole([_run_record(row) for row in rows])

    # tool calls ---------------------------------------------------------------------
    async def insert_call(self, call: CallRecord) -> None:
        """Add a tool call; `ValueError` if its id or execution key exists."""
        await self._execute(_INSERT_CALL, _call_values(call))
        self.wrote = True

    async def update_call(self, call: CallRecord) -> None:
        """Write a tool call back; `ValueError` if it does not exist."""
        values = _without(_call_values(call), "call_id", *CALL_CREATED_WITH)
        values["b_call_id"] = call.call_id
        if (await self._execute(_UPDATE_CALL, values)).rowcount != 1:
            raise ValueError(f"call {call.call_id} does not exist")
        self.wrote = True

    async def get_call(self, call_id: str) -> CallRecord | None:
        """Read one tool call."""
        row = (await self._execute(_GET_CALL, {"call_id": call_id})).first()
        return None if row is None else _call_record(row)

    async def calls_for_run(self, run_id: str, *, batch: int | None = None) -> list[CallRecord]:
        """A run's calls (optionally of one batch) ordered by batch and position."""
        if batch is None:
            result = await self._execute(_CALLS_FOR_RUN, {"run_id": run_id})
        else:
            result = await self._execute(_CALLS_FOR_BATCH, {"run_id": run_id, "batch": batch})
        return [_call_record(row) for row in result]

    async def call_by_execution_key(self, execution_key: str) -> CallRecord | None:
        """The call with this execution key."""
        row = (await self._execute(_CALL_BY_KEY, {"key": execution_key})).first()
        return None if row is None else _call_record(row)

    # tickets ------------------------------------------------------------------------
    async def insert_ticket(self, ticket: ResumeTicket) -> None:
        """Add a ticket; `ValueError` if its id exists or its call already has an open one."""
        call_id = ticket.call_id
        if call_id is not None and ticket.status is TicketStatus.OPEN:
            if self._row_locks:
                # Serialises ticket inserts of one run, so the check below cannot race
                # another transaction inserting a ticket for the same call.
                await self._execute(_LOCK_RUN, {"run_id": ticket.run_id})
            found = await self._execute(_OPEN_FOR_CALL, {"call_id": call_id})
            if found.first() is not None:
                raise ValueError(f"call {call_id} already has an open ticket")
        await self._execute(_INSERT_TICKET, _ticket_values(ticket))
        if ticket.status is TicketStatus.OPEN:
            rows = _decider_rows(ticket)
            if rows:
                await self._execute(_INSERT_DECIDERS, rows)
        self.wrote = True

    async def get_ticket(self, ticket_id: str) -> ResumeTicket | None:
        """Read one ticket."""
        row = (await self._execute(_GET_TICKET, {"ticket_id": ticket_id})).first()
        return None if row is None else _ticket(row)

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
            "decision": _dump_answer(decision),
            "decided_by": decided_by,
            "decided_at": to_micros(at),
        }
        if (await self._execute(_CLOSE_TICKET, params)).rowcount != 1:
            return False
        await self._execute(_DROP_DECIDERS, {"b_ticket_id": ticket_id})
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
        return [_ticket(row) for row in result]

    async def open_tickets(
        self, *, limit: int = 100, after: Position | None = None
    ) -> list[ResumeTicket]:
        """Open tickets of every run, oldest first (past `after`, when given)."""
        if after is None:
            result = await self._execute(_OPEN_TICKETS, {"limit": limit})
        else:
            params = {"limit": limit, "at": to_micros(after.at), "id": after.id}
            result = await self._execute(_OPEN_TICKETS_AFTER, params)
        return [_ticket(row) for row in result]

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
        by_id = {row.ticket_id: _ticket(row) for row in result}
        return [by_id[ticket_id] for ticket_id in page if ticket_id in by_id]

    async def open_ticket_for_call(self, call_id: str) -> ResumeTicket | None:
        """The open ticket waiting on a call, if any."""
        row = (await self._execute(_OPEN_FOR_CALL, {"call_id": call_id})).first()
        return None if row is None else _ticket(row)

    async def overdue_tickets(self, now: datetime, limit: int) -> list[ResumeTicket]:
        """Open tickets whose deadline is at or before `now`, earliest deadline first."""
        params = {"now": to_micros(now), "limit": limit}
        return [_ticket(row) for row in await self._execute(_OVERDUE, params)]

    # flight recorder ----------------------------------------------------------------
    async def append_event(self, event: EventRecord) -> None:
        """Append to a run's flight recorder; the store assigns ``seq``."""
        values = {
            "run_id": event.run_id,
            "at": to_micros(event.at),
            "kind": event.kind,
            "data": event.data,
            "actor": event.actor,
        }
        # Written in one statement just before the commit (or before a read of events):
        # a step's several events cost one round trip.
        self._events.append(values)
        self.wrote = True

    async def _flush_events(self) -> None:
        if self._events:
            pending, self._events = self._events, []
            await self._execute(_INSERT_EVENT, pending)

    async def flush(self) -> None:
        """Write buffered events and queue the wake-ups; the store calls it before committing.

        On PostgreSQL a ``NOTIFY`` tells every listening replica what became ready (a
        queued run, a received command, a notification); it is delivered at commit, and
        never if the transaction rolls back.
        """
        await self._flush_events()
        if self._wake and self._dialect == "postgresql":
            payload = ",".join(sorted(self._wake))
            await self._execute(_NOTIFY, {"channel": WAKE_CHANNEL, "payload": payload})
        self.woke = frozenset(self._wake)
        self._wake.clear()

    async def events(self, run_id: str, *, after: int = 0) -> list[EventRecord]:
        """A run's events with ``seq > after``, in order."""
        await self._flush_events()
        result = await self._execute(_EVENTS, {"run_id": run_id, "after": after})
        return [_event_record(row) for row in result]

    # outbox -------------------------------------------------------------------------
    async def add_outbox(self, item: OutboxRecord) -> None:
        """Queue a notification; `ValueError` if its id exists."""
        await self._execute(_INSERT_OUTBOX, _outbox_values(item))
        self.wrote = True
        self._wake.add(WAKE_OUTBOX)

    async def due_outbox(self, now: datetime, limit: int) -> list[OutboxRecord]:
        """Pending notifications whose next attempt is due, oldest first."""
        params = {"now": to_micros(now), "limit": limit}
        return [_outbox_record(row) for row in await self._execute(_DUE_OUTBOX, params)]

    async def claim_outbox(
        self,
        now: datetime,
        limit: int,
        *,
        owner: str,
        until: datetime,
        pacing: Mapping[str, float] | None = None,
    ) -> list[OutboxRecord]:
        """Claim due notifications, skipping rows other claims hold; see the protocol."""
        if limit <= 0:
            return []
        intervals = pacing or {}
        at = to_micros(now)
        # Paced channels yield one item per claim: look further than `limit` rows.
        params = {"now": at, "limit": limit * 4 if intervals else limit}
        candidates = (await self._execute(_OUTBOX_CANDIDATES, params)).all()
        chosen: list[str] = []
        taken: set[str] = set()
        upserts = _upserts(self._dialect)
        for row in candidates:
            if len(chosen) >= limit:
                break
            key = row.channel_key
            if key is not None:
                if key in taken or (row.next_at is not None and row.next_at > at):
                    continue
                interval = intervals.get(key.split(":", 1)[0])
                if interval is not None:
                    slot = {"key": key, "now": at, "next_at": to_micros(now + _seconds(interval))}
                    if (await self._execute(upserts.take_slot, slot)).rowcount != 1:
                        continue  # another process took this channel's slot just now
                    taken.add(key)
            chosen.append(row.outbox_id)
        if not chosen:
            return []
        claim = {"ids": chosen, "owner": owner, "until": to_micros(until)}
        rows = (await self._execute(_CLAIM_OUTBOX, claim)).all()
        self.wrote = True
        claimed = [_outbox_record(row) for row in rows]
        claimed.sort(key=lambda o: (o.created_at, o.outbox_id))
        return claimed

    async def update_outbox(self, item: OutboxRecord, *, fence: int | None = None) -> bool:
        """Write a notification's delivery state back, compare-and-set on `fence` if given.

        Raises:
            ValueError: Without a fence, when the item does not exist.
        """
        values = _without(_outbox_values(item), "outbox_id")
        values["b_outbox_id"] = item.outbox_id
        statement = _UPDATE_OUTBOX
        if fence is not None:
            values["b_fence"] = fence
            statement = _UPDATE_OUTBOX_FENCED
        if (await self._execute(statement, values)).rowcount != 1:
            if fence is not None:
                return False
            raise ValueError(f"outbox item {item.outbox_id} does not exist")
        self.wrote = True
        return True

    async def outbox_for_run(self, run_id: str) -> list[OutboxRecord]:
        """Every notification of a run, oldest first."""
        result = await self._execute(_OUTBOX_FOR_RUN, {"run_id": run_id})
        return [_outbox_record(row) for row in result]

    async def find_outbox(self, *, ticket_id: str, kind: str) -> OutboxRecord | None:
        """The first notification of `kind` about a ticket."""
        params = {"ticket_id": ticket_id, "kind": kind}
        row = (await self._execute(_FIND_OUTBOX, params)).first()
        return None if row is None else _outbox_record(row)

    # idempotency keys and figures ---------------------------------------------------
    async def get_idempotency(self, scope: str, key: str) -> IdempotencyRecord | None:
        """The record of a key already used in `scope`, if any."""
        row = (await self._execute(_GET_KEY, {"scope": scope, "key": key})).first()
        return None if row is None else _idempotency_record(row)

    async def insert_idempotency(self, item: IdempotencyRecord) -> None:
        """Remember a key; `DuplicateKey` if (scope, key) exists."""
        values = {
            "scope": item.scope,
            "key": item.key,
            "fingerprint": item.fingerprint,
            "run_id": item.run_id,
            "created_at": to_micros(item.created_at),
        }
        await self._execute(_INSERT_KEY, values, violation=DuplicateKey)
        self.wrote = True

    async def forget_idempotency(self, scope: str, before: datetime) -> int:
        """Forget keys of `scope` first used before `before`; return how many."""
        params = {"scope": scope, "before": to_micros(before)}
        count = (await self._execute(_FORGET_KEYS, params)).rowcount
        self.wrote = self.wrote or count > 0
        return count

    async def revoke_session(self, session_id: str, expires_at: datetime) -> None:
        """Refuse a session from now until `expires_at` (idempotent)."""
        if await self.session_revoked(session_id):
            return
        await self._execute(
            _REVOKE_SESSION, {"session_id": session_id, "expires_at": to_micros(expires_at)}
        )
        self.wrote = True

    async def session_revoked(self, session_id: str) -> bool:
        """Whether a session was revoked."""
        found = await self._execute(_SESSION_REVOKED, {"session_id": session_id})
        return found.first() is not None

    async def forget_revoked_sessions(self, before: datetime) -> int:
        """Forget revocations of sessions that expired before `before`."""
        params = {"before": to_micros(before)}
        count = (await self._execute(_FORGET_SESSIONS, params)).rowcount
        self.wrote = self.wrote or count > 0
        return count

    async def insert_received(self, item: ReceivedRecord) -> bool:
        """Store a received command; False if (source, delivery_id) was stored before."""
        statement = _upserts(self._dialect).insert_received
        values = _received_values(item)
        if (await self._execute(statement, values, violation=DuplicateKey)).rowcount != 1:
            return False
        self.wrote = True
        self._wake.add(WAKE_RUNS)
        return True

    async def pending_received(self, limit: int) -> list[ReceivedRecord]:
        """Received commands not yet applied, oldest first."""
        result = await self._execute(_PENDING_RECEIVED, {"limit": limit})
        return [_received_record(row) for row in result]

    async def claim_received(
        self, now: datetime, limit: int, *, owner: str, until: datetime
    ) -> list[ReceivedRecord]:
        """Claim pending received commands, skipping those another process holds."""
        if limit <= 0:
            return []
        params = {
            "now": to_micros(now),
            "limit": limit,
            "owner": owner,
            "until": to_micros(until),
        }
        rows = (await self._execute(_CLAIM_RECEIVED, params)).all()
        if not rows:
            return []
        self.wrote = True
        claimed = [_received_record(row) for row in rows]
        claimed.sort(key=lambda r: (r.received_at, r.command_id))
        return claimed

    async def update_received(self, item: ReceivedRecord, *, only_pending: bool = False) -> bool:
        """Write a received command's state back (only while pending, if asked).

        Raises:
            ValueError: The command does not exist.
        """
        values = _without(_received_values(item), "command_id")
        values["b_command_id"] = item.command_id
        statement = _UPDATE_RECEIVED_PENDING if only_pending else _UPDATE_RECEIVED
        if (await self._execute(statement, values)).rowcount != 1:
            if only_pending and await self._received_exists(item.command_id):
                return False
            raise ValueError(f"received command {item.command_id} does not exist")
        self.wrote = True
        return True

    async def _received_exists(self, command_id: str) -> bool:
        found = await self._execute(_RECEIVED_ID, {"command_id": command_id})
        return found.first() is not None

    # standing grants ---------------------------------------------------------------
    async def insert_grant(self, grant: GrantRecord) -> None:
        """Add a grant; `ValueError` if its id exists or its run does not."""
        await self._execute(_INSERT_GRANT, _grant_values(grant))
        self.wrote = True

    async def get_grant(self, grant_id: str) -> GrantRecord | None:
        """Read one grant."""
        row = (await self._execute(_GET_GRANT, {"grant_id": grant_id})).first()
        return None if row is None else _grant_record(row)

    async def active_grants(
        self, *, agent: str, tool: str, run_id: str, thread_id: str, now: datetime
    ) -> list[GrantRecord]:
        """Grants that may cover a call now, oldest first (see the protocol)."""
        params = {
            "agent": agent,
            "tool": tool,
            "run_id": run_id,
            "thread_id": thread_id,
            "now": to_micros(now),
        }
        return [_grant_record(row) for row in await self._execute(_ACTIVE_GRANTS, params)]

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
        """Grants, newest first, filtered by every argument given."""
        statement = select(grants)
        if run_id is not None:
            statement = statement.where(grants.c.run_id == run_id)
        if thread_id is not None:
            statement = statement.where(grants.c.thread_id == thread_id)
        if scope is not None:
            statement = statement.where(grants.c.scope == scope)
        if involving is not None:
            statement = statement.where(
                or_(grants.c.granted_by == involving, grants.c.requester == involving)
            )
        params: dict[str, Any] = {}
        if active_at is not None:
            statement = statement.where(_GRANT_LIVE)
            params["now"] = to_micros(active_at)
        statement = statement.order_by(grants.c.created_at.desc(), grants.c.grant_id.desc()).limit(
            limit
        )
        return [_grant_record(row) for row in await self._execute(statement, params)]

    async def revoke_grant(self, grant_id: str, *, by: str, at: datetime) -> bool:
        """Compare-and-set: revoke a grant that is not revoked yet."""
        params = {"b_grant_id": grant_id, "at": to_micros(at), "by": by}
        if (await self._execute(_REVOKE_GRANT, params)).rowcount != 1:
            return False
        self.wrote = True
        return True

    # named leases -------------------------------------------------------------------
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
            row = (await self._execute(_upserts(self._dialect).insert_lease, params)).first()
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


def _check_close(status: TicketStatus, decision: Answer | None) -> None:
    if status is TicketStatus.OPEN:
        raise ValueError("closing a ticket needs a status other than open")
    if status is TicketStatus.DECIDED and decision is None:
        raise ValueError("a decided ticket needs its decision")


# --- SQLite ----------------------------------------------------------------------------
#
# The store's own transactions go through `SQLiteWriter` (see `runtime.store._sqlite`).
# The async engine is for tools and tests that want SQLAlchemy on the same file; it gets
# the same pragmas and takes the write lock at BEGIN too.


async def _open_aiosqlite(engine: AsyncEngine) -> aiosqlite.Connection:
    # The same arguments SQLAlchemy would give sqlite3.connect for this URL.
    cargs, cparams = engine.dialect.create_connect_args(engine.url)
    connection = aiosqlite.Connection(partial(sqlite3.connect, *cargs, **cparams), 64)
    # Like SQLAlchemy's own aiosqlite connect: never keep the process alive.
    connection._thread.daemon = True
    try:
        await connection
    except BaseException:
        # aiosqlite stops its thread after a failed connect but does not wait for it:
        # the thread would later report to this event loop, possibly after it closed
        # ("Event loop is closed" in the thread). Wait until it has ended.
        await asyncio.shield(asyncio.to_thread(connection._thread.join, 5.0))
        raise
    return connection


def _install_sqlite_hooks(
    engine: AsyncEngine | Engine, *, busy_timeout_ms: int | None, synchronous: str | None
) -> None:
    sync_engine = engine.sync_engine if isinstance(engine, AsyncEngine) else engine

    @event.listens_for(sync_engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # Take BEGIN away from the sqlite3 module; `_on_begin` emits our own.
        dbapi_connection.isolation_level = None
        if busy_timeout_ms is None or synchronous is None:
            return  # the writer's connection, tuned already
        cursor = dbapi_connection.cursor()
        try:
            # The busy timeout first: switching to WAL may wait for another connection.
            cursor.execute(f"PRAGMA busy_timeout={busy_timeout_ms}")
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute(f"PRAGMA synchronous={synchronous.upper()}")
            cursor.execute("PRAGMA foreign_keys=ON")
        finally:
            cursor.close()

    @event.listens_for(sync_engine, "begin")
    def _on_begin(conn: Connection) -> None:
        # IMMEDIATE takes the write lock up front: a deferred transaction that reads
        # first and writes later can fail with SQLITE_BUSY without waiting.
        conn.exec_driver_sql("BEGIN IMMEDIATE")


def _writer_engine(conn: sqlite3.Connection) -> Engine:
    """A synchronous engine over the writer's connection (migrations, schema checks)."""
    engine = create_engine("sqlite://", creator=lambda: conn, poolclass=StaticPool)
    _install_sqlite_hooks(engine, busy_timeout_ms=None, synchronous=None)
    return engine


def _waiting(conn: sqlite3.Connection, busy_timeout_ms: int, fn: Callable[[], _T]) -> _T:
    """Run `fn` on the writer's connection, waiting for other processes' locks meanwhile."""
    conn.execute(f"PRAGMA busy_timeout={busy_timeout_ms}").close()
    try:
        return fn()
    finally:
        conn.execute("PRAGMA busy_timeout=0").close()


def _migrate_sync(engine: Engine) -> None:
    with engine.begin() as conn:
        _migrate_on(conn)


def _migrate_on(conn: Connection) -> None:
    """Upgrade the schema on `conn` (in its transaction) unless it needs nothing."""
    status = _schema_status(conn)
    if status.state == "newer_incompatible":
        raise StorageError(f"cannot migrate: {status.describe()}")
    if status.state == "newer_compatible" or (status.state == "current" and _head_recorded(conn)):
        return
    _upgrade(conn)


def _reading(engine: Engine, fn: Callable[[Connection], _T]) -> _T:
    with engine.connect() as conn:
        return fn(conn)


# --- the store -------------------------------------------------------------------------


def alembic_config() -> Config:
    """An Alembic configuration for the store's migrations; no ``alembic.ini`` needed."""
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    return config


class SQLStore:
    """A `runtime.store.base.Store` on a SQL database.

    Build it with `from_url` or `sqlite`; the constructor takes an engine that is
    already configured (SQLite needs the hooks `from_url` installs).

    Args:
        engine: The async engine to use; the store disposes it on `close`.
        writer: SQLite only: the connection the store's transactions share (made by
            `from_url`). Without it, every transaction takes a connection of the engine.
    """

    def __init__(self, engine: AsyncEngine, writer: SQLiteWriter | None = None) -> None:
        self._engine = engine
        self._writer = writer
        self._is_sqlite = engine.dialect.name == "sqlite"
        self._where = _describe(engine.url)
        self._busy_timeout_ms = 0
        self._lock: AbstractAsyncContextManager[Any] = (
            asyncio.Lock() if self._is_sqlite else contextlib.nullcontext()
        )
        self._commits = 0
        self._sync_engine: Engine | None = None
        self._sync_for: sqlite3.Connection | None = None
        # SQLite: `listen` callers of this process, told of this store's own commits.
        self._listeners: list[Callable[[frozenset[str]], object]] = []

    @classmethod
    def from_url(
        cls,
        url: str | URL,
        *,
        busy_timeout_ms: int = 750,
        synchronous: str = "full",
        echo: bool = False,
    ) -> SQLStore:
        """Open a store on a database URL.

        ``sqlite://`` and ``postgresql://`` URLs get their async drivers (aiosqlite,
        asyncpg) when none is named.

        Args:
            url: A SQLAlchemy database URL.
            busy_timeout_ms: SQLite only: how long to wait for another process's lock.
            synchronous: SQLite only: ``full`` (durable on power loss) or ``normal``
                (WAL default; a power loss may lose the last commits, never corrupts).
            echo: Log every statement (of the engine; on SQLite the store's own
                transactions do not go through it).

        Returns:
            The store. Call `migrate` before first use.
        """
        parsed = make_url(url)
        if parsed.drivername == "sqlite":
            parsed = parsed.set(drivername="sqlite+aiosqlite")
        elif parsed.drivername in ("postgresql", "postgres"):
            parsed = parsed.set(drivername="postgresql+asyncpg")
        if parsed.get_backend_name() != "sqlite":
            return cls(create_async_engine(parsed, echo=echo))
        if synchronous.lower() not in _SYNCHRONOUS:
            raise ValueError(f"synchronous must be one of {_SYNCHRONOUS}, not {synchronous!r}")
        if busy_timeout_ms < 0:
            raise ValueError("busy_timeout_ms cannot be negative")
        options: dict[str, Any] = {}
        _check_directory(parsed)
        if parsed.database not in (None, "", ":memory:"):
            # The store's transactions use the writer's connection; these serve tools.
            options.update(pool_size=1, max_overflow=2)
        engine: AsyncEngine

        async def connect() -> aiosqlite.Connection:
            return await _open_aiosqlite(engine)

        engine = create_async_engine(parsed, echo=echo, async_creator=connect, **options)
        _install_sqlite_hooks(
            engine, busy_timeout_ms=int(busy_timeout_ms), synchronous=synchronous.lower()
        )
        cargs, cparams = engine.dialect.create_connect_args(engine.url)
        writer = SQLiteWriter(
            partial(
                open_sqlite,
                cargs,
                cparams,
                synchronous=synchronous.lower(),
                busy_timeout_ms=int(busy_timeout_ms),
            ),
            busy_timeout_ms=int(busy_timeout_ms),
            where=_describe(parsed),
        )
        store = cls(engine, writer)
        store._busy_timeout_ms = int(busy_timeout_ms)
        return store

    @classmethod
    def sqlite(
        cls,
        path: str | Path,
        *,
        busy_timeout_ms: int = 750,
        synchronous: str = "full",
        echo: bool = False,
    ) -> SQLStore:
        """Open a store on a SQLite file (created when missing).

        Args:
            path: The database file.
            busy_timeout_ms: How long to wait for another process's lock.
            synchronous: ``full`` or ``normal``; see `from_url`.
            echo: Log every statement of the engine; see `from_url`.
        """
        url = URL.create("sqlite+aiosqlite", database=str(path))
        return cls.from_url(
            url, busy_timeout_ms=busy_timeout_ms, synchronous=synchronous, echo=echo
        )

    @property
    def engine(self) -> AsyncEngine:
        """The underlying engine (for tools and tests).

        On SQLite the store's own transactions use a connection of their own (see
        `runtime.store._sqlite`); the engine opens others on the same file. An in-memory
        SQLite database is private to each connection, so there the engine sees another,
        empty one.
        """
        return self._engine

    @property
    def commits(self) -> int:
        """How many transactions that wrote something were committed."""
        return self._writer.commits if self._writer is not None else self._commits

    @property
    def syncs(self) -> int:
        """How many database commits made writes durable.

        On SQLite transactions that run at the same time share one commit (see
        `runtime.store._sqlite`), so this can be less than `commits`; on PostgreSQL it
        is `commits`.
        """
        return self._writer.syncs if self._writer is not None else self._commits

    @property
    def writer(self) -> SQLiteWriter | None:
        """SQLite: the connection the store's transactions share (benchmarks trace it)."""
        return self._writer

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[SQLTransaction]:
        """Run a transaction: commit on normal exit, roll back on an exception.

        On SQLite, transactions of this store that queue while one runs share its
        commit; each leaves this block only once its writes are durable.

        Raises:
            StorageError: The database failed to begin or commit. After a failed
                commit the outcome is unknown.
        """
        made: SQLTransaction | None = None
        try:
            if self._writer is not None:
                async with self._writer.member() as member:
                    tx = made = SQLTransaction(member, self._engine.dialect)
                    yield tx
                    await tx.flush()
                    member.wrote = tx.wrote
                self._committed(tx.woke)
                return
            async with self._lock:
                conn = await self._connect()
                try:
                    await self._begin(conn)
                    tx = made = SQLTransaction(conn, conn.dialect)
                    try:
                        yield tx
                        await tx.flush()
                    except BaseException:
                        await _rollback_quietly(conn)
                        raise
                    try:
                        await conn.commit()
                    except SQLAlchemyError as exc:
                        raise StorageError(f"commit failed, outcome unknown: {exc}") from exc
                    except Exception as exc:
                        if not unreachable(exc):
                            raise
                        raise StorageError(
                            f"commit failed, outcome unknown: {_unreachable_reason(exc)}"
                        ) from exc
                finally:
                    with contextlib.suppress(SQLAlchemyError, OSError):
                        await conn.close()
                if tx.wrote:
                    self._commits += 1
                if self._is_sqlite:
                    self._committed(tx.woke)
        except BaseException:
            if made is not None:
                made.forget()
            raise

    async def _begin(self, conn: AsyncConnection) -> None:
        try:
            await conn.begin()
        except SQLAlchemyError as exc:
            raise StorageError(
                f"{self._where}: could not begin a transaction: {_reason(exc)}"
            ) from exc
        except Exception as exc:
            if not unreachable(exc):
                raise
            raise StorageError(
                f"{self._where}: could not begin a transaction: {_unreachable_reason(exc)}"
            ) from exc

    async def _connect(self) -> AsyncConnection:
        try:
            return await self._engine.connect()
        except SQLAlchemyError as exc:
            raise StorageError(f"cannot open {self._where}: {_reason(exc)}") from exc
        except Exception as exc:
            if not unreachable(exc):
                raise
            raise StorageError(f"cannot open {self._where}: {_unreachable_reason(exc)}") from exc

    def _writer_engine(self, conn: sqlite3.Connection) -> Engine:
        if self._sync_engine is None or self._sync_for is not conn:
            self._sync_engine, self._sync_for = _writer_engine(conn), conn
        return self._sync_engine

    async def _on_writer(self, fn: Callable[[Engine], _T]) -> _T:
        """Run ``fn(engine)`` on the writer's connection, alone, on its worker thread."""
        writer = self._writer
        assert writer is not None
        async with writer.exclusive() as conn:
            engine = self._writer_engine(conn)
            return await writer.in_thread(
                _waiting, conn, self._busy_timeout_ms, partial(fn, engine)
            )

    async def migrate(self) -> None:
        """Upgrade the schema to the newest migration (creating it if needed).

        Safe to run concurrently from several processes: SQLite serialises it with
        ``BEGIN IMMEDIATE``, PostgreSQL with an advisory lock. A schema that a newer
        version already migrated is left alone when it is backward-compatible with this
        version (see `schema_status`), and refused otherwise.

        Raises:
            StorageError: The database failed, or its schema is newer and incompatible.
        """
        # Another process migrating the same SQLite file holds the write lock for longer
        # than the busy timeout meant for short transactions: wait for it, a while.
        deadline = time.monotonic() + _MIGRATION_WAIT_SECONDS
        while True:
            try:
                if self._writer is not None:
                    await self._on_writer(_migrate_sync)
                    return
                async with self._lock, self._engine.begin() as conn:
                    if conn.dialect.name == "postgresql":
                        await conn.execute(
                            text("SELECT pg_advisory_xact_lock(:key)"),
                            {"key": _PG_MIGRATION_LOCK},
                        )
                    await conn.run_sync(_migrate_on)
                return
            except OperationalError as exc:
                locked = self._is_sqlite and "locked" in str(exc.orig)
                if not locked or time.monotonic() > deadline:
                    raise StorageError(f"migrating {self._where} failed: {_reason(exc)}") from exc
                await asyncio.sleep(0.1)
            except SQLAlchemyError as exc:
                raise StorageError(f"migrating {self._where} failed: {_reason(exc)}") from exc
            except OpenFailed as exc:
                if "locked" not in exc.reason or time.monotonic() > deadline:
                    raise StorageError(f"migrating {self._where} failed: {exc.reason}") from exc
                await asyncio.sleep(0.1)
            except Exception as exc:
                if not unreachable(exc):
                    raise
                raise StorageError(
                    f"migrating {self._where} failed: {_unreachable_reason(exc)}"
                ) from exc

    async def schema_revision(self) -> str | None:
        """The migration revision the database is at; None for an empty database."""
        heads = await self._current_heads()
        return heads[0] if heads else None

    async def migrations_current(self) -> bool:
        """Whether the database is at the newest migration."""
        heads = await self._current_heads()
        return set(heads) == {SCHEMA_HEAD}

    async def _read_schema(self, fn: Callable[[Connection], _T]) -> _T:
        if self._writer is not None:
            return await self._on_writer(partial(_reading, fn=fn))
        async with self._lock, self._engine.connect() as conn:
            return await conn.run_sync(fn)

    async def _current_heads(self) -> tuple[str, ...]:
        try:
            return await self._read_schema(_current_heads)
        except SQLAlchemyError as exc:
            raise StorageError(
                f"could not read the schema revision of {self._where}: {_reason(exc)}"
            ) from exc
        except Exception as exc:
            if not unreachable(exc):
                raise
            raise StorageError(
                f"could not read the schema revision of {self._where}: {_unreachable_reason(exc)}"
            ) from exc

    async def schema_status(self) -> SchemaStatus:
        """Where the database's schema stands against the migrations this code ships.

        A schema newer than the code is usable when every migration after the code's
        newest one declared itself backward-compatible (``backward_compatible = True``
        in its module: it only adds what older code can ignore), as recorded in the
        ``schema_revisions`` table by whichever version ran it.

        Raises:
            StorageError: The database cannot be read.
        """
        try:
            return await self._read_schema(_schema_status)
        except SQLAlchemyError as exc:
            raise StorageError(f"could not read the schema revision: {exc}") from exc
        except Exception as exc:
            if not unreachable(exc):
                raise
            raise StorageError(
                f"could not read the schema revision: {_unreachable_reason(exc)}"
            ) from exc

    async def listen(
        self,
        on_wake: Callable[[frozenset[str]], object],
        stop: asyncio.Event,
        *,
        retry_seconds: float = 1.0,
    ) -> None:
        """Report wake-ups (work a commit made ready) until `stop` is set.

        Holds one connection that ``LISTEN``s on `WAKE_CHANNEL`; every ``NOTIFY`` a
        committed transaction sent (see `SQLTransaction.flush`) calls `on_wake` with
        what became ready (`WAKE_RUNS`, `WAKE_OUTBOX`). A lost connection is opened
        again after `retry_seconds`, and `on_wake` is then called with everything, for
        what was missed meanwhile. On SQLite only this store's own commits are heard
        (another process's are found by polling): `on_wake` is called as each commits.
        """
        if self._is_sqlite:
            self._listeners.append(on_wake)
            try:
                await stop.wait()
            finally:
                self._listeners.remove(on_wake)
            return
        everything = frozenset({WAKE_RUNS, WAKE_OUTBOX})
        while not stop.is_set():
            try:
                async with self._engine.connect() as conn:
                    raw = await conn.get_raw_connection()
                    driver = raw.driver_connection
                    try:
                        await _listen_on(driver, on_wake, stop, everything)
                    finally:
                        if driver is None or driver.is_closed():
                            # Never hand a dead connection back to the pool.
                            await conn.invalidate()
            except Exception as exc:  # the driver's own errors too: keep trying
                if stop.is_set():
                    return
                log.warning("listening for wake-ups failed (%s); retrying", exc)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=retry_seconds)

    def _committed(self, woke: frozenset[str]) -> None:
        """SQLite: tell this process's listeners what a commit of this store made ready."""
        if not woke:
            return
        for on_wake in list(self._listeners):
            try:
                on_wake(woke)
            except Exception:  # a listener's bug must not fail a committed transaction
                log.exception("a wake-up listener failed")

    async def close(self) -> None:
        """Close the writer's connection (SQLite) and every pooled connection."""
        if self._writer is not None:
            await self._writer.close()
        self._sync_engine = self._sync_for = None
        await self._engine.dispose()


def _check_directory(url: URL) -> None:
    """Refuse a SQLite file whose directory does not exist (SQLite would not create it)."""
    database = url.database
    if not database or database == ":memory:" or database.startswith("file:"):
        return
    directory = Path(database).expanduser().absolute().parent
    if not directory.is_dir():
        raise ValueError(
            f"the directory {directory} of the SQLite database {database} does not exist"
        )


def _describe(url: URL) -> str:
    """Name a database for messages: the SQLite file, or the URL without its password."""
    if url.get_backend_name() == "sqlite":
        if url.database in (None, "", ":memory:"):
            return "the in-memory SQLite database"
        return f"the SQLite database {url.database}"
    return f"the database {url.render_as_string(hide_password=True)}"


def unreachable(exc: BaseException) -> bool:
    """Whether `exc` is the driver failing to reach the database, raised bare.

    SQLAlchemy wraps the driver's errors once a connection exists; while one is being
    opened, asyncpg's own errors (``CannotConnectNowError``, ``TooManyConnectionsError``
    ...) and the socket's (a refused connection, an unknown host, a timeout) come
    through as they are.
    """
    if isinstance(exc, OSError | TimeoutError):
        return True
    return type(exc).__module__.split(".")[0] == "asyncpg"


def _unreachable_reason(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def _reason(exc: SQLAlchemyError) -> str:
    """The driver's own message, without SQLAlchemy's statement dump and help link."""
    original = getattr(exc, "orig", None)
    return str(original) if original is not None else str(exc).split(" (Background")[0]


async def _listen_on(
    driver: Any,
    on_wake: Callable[[frozenset[str]], object],
    stop: asyncio.Event,
    everything: frozenset[str],
) -> None:
    """LISTEN on an asyncpg connection until `stop` is set or the connection is lost."""

    def notified(_conn: Any, _pid: int, _channel: str, payload: str) -> None:
        on_wake(frozenset(payload.split(",")) & everything or everything)

    lost = asyncio.Event()

    def closed(_conn: Any) -> None:
        lost.set()

    driver.add_termination_listener(closed)
    await driver.add_listener(WAKE_CHANNEL, notified)
    try:
        on_wake(everything)
        while not stop.is_set() and not lost.is_set() and not driver.is_closed():
            waiters = {asyncio.ensure_future(stop.wait()), asyncio.ensure_future(lost.wait())}
            # Also look now and then, in case the driver misses the socket's end.
            _done, pending = await asyncio.wait(
                waiters, timeout=_LISTEN_CHECK_SECONDS, return_when=asyncio.FIRST_COMPLETED
            )
            for waiter in pending:
                waiter.cancel()
    finally:
        driver.remove_termination_listener(closed)
        if not driver.is_closed():
            await driver.remove_listener(WAKE_CHANNEL, notified)


SchemaState = Literal["empty", "current", "behind", "newer_compatible", "newer_incompatible"]


@dataclass(frozen=True)
class SchemaStatus:
    """The database's migration revision compared with this code's.

    Attributes:
        revision: The database's revision (None: no schema yet).
        head: The newest revision this code ships.
        state: ``current``; ``behind`` (``signoff migrate`` brings it up); ``empty``;
            ``newer_compatible`` (a newer version migrated it, and said its changes
            leave this code working); or ``newer_incompatible``.
    """

    revision: str | None
    head: str
    state: SchemaState

    @property
    def usable(self) -> bool:
        """Whether this code may run on the schema."""
        return self.state in ("current", "newer_compatible")

    def describe(self) -> str:
        """One line saying where the schema stands."""
        match self.state:
            case "current":
                return f"database schema at {self.revision}, the newest this version knows"
            case "newer_compatible":
                return (
                    f"database schema at {self.revision}, newer than this version's "
                    f"{self.head} and backward-compatible with it"
                )
            case "newer_incompatible":
                return (
                    f"database schema at {self.revision} is newer than this version's "
                    f"{self.head} and not backward-compatible with it"
                )
            case "behind":
                return (
                    f"database schema at {self.revision} is behind this version's newest "
                    f"migration {self.head}: run signoff migrate"
                )
            case "empty":
                return (
                    f"database has no schema (no migration applied), this version needs "
                    f"{self.head}: run signoff migrate"
                )
            case _:
                assert_never(self.state)


def _schema_status(conn: Connection) -> SchemaStatus:
    head = SCHEMA_HEAD
    heads = _current_heads(conn)
    if not heads:
        return SchemaStatus(None, head, "empty")
    revision = heads[0]
    if revision == head:
        return SchemaStatus(revision, head, "current")
    return _other_schema_status(conn, revision)


def _other_schema_status(conn: Connection, revision: str) -> SchemaStatus:
    """Judge a revision other than ours: older (a script knows it) or newer."""
    head = SCHEMA_HEAD
    script = _scripts()
    known = {sc.revision for sc in script.walk_revisions()}
    if revision in known:
        return SchemaStatus(revision, head, "behind")
    if "schema_revisions" not in sa_inspect(conn).get_table_names():
        return SchemaStatus(revision, head, "newer_incompatible")
    recorded = {
        row.revision: row
        for row in conn.execute(
            select(
                schema_revisions.c.revision,
                schema_revisions.c.down_revision,
                schema_revisions.c.backward_compatible,
            )
        )
    }
    # Walk back from the database's revision to ours: every step must be compatible.
    step: str | None = revision
    seen: set[str] = set()
    while step is not None and step != head and step not in seen:
        seen.add(step)
        row = recorded.get(step)
        if row is None or not row.backward_compatible:
            return SchemaStatus(revision, head, "newer_incompatible")
        step = row.down_revision
    state: SchemaState = "newer_compatible" if step == head else "newer_incompatible"
    return SchemaStatus(revision, head, state)


def _scripts() -> ScriptDirectory:
    from alembic.script import ScriptDirectory

    return ScriptDirectory.from_config(alembic_config())


def _head_recorded(conn: Connection) -> bool:
    """Whether `_record_revisions` ran for our head (not so after a bare ``alembic upgrade``)."""
    if not sa_inspect(conn).has_table(schema_revisions.name):
        return False
    found = conn.execute(
        select(schema_revisions.c.revision).where(schema_revisions.c.revision == SCHEMA_HEAD)
    )
    return found.first() is not None


def _upgrade(conn: Connection) -> None:
    from alembic import command

    config = alembic_config()
    config.attributes["connection"] = conn
    command.upgrade(config, "head")
    _record_revisions(conn, _scripts())


def _record_revisions(conn: Connection, script: ScriptDirectory) -> None:
    """Note every revision this code knows, with its compatibility, for other versions."""
    stored = set(conn.execute(select(schema_revisions.c.revision)).scalars())
    now = to_micros(datetime.now(UTC))
    rows = [
        {
            "revision": sc.revision,
            "down_revision": sc.down_revision if isinstance(sc.down_revision, str) else None,
            "backward_compatible": bool(getattr(sc.module, "backward_compatible", False)),
            "applied_at": now,
        }
        for sc in script.walk_revisions()
        if sc.revision not in stored
    ]
    if rows:
        conn.execute(insert(schema_revisions), rows)


def _current_heads(conn: Connection) -> tuple[str, ...]:
    """The revisions in Alembic's version table (as ``MigrationContext`` reads them)."""
    if not sa_inspect(conn).has_table(_alembic_version.name):
        return ()
    return tuple(conn.execute(select(_alembic_version.c.version_num)).scalars())


async def _rollback_quietly(conn: AsyncConnection) -> None:
    # The original exception matters more than a failed rollback; a connection that
    # cannot roll back is discarded instead of going back to the pool.
    try:
        await conn.rollback()
    except SQLAlchemyError:
        with contextlib.suppress(SQLAlchemyError):
            await conn.invalidate()
