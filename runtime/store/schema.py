"""The SQL schema of the store: one `MetaData` for SQLite and PostgreSQL alike.

Conventions, so that both engines read and write the same values:

- Times are ``BigInteger`` microseconds since the Unix epoch, UTC. The store converts
  them to and from timezone-aware datetimes; integer comparisons keep ``<=`` exact and
  sortable on every engine.
- Closed sets (run status, call state, ticket status) are plain strings holding the
  enum's value, never database enums, so adding a member needs no migration.
- Structured data is the portable ``JSON`` type.

Migrations in ``runtime/store/migrations`` must create exactly these tables; a test
compares a migrated database against this metadata.
"""

from __future__ import annotations

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Column,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
)

# Named constraints keep migrations reproducible: the same names on every engine.
NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

metadata = MetaData(naming_convention=NAMING_CONVENTION)

_ID = 128
_NAME = 255
_ENUM = 32
_DECIDER = _NAME + 8  # a user id or group name with its key's prefix

runs = Table(
    "runs",
    metadata,
    Column("run_id", String(_ID), primary_key=True),
    Column("thread_id", String(_ID), nullable=False),
    Column("agent", String(_NAME), nullable=False),
    Column("agent_version", String(_NAME), nullable=False),
    Column("status", String(_ENUM), nullable=False),
    Column("input", Text, nullable=False),
    Column("requester", String(_NAME), nullable=True),
    Column("created_at", BigInteger, nullable=False),
    Column("updated_at", BigInteger, nullable=False),
    Column("origin", JSON, nullable=False),
    # The transcript's newest entries (rewritten with the run); the older ones are in
    # `run_messages`, `sealed_messages` of them (see `runtime.store.sql`).
    Column("recent_messages", JSON, nullable=False),
    Column("sealed_messages", Integer, nullable=False, server_default="0"),
    Column("turns", Integer, nullable=False),
    Column("prompt_tokens", BigInteger, nullable=False),
    Column("completion_tokens", BigInteger, nullable=False),
    Column("usage_incomplete", Boolean, nullable=False),
    Column("model_attempt", Integer, nullable=False),
    Column("model_in_flight", Boolean, nullable=False),
    Column("batch", Integer, nullable=False),
    Column("final_text", Text, nullable=True),
    Column("error", Text, nullable=True),
    Column("pause_requested", Boolean, nullable=False),
    Column("cancel_requested", Boolean, nullable=False),
    Column("lease_owner", String(_NAME), nullable=True),
    Column("lease_expires_at", BigInteger, nullable=True),
    Column("fence", BigInteger, nullable=False),
    # A sub-agent's run: its parent (not a foreign key, like a ticket's call), the
    # parent's delegating call, the task key (unique per parent), its depth and the
    # ancestors' ids and agents, top-level first.
    Column("parent_run_id", String(_ID), nullable=True),
    Column("parent_call_id", String(_ID), nullable=True),
    Column("task_key", String(_NAME), nullable=True),
    Column("depth", Integer, nullable=False, server_default="0"),
    Column("lineage", JSON(none_as_null=True), nullable=True),
    # The W3C trace context the run was started in (tracing on), written once.
    Column("trace_context", JSON(none_as_null=True), nullable=True),
    # claimable_runs: status filter, oldest update first.
    Index(None, "status", "updated_at"),
    # list_runs(thread_id=...), newest first.
    Index(None, "thread_id", "created_at"),
    # list_runs() without filters, newest first.
    Index(None, "created_at"),
    # what a user may see: the runs they requested
    Index(None, "requester", "created_at"),
    # child_run / child_runs, and one child per task key of a parent
    Index(None, "parent_run_id", "task_key", unique=True),
)

# A run's older transcript entries, one row each, written once: entry `seq` (from 0) of
# the transcript. The newest ones stay in `runs.recent_messages`.
run_messages = Table(
    "run_messages",
    metadata,
    Column("run_id", String(_ID), ForeignKey("runs.run_id"), primary_key=True),
    Column("seq", Integer, primary_key=True),
    Column("message", JSON, nullable=False),
)

