"""The SQL store: SQLAlchemy 2 async over SQLite (aiosqlite) or PostgreSQL (asyncpg).

SQLite is tuned for one file shared by a few processes: WAL journal, a busy timeout,
``BEGIN IMMEDIATE`` for every transaction (so a transaction that later writes never
fails to upgrade its read lock), and an `asyncio.Lock` so transactions of one process
queue in memory instead of fighting over the file lock. The store's transactions share
one `sqlite3` connection whose statements run right on the event loop's thread, and
queued transactions share a commit (see `sqlite_writer`): on short transactions the
thread round trips of a usual async driver would be most of the cost.

PostgreSQL runs transactions concurrently. Everything that must be race-free across
replicas is a single conditional ``UPDATE`` (claiming a run, closing a ticket, fenced
writes) or takes a row lock first. A transaction runs on the asyncpg connection the pool
hands out, its statements prepared once per connection (see `postgres_direct`), except
behind a pooler in transaction mode, where statements go through SQLAlchemy.

Driver errors become `StorageError` here; constraint violations (a duplicate id, a
missing run) become `ValueError`, like in `MemoryStore`. On PostgreSQL a failed
statement aborts the transaction, so let such an error end it.

The modules:

- `store`: `SQLStore`, which opens transactions, migrates and listens for wake-ups;
- `dialects`: what differs between SQLite and PostgreSQL, and PostgreSQL's connections
  (`PoolOptions`, a `Pooler` in transaction mode, the ``LISTEN`` connection's URL);
- `transaction`: `SQLTransaction`, put together from one part per aggregate: `runs`,
  `calls`, `tickets` (and their deciders), `events`, `outbox`, `keys` (idempotency keys
  and revoked sessions), `received` (received commands), `grants`, `leases` (and the
  figures for metrics), each holding its statements;
- `executing` (running a statement), `rows` (records to rows and back), `convert`
  (times as microseconds), `upserts`, `wake` (wake-ups between processes),
  `failures` (what a driver error says);
- `migrating`: migrations and the schema's status;
- `plans`: statements compiled once each, run by SQLite's writer and on PostgreSQL;
- `postgres_direct`: PostgreSQL's transactions on asyncpg's connections;
- `sqlite_engine`, `sqlite_writer`, `sqlite_plans`: SQLite's connections.
"""

from runtime.store.sql.convert import from_micros, to_micros
from runtime.store.sql.dialects import POOLERS, Pooler, PoolOptions
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
    "POOLERS",
    "RECENT_MESSAGES",
    "SCHEMA_HEAD",
    "WAKE_CHANNEL",
    "WAKE_OUTBOX",
    "WAKE_RUNS",
    "PoolOptions",
    "Pooler",
    "SQLStore",
    "SQLTransaction",
    "SchemaState",
    "SchemaStatus",
    "alembic_config",
    "from_micros",
    "to_micros",
    "unreachable",
]
