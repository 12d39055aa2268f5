"""Fixtures of the multi-replica tests (the helpers live in `cluster.py`)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from cluster import Api, Cluster
from pgtest import close_databases, fresh_database


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
async def cluster(database: str, tmp_path: Path) -> AsyncIterator[Cluster]:
    """Replicas on a fresh database; every one still running is stopped afterwards."""
    replicas = Cluster(database, tmp_path)
    try:
        yield replicas
    finally:
        await replicas.stop()


@pytest.fixture
async def api() -> AsyncIterator[Api]:
    async with aiohttp.ClientSession() as http:
        yield Api(http)