tool_calls = Table(
    "tool_calls",
    metadata,
    Column("call_id", String(_ID), primary_key=True),
    Column("run_id", String(_ID), ForeignKey("runs.run_id"), nullable=False),
    Column("batch", Integer, nullable=False),
    Column("seq", Integer, nullable=False),
    Column("model_call_id", String(_NAME), nullable=False),
    Column("tool", String(_NAME), nullable=False),
    Column("args", JSON, nullable=False),
    Column("state", String(_ENUM), nullable=False),
    Column("replay_policy", String(_ENUM), nullable=False),
    Column("execution_key", String(_NAME), nullable=False),
    Column("created_at", BigInteger, nullable=False),
    Column("updated_at", BigInteger, nullable=False),
    Column("attempts", Integer, nullable=False),
    # Any JSON value, including null: a tool may legitimately return None.
    Column("result", JSON, nullable=True),
    Column("error", Text, nullable=True),
    Column("answer", JSON(none_as_null=True), nullable=True),
    Column("decided_by", JSON(none_as_null=True), nullable=True),
    Column("reason", Text, nullable=True),
    # An approver's change of the arguments (runtime.edits), null when none.
    Column("edit", JSON(none_as_null=True), nullable=True),
    Index(None, "run_id", "batch", "seq"),
    Index(None, "execution_key", unique=True),
)

tickets = Table(
    "tickets",
    metadata,
    Column("ticket_id", String(_ID), primary_key=True),
    Column("correlation", String(_NAME), nullable=False),
    Column("run_id", String(_ID), ForeignKey("runs.run_id"), nullable=False),
    Column("thread_id", String(_ID), nullable=False),
    Column("agent", String(_NAME), nullable=False),
    Column("agent_version", String(_NAME), nullable=False),
    Column("catalog_fingerprint", String(_NAME), nullable=False),
    # Not a foreign key: a ticket is a snapshot of what the run waits on.
    Column("call_id", String(_ID), nullable=True),
    Column("target_kind", String(_ENUM), nullable=False),
    Column("target", JSON, nullable=False),
    Column("requester", String(_NAME), nullable=True),
    Column("approvers", JSON, nullable=False),
    Column("four_eyes", Boolean, nullable=False),
    Column("deadline", BigInteger, nullable=True),
    Column("status", String(_ENUM), nullable=False),
    Column("created_at", BigInteger, nullable=False),
    Column("decision", JSON(none_as_null=True), nullable=True),
    Column("decided_by", String(_NAME), nullable=True),
    Column("decided_at", BigInteger, nullable=True),
    # The agents from the top-level run down to a sub-agent's (empty: a top-level run).
    Column("chain", JSON(none_as_null=True), nullable=True),
    # Step-up: the edges a ticket may be decided in, and whether single sign-on is
    # needed (None: anywhere, as before).
    Column("decide_in", JSON(none_as_null=True), nullable=True),
    Column("sso", Boolean, nullable=True),
    Index(None, "run_id", "created_at"),
    # overdue_tickets
    Index(None, "status", "deadline"),
    # open_tickets
    Index(None, "status", "created_at"),
    # open_ticket_for_call and the one-open-ticket-per-call check. Not a partial unique
    # index (engines disagree on them); the store enforces it inside the transaction.
    Index(None, "call_id", "status"),
    # what a user may see: the runs they decided a ticket of
    Index(None, "decided_by"),
)

# Who may decide each open ticket, one row per decider key (``user:<id>``,
# ``group:<name>``, ``any``; see `runtime.store.records.decider_keys`), written with the
# ticket and deleted when it closes: listing the tickets (and runs) one person may decide
# reads their rows only, never every open ticket.
ticket_deciders = Table(
    "ticket_deciders",
    metadata,
    Column("ticket_id", String(_ID), ForeignKey("tickets.ticket_id"), primary_key=True),
    Column("decider", String(_DECIDER), primary_key=True),
    Column("run_id", String(_ID), nullable=False),
    Column("created_at", BigInteger, nullable=False),
    Column("call_id", String(_ID), nullable=True),
    Column("target_kind", String(_ENUM), nullable=False),
    # Four-eyes: the requester, who may not decide whatever the key says.
    Column("barred", String(_NAME), nullable=True),
    # decidable_tickets: one key's tickets, oldest first
    Index(None, "decider", "created_at", "ticket_id"),
)

