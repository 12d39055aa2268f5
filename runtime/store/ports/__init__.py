"""The store port by aggregate: one protocol per part of a transaction.

`runtime.store.base.Transaction` is all of them together; each module here matches the
module of `runtime.store.sql` that implements it:

- `runs`: `RunPort`, runs, the workers' leases on them and sub-agent runs;
- `calls`: `CallPort`, the tool calls a model proposed;
- `tickets`: `TicketPort`, what a parked run waits for and who may decide it;
- `events`: `EventPort`, each run's flight recorder;
- `outbox`: `OutboxPort`, notifications to deliver;
- `keys`: `KeyPort`, idempotency keys and revoked console sessions;
- `received`: `ReceivedPort`, decisions received from chat platforms;
- `grants`: `GrantPort`, standing grants;
- `leases`: `LeasePort`, named leases and the figures for metrics;
- `identities`: `IdentityPort`, identity links and link codes;
- `mcp_oauth`: `McpOAuthPort`, sealed sign-ins to MCP servers that use OAuth;
- `audit`: `AuditPort`, every run's events in one order, and deleting pruned runs.
"""

from runtime.store.ports.audit import AuditEvent, AuditPort
from runtime.store.ports.calls import CallPort
from runtime.store.ports.events import EventPort
from runtime.store.ports.grants import GrantPort
from runtime.store.ports.identities import IdentityPort
from runtime.store.ports.keys import KeyPort
from runtime.store.ports.leases import Figures, LeasePort
from runtime.store.ports.mcp_oauth import McpOAuthPort
from runtime.store.ports.outbox import OutboxPort
from runtime.store.ports.received import ReceivedPort
from runtime.store.ports.runs import RunPort
from runtime.store.ports.tickets import TicketPort

__all__ = [
    "AuditEvent",
    "AuditPort",
    "CallPort",
    "EventPort",
    "Figures",
    "GrantPort",
    "IdentityPort",
    "KeyPort",
    "LeasePort",
    "McpOAuthPort",
    "OutboxPort",
    "ReceivedPort",
    "RunPort",
    "TicketPort",
]
