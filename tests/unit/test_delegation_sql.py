"""The delegation tests again, over a real SQLite file and a PostgreSQL database."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from pgtest import module_database, truncate
from test_delegation import *  # noqa: F403  (the same test bodies, run over SQL stores)

from runtime.store.sql import SQLStore


@pytest.fixture(scope="module")
def postgres_module_url() -> Iterator[str]:
    with module_database() as url:
        yield url


@pytest.fixture(params=["sqlite", "postgresql"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[SQLStore]:
    if request.param == "sqlite":
        sql = SQLStore.sqlite(tmp_path / "delegation.db")
    else:
        url: str = request.getfixturevalue("postgres_module_url")
        await truncate(url)
        sql = SQLStore.from_url(url)
    await sql.migrate()
    try:
        yield sql
    finally:
        await sql.close()
