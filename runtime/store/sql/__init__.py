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

from runtime.store.sql.convert import from_micros, to_micros
from runtime.store.sql.failures import unreachable
from runtime.store.sql.migrating import (
    MIGRATIONS_DIR,
    SCHEMA_HEAD,
    SchemaState,
    SchemaStatus,
    alembic_config,
)
from runtime.store.sql.runs import RECENT_MESSAGES
from runtime.store.sql.store import SQLStore
from runtime.store.sql.transaction import SQLTransaction
from runtime.store.sql.wake import WAKE_CHANNEL, WAKE_OUTBOX, WAKE_RUNS

__all__ = [
    "MIGRATIONS_DIR",
    "RECENT_MESSAGES",
    "SCHEMA_HEAD",
    "WAKE_CHANNEL",
    "WAKE_OUTBOX",
    "WAKE_RUNS",
    "SQLStore",
    "SQLTransaction",
    "SchemaState",
    "SchemaStatus",
    "alembic_config",
    "from_micros",
    "to_micros",
    "unreachable",
]
