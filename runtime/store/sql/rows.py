"""Records to column values and rows back to records: one declared map per table.

Each `RowMap` lists a table's columns once, with the record field each holds and how
a value is stored and read back; the same declaration writes a record and reads a row.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from sqlalchemy.engine import Row

from runtime.domain.states import CallState, RunStatus, TicketStatus
from runtime.domain.tickets import ANSWER, AWAIT_TARGET, Answer, ResumeTicket
from runtime.store.records import (
    CallRecord,
    EventRecord,
    GrantRecord,
    IdempotencyRecord,
    OutboxRecord,
    ReceivedRecord,
    RunRecord,
    decider_keys,
    pacing_key,
)
from runtime.store.sql.convert import from_micros, opt_datetime, opt_micros, to_micros

_R = TypeVar("_R")


def _same(value: Any) -> Any:
    return value


@dataclass(frozen=True)
class Col:
    """A column that holds a record's field.

    Attributes:
        name: The column.
        field: The record's field (by default the column's name).
        write: How the field's value is stored; None: the column is not written from
            the record (the store writes it itself, or never).
        read: How the column's value becomes the field's; None: not read back.
    """

    name: str
    field: str = ""
    write: Callable[[Any], Any] | None = _same
    read: Callable[[Any], Any] | None = _same


@dataclass(frozen=True)
class Derived:
    """A column written from the whole record and never read back (an index key)."""

    name: str
    of: Callable[[Any], Any]


def _time(name: str) -> Col:
    return Col(name, write=to_micros, read=from_micros)


def _opt_time(name: str) -> Col:
    return Col(name, write=opt_micros, read=opt_datetime)


def _enum(name: str, kind: Callable[[Any], Any]) -> Col:
    return Col(name, write=lambda value: kind(value).value, read=kind)


class RowMap(Generic[_R]):
    """How the records of one type are written to and read from their table's rows.

    Args:
        make: Builds a record from its fields (as keyword arguments).
        columns: The table's columns, in order.
    """

    def __init__(self, make: Callable[..., _R], *columns: Col | Derived) -> None:
        self._make = make
        self._writes: list[tuple[str, Callable[[Any], Any]]] = []
        self._reads: list[tuple[str, str, Callable[[Any], Any]]] = []
        for column in columns:
            match column:
                case Derived(name=name, of=of):
                    self._writes.append((name, of))
                case Col(name=name, field=field, write=write, read=read):
                    attr = field or name
                    if write is not None:
                        self._writes.append((name, _field(attr, write)))
                    if read is not None:
                        self._reads.append((name, attr, read))

    def values(self, record: _R) -> dict[str, Any]:
        """The column values that store `record`."""
        return {name: value(record) for name, value in self._writes}

    def record(self, row: Row[Any]) -> _R:
        """The record `row` holds."""
        return self._make(**{attr: read(getattr(row, name)) for name, attr, read in self._reads})

    def records(self, rows: Sequence[Row[Any]] | Any) -> list[_R]:
        """The records of `rows`, in order."""
        return [self.record(row) for row in rows]


def _field(attr: str, write: Callable[[Any], Any]) -> Callable[[Any], Any]:
    return lambda record: write(getattr(record, attr))


def dump_answer(answer: Answer | None) -> dict[str, Any] | None:
    """An answer as its JSON column holds it."""
    if answer is None:
        return None
    dumped: dict[str, Any] = ANSWER.dump_python(answer, mode="json", by_alias=True)
    return dumped


RUNS = RowMap(
    RunRecord,
    Col("run_id"),
    Col("thread_id"),
    Col("agent"),
    Col("agent_version"),
    _enum("status", RunStatus),
    Col("input"),
    Col("requester"),
    _time("created_at"),
    _time("updated_at"),
    Col("origin"),
    # The transcript's newest entries (see `runs.RECENT_MESSAGES`), written by `run_values`.
    Col("recent_messages", "messages", write=None, read=list),
    Col("sealed_messages", "messages_sealed", write=None),
    Col("turns"),
    Col("prompt_tokens"),
    Col("completion_tokens"),
    Col("usage_incomplete"),
    Col("model_attempt"),
    Col("model_in_flight"),
    Col("batch"),
    Col("final_text"),
    Col("error"),
    # Written only when the run is inserted, and by `set_run_flags`.
    Col("pause_requested", write=None),
    Col("cancel_requested", write=None),
    Col("lease_owner"),
    _opt_time("lease_expires_at"),
    Col("fence"),
    Col("parent_run_id"),
    Col("parent_call_id"),
    Col("task_key"),
    Col("depth"),
    Col("lineage", write=lambda lineage: lineage or None, read=lambda v: list(v or ())),
    Col("trace_context"),
)
"""Runs; a run read from its row holds only the row's own transcript entries until the
sealed ones are read (`RunStatements._whole`)."""


def run_values(run: RunRecord, sealed: int) -> dict[str, Any]:
    """Every column of a run except the two request flags, with `sealed` transcript
    entries kept apart (in `run_messages`)."""
    values = RUNS.values(run)
    values["recent_messages"] = run.messages[sealed:]
    values["sealed_messages"] = sealed
    return values


CALLS = RowMap(
    CallRecord,
    Col("call_id"),
    Col("run_id"),
    Col("batch"),
    Col("seq"),
    Col("model_call_id"),
    Col("tool"),
    Col("args"),
    _enum("state", CallState),
    Col("replay_policy"),
    Col("execution_key"),
    _time("created_at"),
    _time("updated_at"),
    Col("attempts"),
    Col("result"),
    Col("error"),
    Col("answer"),
    Col("decided_by"),
    Col("reason"),
    Col("edit"),
)


def _ticket(**fields: Any) -> ResumeTicket:
    return ResumeTicket.model_validate(fields)


TICKETS = RowMap(
    _ticket,
    Col("ticket_id"),
    Col("correlation"),
    Col("run_id"),
    Col("thread_id"),
    Col("agent"),
    Col("agent_version"),
    Col("catalog_fingerprint"),
    Derived("call_id", lambda ticket: ticket.call_id),
    Derived("target_kind", lambda ticket: ticket.target.kind),
    Col(
        "target",
        write=lambda target: AWAIT_TARGET.dump_python(target, mode="json", by_alias=True),
    ),
    Col("requester"),
    Col("approvers", write=list, read=tuple),
    Col("four_eyes"),
    _opt_time("deadline"),
    Col("status", write=lambda status: status.value, read=TicketStatus),
    _time("created_at"),
    # Read as JSON: the ticket's model validates it.
    Col("decision", write=dump_answer),
    Col("decided_by"),
    _opt_time("decided_at"),
    Col("chain", write=lambda chain: list(chain) or None, read=lambda v: tuple(v or ())),
    Col("decide_in", write=lambda where: list(where) or None, read=lambda v: tuple(v or ())),
    Col("sso", write=lambda sso: sso or None, read=bool),
)


def decider_rows(ticket: ResumeTicket) -> list[dict[str, Any]]:
    """The ``ticket_deciders`` rows of an open ticket: one per key that may decide it."""
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


EVENTS = RowMap(
    EventRecord,
    Col("run_id"),
    _time("at"),
    Col("kind"),
    Col("data"),
    Col("actor"),
    # Assigned by the database.
    Col("seq", write=None),
)

OUTBOX = RowMap(
    OutboxRecord,
    Col("outbox_id"),
    Col("run_id"),
    Col("kind"),
    Col("payload"),
    Col("destination"),
    _time("created_at"),
    _time("next_attempt_at"),
    Col("ticket_id"),
    Col("state"),
    Col("attempts"),
    Col("last_error"),
    Col("platform_ref"),
    _opt_time("delivered_at"),
    Derived("channel_key", lambda item: pacing_key(item.kind, item.destination)),
    Derived("posted_in", lambda item: item.posted_in),
    Col("lease_owner"),
    _opt_time("lease_expires_at"),
    Col("fence"),
)

RECEIVED = RowMap(
    ReceivedRecord,
    Col("command_id"),
    Col("source"),
    Col("delivery_id"),
    Col("ticket_id"),
    Col("correlation"),
    Col("answer"),
    Col("actor"),
    Col("reply"),
    _time("received_at"),
    Col("state"),
    Col("error_code"),
    Col("error"),
    _opt_time("applied_at"),
    Col("lease_owner"),
    _opt_time("lease_expires_at"),
)

IDEMPOTENCY_KEYS = RowMap(
    IdempotencyRecord,
    Col("scope"),
    Col("key"),
    Col("fingerprint"),
    Col("run_id"),
    _time("created_at"),
)

GRANTS = RowMap(
    GrantRecord,
    Col("grant_id"),
    Col("agent"),
    Col("agent_version"),
    Col("catalog_fingerprint"),
    Col("tool"),
    Col("scope"),
    Col("run_id"),
    Col("thread_id"),
    Col("requester"),
    Col("arg_constraint", "constraint"),
    Col("granted_by"),
    Col("granted_by_name"),
    Col("platform"),
    Col("ticket_id"),
    _time("created_at"),
    _opt_time("expires_at"),
    _opt_time("revoked_at"),
    Col("revoked_by"),
)
