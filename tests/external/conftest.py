"""Shared fixtures for the external approval tests: one store and clock per test, and
runtimes over them (a second runtime on the same store is a restarted process)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from approvals_kit import RuntimeFactory
from pgtest import close_databases, module_database, truncate

from runtime import Agent, ManualClock, MemoryStore, Runtime, SequentialIds, Store
from runtime.store.sql import SQLStore


def pytest_sessionfinish() -> None:
    """Drop the PostgreSQL databases the SQL variants of these tests made."""
    close_databases()


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def ids() -> SequentialIds:
    return SequentialIds()


@pytest.fixture(scope="module")
def postgres_module_url() -> Iterator[str]:
    with module_database() as url:
        yield url


@pytest.fixture(params=["memory", "sqlite", "postgresql"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    """Every test runs over the memory store, a SQLite file and PostgreSQL."""
    if request.param == "memory":
        yield MemoryStore()
        return
    if request.param == "sqlite":
        sql = SQLStore.sqlite(tmp_path / "approvals.db")
    else:
        url: str = request.getfixturevalue("postgres_module_url")
        await truncate(url)
        sql = SQLStore.from_url(url)
    await sql.migrate()
    try:
        yield sql
    finally:
        await sql.close()


@pytest.fixture
def runtime_factory(store: Store, clock: ManualClock, ids: SequentialIds) -> RuntimeFactory:
    """Runtimes over one store, clock and id source; a second call is a fresh process."""

    def make(*agents: Agent, **options: Any) -> Runtime:
        return Runtime(store, agents, clock=clock, ids=ids, **options)

    return make
