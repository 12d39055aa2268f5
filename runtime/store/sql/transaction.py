"""One transaction of the SQL store, put together from its parts."""

from __future__ import annotations

from runtime.store.sql.audit import AuditStatements
from runtime.store.sql.calls import CallStatements
from runtime.store.sql.events import EventStatements
from runtime.store.sql.grants import GrantStatements
from runtime.store.sql.identities import IdentityStatements
from runtime.store.sql.keys import KeyStatements
from runtime.store.sql.leases import LeaseStatements
from runtime.store.sql.mcp_oauth import McpOAuthStatements
from runtime.store.sql.outbox import OutboxStatements
from runtime.store.sql.received import ReceivedStatements
from runtime.store.sql.runs import RunStatements
from runtime.store.sql.tickets import TicketStatements


class SQLTransaction(
    RunStatements,
    CallStatements,
    TicketStatements,
    EventStatements,
    OutboxStatements,
    KeyStatements,
    ReceivedStatements,
    GrantStatements,
    LeaseStatements,
    IdentityStatements,
    McpOAuthStatements,
    AuditStatements,
):
    """One database transaction, implementing `runtime.store.base.Transaction`.

    Obtain it from `SQLStore.transaction`; it is only usable inside that block. Each
    database has its own subclass (see `runtime.store.sql.dialects`).

    Attributes:
        wrote: Whether any statement changed a row.
    """
