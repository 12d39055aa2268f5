"""Migrations, and where a database's schema stands against this code's."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Literal, TypeVar, assert_never

from sqlalchemy import Column, Connection, MetaData, String, Table, insert, select
from sqlalchemy import inspect as sa_inspect
from sqlalchemy.engine import Engine

from runtime.domain.errors import StorageError
from runtime.store.schema import schema_revisions
from runtime.store.sql.convert import to_micros

if TYPE_CHECKING:
    # Alembic is imported only to migrate or to judge a schema other than ours: loading
    # it and the migration scripts costs more than the rest of a start.
    from alembic.config import Config
    from alembic.script import ScriptDirectory


_T = TypeVar("_T")


MIGRATIONS_DIR = Path(__file__).parent.parent / "migrations"
SCHEMA_HEAD = "0014"
"""The newest migration in ``migrations/versions`` (a test checks it against Alembic's).

A database at this revision is current without loading Alembic."""


MIGRATION_WAIT_SECONDS = 60.0


# Alembic's own table (not part of `metadata`, which the migrations must build exactly).
_alembic_version = Table("alembic_version", MetaData(), Column("version_num", String(32)))


def migrate_sync(engine: Engine) -> None:
    with engine.begin() as conn:
        migrate_on(conn)


def migrate_on(conn: Connection) -> None:
    """Upgrade the schema on `conn` (in its transaction) unless it needs nothing."""
    status = read_schema_status(conn)
    if status.state == "newer_incompatible":
        raise StorageError(f"cannot migrate: {status.describe()}")
    if status.state == "newer_compatible" or (status.state == "current" and _head_recorded(conn)):
        return
    _upgrade(conn)


def reading(engine: Engine, fn: Callable[[Connection], _T]) -> _T:
    with engine.connect() as conn:
        return fn(conn)


def alembic_config() -> Config:
    """An Alembic configuration for the store's migrations; no ``alembic.ini`` needed."""
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    return config


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


def read_schema_status(conn: Connection) -> SchemaStatus:
    head = SCHEMA_HEAD
    heads = read_heads(conn)
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


def read_heads(conn: Connection) -> tuple[str, ...]:
    """The revisions in Alembic's version table (as ``MigrationContext`` reads them)."""
    if not sa_inspect(conn).has_table(_alembic_version.name):
        return ()
    return tuple(conn.execute(select(_alembic_version.c.version_num)).scalars())
