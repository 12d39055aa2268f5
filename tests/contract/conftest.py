"""Fixtures for the store contract: one suite, every store.

``store`` runs each test over `MemoryStore` and `SQLStore` on a fresh SQLite file. Set
``SIGNOFF_TEST_POSTGRES_URL`` (e.g. ``postgresql+asyncpg://user@localhost/signoff_test``)
to add PostgreSQL; its tables are dropped and migrated again for every test.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

from runtime.states import CallState, RunStatus
from runtime.store.base import Store
from runtime.store.memory import MemoryStore
from runtime.store.records import CallRecord, EventRecord, OutboxRecord, RunRecord
from runtime.store.schema import metadata
from runtime.store.sql import SQLStore
from runtime.tickets import AwaitTarget, ResumeTicket, ToolPermission

POSTGRES_URL = os.environ.get("SIGNOFF_TEST_POSTGRES_URL")
SQL_STORES = ["sqlite", *(["postgresql"] if POSTGRES_URL else [])]
STORES = ["memory", *SQL_STORES]

# Microseconds on purpose: the SQL store keeps them exactly.
T0 = datetime(2026, 1, 1, 12, 0, 0, 123456, tzinfo=UTC)


def at(seconds: float) -> datetime:
    """`T0` plus `seconds`."""
    return T0 + timedelta(seconds=seconds)


async def _drop_postgres_tables(url: str) -> None:
    store = SQLStore.from_url(url)
    try:
        async with store.engine.begin() as conn:
            await conn.run_sync(metadata.drop_all)
            await conn.execute(text("DROP TABLE IF EXISTS alembic_version"))
    finally:
        await store.close()


async def open_store(kind: str, tmp_path: Path) -> Store:
    """A migrated, empty store of `kind`."""
    store: Store
    if kind == "memory":
        store = MemoryStore()
    elif kind == "sqlite":
        store = SQLStore.sqlite(tmp_path / "signoff.db")
    else:
        assert POSTGRES_URL is not None
        await _drop_postgres_tables(POSTGRES_URL)
        store = SQLStore.from_url(POSTGRES_URL)
    await store.migrate()
    return store


@pytest.fixture(params=STORES)
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    """Each store implementation, migrated and empty."""
    opened = await open_store(request.param, tmp_path)
    try:
        yield opened
    finally:
        await opened.close()


@pytest.fixture(params=SQL_STORES)
async def empty_sql_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The URL of an empty SQL database (no tables) that several stores may open."""
    if request.param == "sqlite":
        return f"sqlite+aiosqlite:///{tmp_path / 'shared.db'}"
    assert POSTGRES_URL is not None
    await _drop_postgres_tables(POSTGRES_URL)
    return POSTGRES_URL


@pytest.fixture
async def sql_url(empty_sql_url: str) -> str:
    """The URL of a migrated, empty SQL database that several stores may open."""
    store = SQLStore.from_url(empty_sql_url)
    try:
        await store.migrate()
    finally:
        await store.close()
    return empty_sql_url


class Make:
    """Builds records with every field set, so round trips check them all.

    Attributes:
        t0: The time every record is created at unless told otherwise.
    """

    t0 = T0

    def at(self, seconds: float) -> datetime:
        """`t0` plus `seconds`."""
        return at(seconds)

    def run(self, run_id: str = "run_1", **changes: Any) -> RunRecord:
        """A queued run."""
        values: dict[str, Any] = {
            "run_id": run_id,
            "thread_id": "thread_1",
            "agent": "refunds",
            "agent_version": "v1",
            "status": RunStatus.QUEUED,
            "input": "refund order 42",
            "requester": "U1",
            "created_at": T0,
            "updated_at": T0,
            "origin": {"platform": "slack", "channel": "C1", "ts": "1.2"},
            "messages": [{"role": "user", "content": "refund order 42"}],
        }
        values.update(changes)
        return RunRecord(**values)

    def call(
        self,
        call_id: str = "call_1",
        run_id: str = "run_1",
        batch: int = 1,
        seq: int = 0,
        **changes: Any,
    ) -> CallRecord:
        """A proposed tool call."""
        values: dict[str, Any] = {
            "call_id": call_id,
            "run_id": run_id,
            "batch": batch,
            "seq": seq,
            "model_call_id": f"m_{call_id}",
            "tool": "refund",
            "args": {"order": 42, "amount": 12.5},
            "state": CallState.PROPOSED,
            "replay_policy": "manual",
            "execution_key": f"key_{call_id}",
            "created_at": T0,
            "updated_at": T0,
        }
        values.update(changes)
        return CallRecord(**values)

    def ticket(
        self,
        ticket_id: str = "tkt_1",
        run_id: str = "run_1",
        target: AwaitTarget | None = None,
        **changes: Any,
    ) -> ResumeTicket:
        """An open ticket, by default waiting on ``call_1``'s permission."""
        values: dict[str, Any] = {
            "ticket_id": ticket_id,
            "correlation": f"corr_{ticket_id}",
            "run_id": run_id,
            "thread_id": "thread_1",
            "agent": "refunds",
            "agent_version": "v1",
            "catalog_fingerprint": "fp1",
            "target": target or ToolPermission(call_id="call_1", tool="refund", args={"order": 42}),
            "requester": "U1",
            "created_at": T0,
        }
        values.update(changes)
        return ResumeTicket(**values)

    def event(self, run_id: str = "run_1", kind: str = "model_call", **changes: Any) -> EventRecord:
        """A flight-recorder entry."""
        values: dict[str, Any] = {
            "run_id": run_id,
            "at": T0,
            "kind": kind,
            "data": {"tokens": 3},
            "actor": "U1",
        }
        values.update(changes)
        return EventRecord(**values)

    def outbox(
        self, outbox_id: str = "ob_1", run_id: str = "run_1", **changes: Any
    ) -> OutboxRecord:
        """A pending notification."""
        values: dict[str, Any] = {
            "outbox_id": outbox_id,
            "run_id": run_id,
            "kind": "approval_requested",
            "payload": {"tool": "refund", "args": {"order": 42}},
            "destination": {"platform": "slack", "channel": "C1"},
            "created_at": T0,
            "next_attempt_at": T0,
        }
        values.update(changes)
        return OutboxRecord(**values)


@pytest.fixture
def make() -> Make:
    """Record builders."""
    return Make()
