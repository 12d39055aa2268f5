"""How a store judges the schema it finds: current, behind, or newer (compatible or not)."""

from __future__ import annotations

import pytest
from alembic import command
from sqlalchemy import Connection, text

from runtime.store.sql import SQLStore, alembic_config


def head() -> str:
    from alembic.script import ScriptDirectory

    found = ScriptDirectory.from_config(alembic_config()).get_current_head()
    assert found is not None
    return found


def _downgrade(conn: Connection, revision: str) -> None:
    config = alembic_config()
    config.attributes["connection"] = conn
    command.downgrade(config, revision)


@pytest.fixture
async def own_url(empty_sql_url: str) -> str:
    """A migrated database of this test's own: these tests change its schema."""
    store = SQLStore.from_url(empty_sql_url)
    try:
        await store.migrate()
    finally:
        await store.close()
    return empty_sql_url


async def pretend_newer(store: SQLStore, *, compatible: bool, steps: int = 1) -> str:
    """Record `steps` migrations after ours, as a newer version would have."""
    previous = head()
    async with store.engine.begin() as conn:
        for n in range(steps):
            revision = f"9{n:03}_future"
            await conn.execute(
                text(
                    "INSERT INTO schema_revisions "
                    "(revision, down_revision, backward_compatible, applied_at) "
                    "VALUES (:r, :d, :c, 0)"
                ),
                {"r": revision, "d": previous, "c": compatible or n < steps - 1},
            )
            previous = revision
        await conn.execute(text("UPDATE alembic_version SET version_num = :r"), {"r": previous})
    return previous


async def test_empty_then_current(empty_sql_url: str) -> None:
    store = SQLStore.from_url(empty_sql_url)
    try:
        status = await store.schema_status()
        assert (status.revision, status.state, status.usable) == (None, "empty", False)
        assert "signoff migrate" in status.describe()
        await store.migrate()
        status = await store.schema_status()
        assert (status.revision, status.head, status.state) == (head(), head(), "current")
        assert status.usable
    finally:
        await store.close()


async def test_an_older_schema_is_behind(own_url: str) -> None:
    store = SQLStore.from_url(own_url)
    try:
        async with store.engine.begin() as conn:
            await conn.run_sync(_downgrade, "0002")
        status = await store.schema_status()
        assert (status.revision, status.state, status.usable) == ("0002", "behind", False)
        assert "behind" in status.describe() and "signoff migrate" in status.describe()
    finally:
        await store.close()


async def test_a_newer_backward_compatible_schema_is_usable(own_url: str) -> None:
    store = SQLStore.from_url(own_url)
    try:
        newest = await pretend_newer(store, compatible=True, steps=2)
        status = await store.schema_status()
        assert (status.revision, status.state, status.usable) == (newest, "newer_compatible", True)
        assert "backward-compatible" in status.describe()
    finally:
        await store.close()


async def test_a_newer_schema_with_an_incompatible_step_is_not(own_url: str) -> None:
    store = SQLStore.from_url(own_url)
    try:
        # The first step is compatible, the last one is not.
        newest = await pretend_newer(store, compatible=False, steps=2)
        status = await store.schema_status()
        assert (status.revision, status.state, status.usable) == (
            newest,
            "newer_incompatible",
            False,
        )
        async with store.engine.begin() as conn:
            await conn.execute(text("UPDATE alembic_version SET version_num = 'unheard_of'"))
        assert (await store.schema_status()).state == "newer_incompatible"
    finally:
        await store.close()


async def test_migrations_record_their_compatibility(own_url: str) -> None:
    store = SQLStore.from_url(own_url)
    try:
        async with store.engine.connect() as conn:
            rows = (
                await conn.execute(
                    text(
                        "SELECT revision, down_revision, backward_compatible "
                        "FROM schema_revisions ORDER BY revision"
                    )
                )
            ).all()
    finally:
        await store.close()
    assert [tuple(r) for r in rows][:4] == [
        ("0001", None, False),
        ("0002", "0001", False),
        ("0003", "0002", False),
        ("0004", "0003", True),
    ]
