"""Fixtures of the multi-replica tests (the helpers live in `cluster.py`).

The tests of the modules in `POOLED_MODULES` run twice: with the replicas connected to
PostgreSQL directly, and through PgBouncer in transaction mode (``route``), listening for
wake-ups on the direct URL.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from cluster import Api, Cluster
from pgbouncer import ROUTES, pooled_settings
from pgtest import close_databases, fresh_database

POOLED_MODULES = frozenset({"test_replica_runs"})
"""The modules whose tests also run through PgBouncer."""


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Run the tests of `POOLED_MODULES` on every route."""
    module = metafunc.module.__name__.rpartition(".")[2]
    if "route" in metafunc.fixturenames and module in POOLED_MODULES:
        metafunc.parametrize("route", ROUTES, indirect=True)


def pytest_sessionfinish() -> None:
    """Drop the PostgreSQL databases this process made."""
    close_databases()


@pytest.fixture(autouse=True)
def _no_proxies(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
async def database() -> AsyncIterator[str]:
    """A fresh, migrated PostgreSQL database for one test."""
    async with fresh_database() as url:
        yield url


@pytest.fixture
def route(request: pytest.FixtureRequest) -> str:
    """How the replicas reach PostgreSQL: ``direct``, or ``pgbouncer`` (transaction mode)."""
    return str(getattr(request, "param", "direct"))


@pytest.fixture
async def cluster(database: str, tmp_path: Path, route: str) -> AsyncIterator[Cluster]:
    """Replicas on a fresh database; every one still running is stopped afterwards."""
    replicas = Cluster(database, tmp_path)
    if route == "pgbouncer":
        replicas.settings.update(pooled_settings(database))
    try:
        yield replicas
    finally:
        await replicas.stop()


@pytest.fixture
async def api() -> AsyncIterator[Api]:
    async with aiohttp.ClientSession() as http:
        yield Api(http)