events = Table(
    "events",
    metadata,
    # The global id doubles as the per-run sequence number: it only ever grows.
    # SQLite only autoincrements an INTEGER PRIMARY KEY, hence the variant.
    Column(
        "seq",
        BigInteger().with_variant(Integer(), "sqlite"),
        primary_key=True,
        autoincrement=True,
    ),
    Column("run_id", String(_ID), ForeignKey("runs.run_id"), nullable=False),
    Column("at", BigInteger, nullable=False),
    Column("kind", String(_NAME), nullable=False),
    Column("data", JSON, nullable=False),
    Column("actor", String(_NAME), nullable=True),
    Index(None, "run_id", "seq"),
)

outbox = Table(
    "outbox",
    metadata,
    Column("outbox_id", String(_ID), primary_key=True),
    Column("run_id", String(_ID), ForeignKey("runs.run_id"), nullable=False),
    Column("kind", String(_NAME), nullable=False),
    Column("payload", JSON, nullable=False),
    Column("destination", JSON, nullable=False),
    Column("created_at", BigInteger, nullable=False),
    Column("next_attempt_at", BigInteger, nullable=False),
    Column("ticket_id", String(_ID), nullable=True),
    Column("state", String(_ENUM), nullable=False),
    Column("attempts", Integer, nullable=False),
    Column("last_error", Text, nullable=True),
    Column("platform_ref", JSON(none_as_null=True), nullable=True),
    Column("delivered_at", BigInteger, nullable=True),
    # ``platform:channel`` of the destination, for per-channel pacing (None: not paced).
    Column("channel_key", String(_NAME), nullable=True),
    # ``platform:channel`` of the message it left, once delivered with a platform
    # reference (None before): where a run's first message in a channel is found.
    Column("posted_in", String(_NAME), nullable=True),
    # A delivery's claim: who delivers it until when; the fence grows with every claim,
    # so only the latest claimer can record the outcome.
    Column("lease_owner", String(_NAME), nullable=True),
    Column("lease_expires_at", BigInteger, nullable=True),
    Column("fence", BigInteger, nullable=False, server_default="0"),
    Index(None, "state", "next_attempt_at"),
    Index(None, "ticket_id", "kind"),
    Index(None, "run_id", "created_at"),
    Index(None, "run_id", "posted_in", "created_at"),
)

idempotency_keys = Table(
    "idempotency_keys",
    metadata,
    Column("scope", String(_NAME), primary_key=True),
    Column("key", String(_NAME), primary_key=True),
    Column("fingerprint", String(_NAME), nullable=False),
    # Not a foreign key: the key is recorded before the run it starts is inserted.
    Column("run_id", String(_ID), nullable=False),
    Column("created_at", BigInteger, nullable=False),
    # forget_idempotency: signatures are only remembered for their time window
    Index(None, "scope", "created_at"),
)


revoked_sessions = Table(
    "revoked_sessions",
    metadata,
    # A console session that was signed out; its cookie is refused until it would have
    # expired anyway, on every replica.
    Column("session_id", String(_NAME), primary_key=True),
    Column("expires_at", BigInteger, nullable=False),
    Index(None, "expires_at"),
)


identity_links = Table(
    "identity_links",
    metadata,
    # One person across edges: a platform's user id (a Slack or Discord id, an
    # ``oidc:<claim>``) and the person it belongs to (`runtime.domain.identity`).
    Column("identity", String(_NAME), primary_key=True),
    Column("person", String(_NAME), nullable=False),
    Column("source", String(_ENUM), nullable=False),
    Column("linked_at", BigInteger, nullable=False),
    Index(None, "person"),
)


link_codes = Table(
    "link_codes",
    metadata,
    # A one-time code shown in the console: its SHA-256 and the person it links to.
    Column("digest", String(_ID), primary_key=True),
    Column("person", String(_NAME), nullable=False),
    Column("expires_at", BigInteger, nullable=False),
    Index(None, "expires_at"),
)


