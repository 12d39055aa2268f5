"""Alembic environment for the store's migrations.

Two ways in:

- Programmatically (`SQLStore.migrate`): the caller passes an open synchronous
  connection (from ``AsyncConnection.run_sync``) in ``config.attributes["connection"]``
  and owns its transaction.
- From the ``alembic`` command line (``alembic.ini`` at the repository root): an async
  engine is built from ``sqlalchemy.url``, or from ``-x url=...``.
"""

from __future__ import annotations

import asyncio
from logging.config import fileConfig

from alembic import context
from sqlalchemy import Connection, pool
from sqlalchemy.ext.asyncio import create_async_engine

from runtime.store.schema import metadata

config = context.config

if config.config_file_name is not None and config.attributes.get("connection") is None:
    # Only the command line configures logging; an application keeps its own.
    fileConfig(config.config_file_name)


def _url() -> str:
    url = context.get_x_argument(as_dictionary=True).get("url")
    return url or config.get_main_option("sqlalchemy.url") or ""


def _configure(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=metadata,
        compare_type=True,
        # SQLite cannot ALTER most things; autogenerate must use batch operations.
        render_as_batch=connection.dialect.name == "sqlite",
    )


def _run(connection: Connection) -> None:
    _configure(connection)
    with context.begin_transaction():
        context.run_migrations()


async def _run_async(url: str) -> None:
    engine = create_async_engine(url, poolclass=pool.NullPool)
    try:
        async with engine.connect() as connection:
            await connection.run_sync(_run)
    finally:
        await engine.dispose()


def run_migrations_offline() -> None:
    """Emit the migrations as SQL (``alembic upgrade --sql``)."""
    context.configure(
        url=_url(),
        target_metadata=metadata,
        literal_binds=True,
        dialect_opts={"paramstyle": "named"},
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    """Run the migrations on a live database."""
    connection = config.attributes.get("connection")
    if connection is not None:
        _run(connection)
    else:
        asyncio.run(_run_async(_url()))


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
