"""Fixtures for the store contract: one suite, every store.

``store`` runs each test over `MemoryStore`, `SQLStore` on a fresh SQLite file,
`SQLStore` on a fresh PostgreSQL database (made from the cluster named by
``SIGNOFF_TEST_POSTGRES_URL`` and dropped after the test; see ``tests/support/pgtest.py``)
and `SQLStore` on such a database through PgBouncer in transaction mode
(``SIGNOFF_TEST_PGBOUNCER_URL``, listening on the direct URL; see
``tests/support/pgbouncer.py``). Without those variables the PostgreSQL cases skip,
except under ``CI=true``, where they fail.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from pgbouncer import through_pgbouncer
from pgtest import close_databases, fresh_database, module_database, truncate

from runtime.domain.states import CallState, RunStatus
from runtime.domain.tickets import AwaitTarget, ResumeTicket, ToolPermission
from runtime.store.base import Store
from runtime.store.memory import MemoryStore
from runtime.store.records import CallRecord, EventRecord, OutboxRecord, RunRecord
from runtime.store.sql import SQLStore

SQL_STORES = ["sqlite", "postgresql"]
STORES = ["memory", *SQL_STORES, "pgbouncer"]

# Microseconds on purpose: the SQL store keeps them exactly.
T0 = datetime(2026, 1, 1, 12, 0, 0, 123456, tzinfo=UTC)


def at(seconds: float) -> datetime:
    """`T0` plus `seconds`."""
    return T0 + timedelta(seconds=seconds)


def pytest_sessionfinish() -> None:
    """Drop the PostgreSQL databases and template this process made."""
    close_databases()


@pytest.fixture(scope="module")
def postgres_module_url() -> Iterator[str]:
    """A migrated PostgreSQL database shared by one module's tests (emptied per test)."""
    with module_database() as url:
        yield url


async def _postgres_url(request: pytest.FixtureRequest) -> str:
    url: str = request.getfixturevalue("postgres_module_url")
    await truncate(url)
    return url


async def open_store(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> Store:
    """A migrated, empty store of `kind`."""
    store: Store
    if kind == "memory":
        store = MemoryStore()
    elif kind == "sqlite":
        store = SQLStore.sqlite(tmp_path / "signoff.db")
    elif kind == "pgbouncer":
        direct = await _postgres_url(request)
        store = SQLStore.from_url(
            through_pgbouncer(direct), pooler="transaction", listen_url=direct
        )
    else:
        store = SQLStore.from_url(await _postgres_url(request))
    await store.migrate()
    return store


@pytest.fixture(params=STORES)
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    """Each store implementation, migrated and empty."""
    opened = await open_store(request.param, tmp_path, request)
    try:
        yield opened
    finally:
        await opened.close()


@pytest.fixture(params=SQL_STORES)
async def empty_sql_url(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    """The URL of an empty SQL database (no tables) that several stores may open."""
    if request.param == "sqlite":
        yield f"sqlite+aiosqlite:///{tmp_path / 'shared.db'}"
        return
    async with fresh_database(migrated=False) as url:
        yield url


@pytest.fixture(params=SQL_STORES)
async def sql_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The URL of a migrated, empty SQL database that several stores may open."""
    if request.param == "postgresql":
        return await _postgres_url(request)
    url = f"sqlite+aiosqlite:///{tmp_path / 'shared.db'}"
    store = SQLStore.from_url(url)
    try:
        await store.migrate()
    finally:
        await store.close()
    return url


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
            "trace_context": {
                "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
            },
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
            "payload": {
                "run_id": run_id,
                "agent": "support",
                "ticket_id": "tk_1",
                "target": {"tool": "refund", "args": {"order": 42}},
            },
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
