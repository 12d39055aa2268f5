"""Where a crash scenario keeps its database: a SQLite file, or a fresh PostgreSQL database.

The PostgreSQL databases come from the cluster of ``SIGNOFF_TEST_POSTGRES_URL`` (see
``tests/support/pgtest.py``), one per scenario, dropped after it.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from pgtest import close_databases, databases, run_apart
from places import Place


def pytest_sessionfinish() -> None:
    """Drop the PostgreSQL databases this process made."""
    close_databases()


@pytest.fixture(params=["sqlite", "postgresql"])
def place(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Place]:
    """Each scenario on SQLite and on PostgreSQL."""
    if request.param == "sqlite":
        yield Place(str(tmp_path / "signoff.db"), tmp_path)
        return
    dbs = databases()
    url = run_apart(dbs.create())
    try:
        yield Place(url, tmp_path)
    finally:
        run_apart(dbs.drop(url))
