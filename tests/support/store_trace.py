"""A store that records its transactions, at the level of the store port.

`TracingStore` wraps any `runtime.Store` and writes down, for every transaction, the
`runtime.Transaction` methods called in it, in order, with their salient arguments and
results (records as their kind, id and status, never whole payloads; times relative to
`TracingStore.epoch`), and whether it wrote. The trace names nothing but the port: no
module, caller or SQL text, so it stays the same while the code around the store moves.
"""

from __future__ import annotations

import enum
from collections import Counter
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, cast

from pydantic import BaseModel

from runtime import ResumeTicket, Store, Transaction
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

WRITES = frozenset(
    {
        "insert_run",
        "update_run",
        "set_run_flags",
        "claim_run",
        "renew_lease",
        "insert_call",
        "update_call",
        "insert_ticket",
        "close_ticket",
        "append_event",
        "add_outbox",
        "claim_outbox",
        "update_outbox",
        "insert_idempotency",
        "forget_idempotency",
        "revoke_session",
        "forget_revoked_sessions",
        "insert_received",
        "claim_received",
        "update_received",
        "insert_grant",
        "revoke_grant",
        "take_lease",
        "drop_lease",
    }
)
"""The `Transaction` methods that may change the database (a block calling one writes)."""


@dataclass
class Block:
    """One transaction: the port methods called in it, in order."""

    calls: list[str] = field(default_factory=list)
    wrote: bool = False
    ticket_reads: Counter[str] = field(default_factory=Counter)
    outcome: str = "committed"


@dataclass
class Phase:
    """A named step of a scenario and the transactions it opened."""

    name: str
    blocks: list[Block] = field(default_factory=list)


def _brief(value: Any, epoch: datetime) -> str:
    """A value as the trace shows it: salient, deterministic, short."""
    match value:
        case None | bool() | int() | float():
            return repr(value)
        case enum.Enum():
            return str(value.value)
        case str():
            return value if len(value) <= 40 else value[:37] + "..."
        case datetime():
            return f"t{(value - epoch).total_seconds():+g}s"
        case RunRecord():
            return f"run {value.run_id} {value.status.value} fence={value.fence}"
        case RunFlags():
            return f"flags pause={value.pause_requested} cancel={value.cancel_requested}"
        case CallRecord():
            return f"call {value.call_id} {value.tool} {value.state.value}"
        case ResumeTicket():
            return f"ticket {value.ticket_id} {value.status.value}"
        case EventRecord():
            return f"event {value.kind}"
        case OutboxRecord():
            return f"outbox {value.outbox_id} {value.kind} {value.state}"
        case IdempotencyRecord():
            return f"idempotency {value.scope} -> {value.run_id}"
        case ReceivedRecord():
            return f"received {value.command_id} {value.state}"
        case GrantRecord():
            revoked = " revoked" if value.revoked_at is not None else ""
            return f"grant {value.grant_id} {value.scope} {value.tool}{revoked}"
        case Position():
            return f"after {value.id}"
        case BaseModel():
            kind = getattr(value, "kind", None)
            return str(kind) if kind is not None else type(value).__name__
        case Mapping():
            inner = ", ".join(f"{k}: {_brief(v, epoch)}" for k, v in sorted(value.items()))
            return "{" + inner + "}"
        case Sequence():
            return "[" + ", ".join(_brief(v, epoch) for v in value) + "]"
        case _:
            return type(value).__name__


class _TracingTransaction:
    """Passes every port method through to the real transaction and records it."""

    def __init__(self, tx: Transaction, block: Block, epoch: datetime) -> None:
        self._tx = tx
        self._block = block
        self._epoch = epoch

    def __getattr__(self, name: str) -> Any:
        target = getattr(self._tx, name)
        if name.startswith("_") or not callable(target):
            return target
        block, epoch = self._block, self._epoch

        async def traced(*args: Any, **kwargs: Any) -> Any:
            shown = [_brief(a, epoch) for a in args]
            shown += [f"{k}={_brief(v, epoch)}" for k, v in kwargs.items()]
            if name in WRITES:
                block.wrote = True
            if name == "get_ticket":
                block.ticket_reads[str(args[0] if args else kwargs["ticket_id"])] += 1
            line = f"{name}({', '.join(shown)})"
            try:
                result = await target(*args, **kwargs)
            except Exception as exc:
                block.calls.append(f"{line} raised {type(exc).__name__}")
                raise
            block.calls.append(f"{line} -> {_brief(result, epoch)}")
            return result

        return traced


class TracingStore:
    """A `runtime.Store` recording the transactions of whatever uses it.

    Args:
        store: The real store every call goes to.
        epoch: Times in the trace are shown relative to this (the manual clock's start).
    """

    def __init__(self, store: Store, epoch: datetime) -> None:
        self._store = store
        self.epoch = epoch
        self.phases: list[Phase] = [Phase("setup")]
        self._recording = True
        self._sums: list[tuple[str, tuple[str, ...]]] = []

    def phase(self, name: str) -> None:
        """Start a new named step: later transactions are listed under it."""
        self.phases.append(Phase(name))

    def sum_up(self, label: str, *phases: str) -> None:
        """Add a summary line under the total for the named phases together."""
        self._sums.append((label, phases))

    @contextmanager
    def untraced(self) -> Iterator[None]:
        """Leave out the transactions opened meanwhile (a test's own checks)."""
        self._recording = False
        try:
            yield
        finally:
            self._recording = True

    async def migrate(self) -> None:
        """Create or upgrade the real store's schema."""
        await self._store.migrate()

    @asynccontextmanager
    async def _transaction(self) -> AsyncIterator[Transaction]:
        if not self._recording:
            async with self._store.transaction() as tx:
                yield tx
            return
        block = Block()
        self.phases[-1].blocks.append(block)
        try:
            async with self._store.transaction() as tx:
                yield cast(Transaction, _TracingTransaction(tx, block, self.epoch))
        except BaseException as exc:
            block.outcome = f"rolled back ({type(exc).__name__})"
            raise

    def transaction(self) -> AbstractAsyncContextManager[Transaction]:
        """Open a transaction of the real store, recorded as one block."""
        return self._transaction()

    async def close(self) -> None:
        """Close the real store."""
        await self._store.close()

    @property
    def commits(self) -> int:
        """The real store's count of write transactions committed."""
        return self._store.commits

    def text(self) -> str:
        """The trace: a summary line, then each phase with its transactions."""
        blocks = [b for p in self.phases for b in p.blocks]
        lines = [_summary("total", blocks)]
        for label, names in self._sums:
            chosen = [b for p in self.phases if p.name in names for b in p.blocks]
            lines.append(_summary(f"{label} ({' + '.join(names)})", chosen))
        lines.append("")
        number = 0
        for phase in self.phases:
            if not phase.blocks:
                continue
            lines.append(f"## {_summary(phase.name, phase.blocks)}")
            for block in phase.blocks:
                number += 1
                kind = "write" if block.wrote else "read"
                outcome = "" if block.outcome == "committed" else f" {block.outcome}"
                lines.append(f"tx {number} {kind}{outcome}")
                lines.extend(f"  {call}" for call in block.calls)
            lines.append("")
        return "\n".join(lines)


def _summary(name: str, blocks: Sequence[Block]) -> str:
    reads: Counter[str] = Counter()
    for block in blocks:
        reads.update(block.ticket_reads)
    per_ticket = ", ".join(f"{t} x{n}" for t, n in sorted(reads.items())) or "none"
    writing = sum(1 for b in blocks if b.wrote)
    return f"{name}: transactions {len(blocks)}, writing {writing}, get_ticket reads {per_ticket}"