mcp_oauth = Table(
    "mcp_oauth",
    metadata,
    # An MCP server's OAuth client, tokens and any sign-in under way, sealed (encrypted)
    # by the MCP adapter: the store never reads them.
    Column("server", String(_NAME), primary_key=True),
    Column("sealed", Text, nullable=False),
    Column("updated_at", BigInteger, nullable=False),
)


received_commands = Table(
    "received_commands",
    metadata,
    Column("command_id", String(_ID), primary_key=True),
    Column("source", String(_ENUM), nullable=False),
    Column("delivery_id", String(_NAME), nullable=False),
    Column("ticket_id", String(_ID), nullable=False),
    Column("correlation", String(_NAME), nullable=False),
    Column("answer", JSON, nullable=False),
    Column("actor", JSON, nullable=False),
    Column("reply", JSON, nullable=True),
    Column("received_at", BigInteger, nullable=False),
    Column("state", String(_ENUM), nullable=False),
    Column("error_code", String(_ENUM), nullable=True),
    Column("error", Text, nullable=True),
    Column("applied_at", BigInteger, nullable=True),
    # Who applies it until when (one replica at a time).
    Column("lease_owner", String(_NAME), nullable=True),
    Column("lease_expires_at", BigInteger, nullable=True),
    UniqueConstraint("source", "delivery_id"),
    Index(None, "state", "received_at"),
)


outbox_pacing = Table(
    "outbox_pacing",
    metadata,
    # When the next message to a channel may go, shared by every replica.
    Column("channel_key", String(_NAME), primary_key=True),
    Column("next_at", BigInteger, nullable=False),
)


leases = Table(
    "leases",
    metadata,
    # Named leases on things one process at a time may hold (the Discord gateway).
    Column("name", String(_NAME), primary_key=True),
    Column("owner", String(_NAME), nullable=False),
    Column("fence", BigInteger, nullable=False),
    Column("expires_at", BigInteger, nullable=False),
)


grants = Table(
    "grants",
    metadata,
    # A standing grant: later calls of one tool run without asking (runtime.grants).
    Column("grant_id", String(_ID), primary_key=True),
    Column("agent", String(_NAME), nullable=False),
    Column("agent_version", String(_NAME), nullable=False),
    Column("catalog_fingerprint", String(_NAME), nullable=False),
    Column("tool", String(_NAME), nullable=False),
    Column("scope", String(_ENUM), nullable=False),
    Column("run_id", String(_ID), ForeignKey("runs.run_id"), nullable=False),
    Column("thread_id", String(_ID), nullable=False),
    Column("requester", String(_NAME), nullable=True),
    Column("arg_constraint", JSON(none_as_null=True), nullable=True),
    Column("granted_by", String(_NAME), nullable=False),
    Column("granted_by_name", String(_NAME), nullable=True),
    Column("platform", String(_ENUM), nullable=False),
    # Not a foreign key: the decision's ticket, kept for the audit.
    Column("ticket_id", String(_ID), nullable=True),
    Column("created_at", BigInteger, nullable=False),
    Column("expires_at", BigInteger, nullable=True),
    Column("revoked_at", BigInteger, nullable=True),
    Column("revoked_by", String(_NAME), nullable=True),
    # active_grants (run scope) and list_grants(run_id=...), newest first
    Index(None, "run_id", "created_at"),
    # active_grants (thread scope) and list_grants(thread_id=...)
    Index(None, "thread_id", "tool"),
    # what a user may see: the grants they gave, or given in runs they requested
    Index(None, "granted_by"),
    Index(None, "requester"),
    # list_grants() without filters, newest first
    Index(None, "created_at"),
)


schema_revisions = Table(
    "schema_revisions",
    metadata,
    # Every migration applied, with whether the code of the revision before it still
    # runs on its schema (an expand-only change): older replicas read this to stay ready
    # during a rolling upgrade.
    Column("revision", String(_ENUM), primary_key=True),
    Column("down_revision", String(_ENUM), nullable=True),
    Column("backward_compatible", Boolean, nullable=False),
    Column("applied_at", BigInteger, nullable=False),
)
