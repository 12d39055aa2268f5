"""PostgreSQL for tests: one database per test, made on the cluster of SIGNOFF_TEST_POSTGRES_URL.

``.ci/with-postgres COMMAND`` starts a throwaway cluster and sets the variable (CI always
does, through ``.ci/run``). Without it the PostgreSQL tests skip with the reason, except
under ``CI=true``, where they fail: CI must run both stores.

Every database is created from a template that was migrated once per test process and
dropped after its test or module (``WITH (FORCE)``: a SIGKILLed server may have left
connections behind). Creating one costs a few tenths of a second, so suites of many small
tests share one per module and empty its tables between tests (`truncate`).
"""

from __future__ import annotations

import asyncio
import os
import secrets
import threading
from collections.abc import AsyncIterator, Coroutine, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any, TypeVar

import asyncpg
import pytest
from sqlalchemy.engine import URL, make_url

from runtime.store.schema import metadata
from runtime.store.sql import SQLStore

ENV = "SIGNOFF_TEST_POSTGRES_URL"

_T = TypeVar("_T")


def run_apart(coro: Coroutine[Any, Any, _T]) -> _T:
    """Run `coro` to the end in its own loop on another thread (a test's loop may be running)."""
    result: list[_T] = []
    errors: list[BaseException] = []

    def target() -> None:
        try:
            result.append(asyncio.run(coro))
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=target, name="pgtest")
    thread.start()
    thread.join()
    if errors:
        raise errors[0]
    return result[0]


def postgres_url() -> str | None:
    """The cluster's URL, or None."""
    return os.environ.get(ENV) or None


def require_postgres() -> str:
    """The cluster's URL; skips the test without one (fails it under ``CI=true``)."""
    url = postgres_url()
    if url is not None:
        return url
    message = (
        f"PostgreSQL tests need {ENV} (run them with `.ci/with-postgres make test`, "
        "or point it at a server where the user may create databases)"
    )
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(f"CI=true but {message}", pytrace=False)
    pytest.skip(message)


def _dsn(url: URL) -> str:
    # asyncpg takes libpq-style URLs without SQLAlchemy's driver suffix.
    return url.set(drivername="postgresql").render_as_string(hide_password=False)


class Databases:
    """Creates and drops test databases on one cluster."""

    def __init__(self, url: str) -> None:
        self._url = make_url(url)
        self._template: str | None = None
        self.created: set[str] = set()

    def url_of(self, name: str) -> str:
        """A SQLAlchemy URL for database `name` on the cluster."""
        return self._url.set(database=name).render_as_string(hide_password=False)

    async def _admin(self, statement: str) -> None:
        conn = await asyncpg.connect(_dsn(self._url))
        try:
            await conn.execute(statement)
        finally:
            await conn.close()

    async def _ensure_template(self) -> str:
        # Tests of one process run one at a time: no lock (it would belong to one loop).
        if self._template is None:
            name = f"signoff_tpl_{os.getpid()}_{secrets.token_hex(3)}"
            await self._admin(f'CREATE DATABASE "{name}"')
            self.created.add(name)
            store = SQLStore.from_url(self.url_of(name))
            try:
                await store.migrate()
            finally:
                await store.close()
            self._template = name
        return self._template

    async def create(self, *, migrated: bool = True) -> str:
        """A new database (migrated, or empty); returns its URL."""
        name = f"signoff_t_{secrets.token_hex(6)}"
        template = await self._ensure_template() if migrated else "template0"
        await self._admin(f'CREATE DATABASE "{name}" TEMPLATE "{template}"')
        self.created.add(name)
        return self.url_of(name)

    async def drop(self, url: str) -> None:
        """Drop a database made by `create`, closing whatever is still connected to it."""
        name = make_url(url).database
        assert name is not None and name in self.created, name
        await self._admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        self.created.discard(name)

    async def close(self) -> None:
        """Drop every database still left, the template last."""
        for name in sorted(self.created, key=lambda n: n.startswith("signoff_tpl_")):
            await self._admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        self.created.clear()


_databases: Databases | None = None


def databases() -> Databases:
    """The process's `Databases` (skips or fails the test without a cluster)."""
    global _databases
    url = require_postgres()
    if _databases is None:
        _databases = Databases(url)
    return _databases


def close_databases() -> None:
    """Drop what is left (a ``pytest_sessionfinish`` hook calls it, outside any loop)."""
    global _databases
    if _databases is not None:
        run_apart(_databases.close())
        _databases = None


@asynccontextmanager
async def fresh_database(*, migrated: bool = True) -> AsyncIterator[str]:
    """A new database for one test, dropped afterwards; yields its URL."""
    dbs = databases()
    url = await dbs.create(migrated=migrated)
    try:
        yield url
    finally:
        await dbs.drop(url)


@contextmanager
def module_database() -> Iterator[str]:
    """A migrated database for a module's tests (sync: module fixtures outlive test loops)."""
    dbs = databases()
    url = run_apart(dbs.create())
    try:
        yield url
    finally:
        run_apart(dbs.drop(url))


async def truncate(url: str) -> None:
    """Empty every table of the store (the schema and its revision stay)."""
    names = ", ".join(f'"{table.name}"' for table in metadata.sorted_tables)
    conn = await asyncpg.connect(_dsn(make_url(url)))
    try:
        await conn.execute(f"TRUNCATE {names} RESTART IDENTITY CASCADE")
    finally:
        await conn.close()


async def fetch(url: str, sql: str, *args: Any) -> list[asyncpg.Record]:
    """Run one query on a database made by `create` (a test reading what replicas wrote)."""
    conn = await asyncpg.connect(_dsn(make_url(url)))
    try:
        return list(await conn.fetch(sql, *args))
    finally:
        await conn.close()
