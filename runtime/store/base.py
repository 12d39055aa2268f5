"""The store port: what the core needs from a database, as one transaction protocol.

Every method runs inside a `Transaction`; leaving ``async with store.transaction()``
normally commits, leaving it by an exception rolls everything back. Records handed in
and out are copies: changing one changes nothing until it is written back.

`Transaction` is put together from one protocol per aggregate, in `runtime.store.ports`
(runs, calls, tickets, events, outbox, keys, received commands, grants, leases,
identities), as the SQL store's transaction is from one module per aggregate in
`runtime.store.sql`.
"""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from typing import Protocol

from runtime.store.ports import (
    AuditPort,
    CallPort,
    EventPort,
    GrantPort,
    IdentityPort,
    KeyPort,
    LeasePort,
    McpOAuthPort,
    OutboxPort,
    ReceivedPort,
    RunPort,
    TicketPort,
)


class Transaction(
    RunPort,
    CallPort,
    TicketPort,
    EventPort,
    OutboxPort,
    KeyPort,
    ReceivedPort,
    GrantPort,
    LeasePort,
    IdentityPort,
    McpOAuthPort,
    AuditPort,
    Protocol,
):
    """One atomic unit of reads and writes: every part of the store port together."""


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
