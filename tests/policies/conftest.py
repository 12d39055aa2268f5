"""Fixtures for the policy tests: runtimes over a SQLite file and a PostgreSQL database
(``SIGNOFF_TEST_POSTGRES_URL``; see ``tests/support/pgtest.py``)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from pgtest import close_databases, module_database, truncate

from runtime import Agent, ManualClock, Runtime, SequentialIds
from runtime.store.sql import SQLStore

RuntimeFactory = Callable[..., Runtime]


def pytest_sessionfinish() -> None:
    """Drop the PostgreSQL databases these tests made."""
    close_databases()


@pytest.fixture(scope="module")
def postgres_module_url() -> Iterator[str]:
    with module_database() as url:
        yield url


@pytest.fixture(params=["sqlite", "postgresql"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[SQLStore]:
    if request.param == "sqlite":
        sql = SQLStore.sqlite(tmp_path / "policies.db")
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
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def runtime_factory(store: SQLStore, clock: ManualClock) -> RuntimeFactory:
    def make(*agents: Agent, **options: Any) -> Runtime:
        return Runtime(store, agents, clock=clock, ids=SequentialIds(), **options)

    return make
