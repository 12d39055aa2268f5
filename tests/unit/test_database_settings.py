"""The PostgreSQL connection settings: defaults, checks, and what `open_store` makes of them."""

from __future__ import annotations

import os

import pytest
from sqlalchemy.pool import QueuePool

from bot.settings import load_settings
from bot.wiring import open_store
from runtime import ConfigurationError
from runtime.store.sql import SQLStore

POSTGRES = "postgresql+asyncpg://signoff:s3cret@db.example.com:5432/signoff"
DIRECT = "postgresql+asyncpg://signoff:s3cret@db-direct.example.com:5432/signoff"


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.upper().startswith("SIGNOFF_"):
            monkeypatch.delenv(name)


def test_defaults() -> None:
    settings = load_settings()

    assert settings.database_pool_size == 15
    assert settings.database_max_overflow == 0
    assert settings.database_pool_timeout_seconds == 30
    assert settings.database_pool_recycle_seconds == 1800
    assert settings.database_pooler == "none"
    assert settings.database_listen_url is None


def test_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SIGNOFF_DATABASE_URL", POSTGRES)
    monkeypatch.setenv("SIGNOFF_DATABASE_POOL_SIZE", "7")
    monkeypatch.setenv("SIGNOFF_DATABASE_MAX_OVERFLOW", "0")
    monkeypatch.setenv("SIGNOFF_DATABASE_POOL_TIMEOUT_SECONDS", "2.5")
    monkeypatch.setenv("SIGNOFF_DATABASE_POOL_RECYCLE_SECONDS", "0")
    monkeypatch.setenv("SIGNOFF_DATABASE_POOLER", "Transaction")
    monkeypatch.setenv("SIGNOFF_DATABASE_LISTEN_URL", DIRECT)

    settings = load_settings()

    assert settings.database_pool_size == 7
    assert settings.database_max_overflow == 0
    assert settings.database_pool_timeout_seconds == 2.5
    assert settings.database_pool_recycle_seconds == 0
    assert settings.database_pooler == "transaction"
    assert settings.database_listen_url == DIRECT


async def test_open_store_sizes_the_pool_as_told() -> None:
    # No connection is opened: the engine only connects when first used.
    settings = load_settings(
        overrides={
            "database_url": POSTGRES,
            "database_pool_size": 3,
            "database_pool_timeout_seconds": 4,
            "database_pooler": "transaction",
            "database_listen_url": DIRECT,
        }
    )
    store = open_store(settings)
    try:
        assert queue_pool(store).size() == 3
        assert queue_pool(store).timeout() == 4
    finally:
        await store.close()


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        ("SIGNOFF_DATABASE_POOL_SIZE", "0", "SIGNOFF_DATABASE_POOL_SIZE: Input should be greater"),
        ("SIGNOFF_DATABASE_POOL_SIZE", "many", "SIGNOFF_DATABASE_POOL_SIZE: Input should be a"),
        ("SIGNOFF_DATABASE_MAX_OVERFLOW", "-1", "SIGNOFF_DATABASE_MAX_OVERFLOW: Input should be"),
        ("SIGNOFF_DATABASE_POOL_TIMEOUT_SECONDS", "0", "SIGNOFF_DATABASE_POOL_TIMEOUT_SECONDS:"),
        ("SIGNOFF_DATABASE_POOL_RECYCLE_SECONDS", "-5", "SIGNOFF_DATABASE_POOL_RECYCLE_SECONDS:"),
        ("SIGNOFF_DATABASE_POOLER", "session", "SIGNOFF_DATABASE_POOLER: Input should be 'none'"),
        (
            "SIGNOFF_DATABASE_POOLER",
            "transaction",
            "SIGNOFF_DATABASE_LISTEN_URL: required with SIGNOFF_DATABASE_POOLER=transaction",
        ),
        (
            "SIGNOFF_DATABASE_LISTEN_URL",
            "mysql://u:s3cret@h/db",
            "SIGNOFF_DATABASE_LISTEN_URL: expected a PostgreSQL URL",
        ),
        (
            "SIGNOFF_DATABASE_LISTEN_URL",
            "postgresql://u:s3cret@h:port/db",
            "SIGNOFF_DATABASE_LISTEN_URL: not a database URL",
        ),
    ],
)
def test_bad_values_are_refused_by_name(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str, message: str
) -> None:
    monkeypatch.setenv("SIGNOFF_DATABASE_URL", POSTGRES)
    monkeypatch.setenv(variable, value)

    with pytest.raises(ConfigurationError) as raised:
        load_settings()

    assert message in str(raised.value)
    assert "s3cret" not in str(raised.value)


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        ("SIGNOFF_DATABASE_POOLER", "transaction", "in front of PostgreSQL, not SQLite"),
        ("SIGNOFF_DATABASE_LISTEN_URL", DIRECT, "only for PostgreSQL"),
    ],
)
def test_postgres_settings_are_refused_on_sqlite(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str, message: str
) -> None:
    monkeypatch.setenv(variable, value)

    with pytest.raises(ConfigurationError, match=message):
        load_settings()


def test_the_listen_url_may_come_from_a_file(
    monkeypatch: pytest.MonkeyPatch, tmp_path: os.PathLike[str]
) -> None:
    secret = os.path.join(tmp_path, "listen_url")
    with open(secret, "w", encoding="utf-8") as handle:
        handle.write(DIRECT + "\n")
    monkeypatch.setenv("SIGNOFF_DATABASE_URL", POSTGRES)
    monkeypatch.setenv("SIGNOFF_DATABASE_LISTEN_URL_FILE", secret)

    assert load_settings().database_listen_url == DIRECT


def queue_pool(store: SQLStore) -> QueuePool:
    """The pool of the store's transactions."""
    pool = store.engine.pool
    assert isinstance(pool, QueuePool), pool
    return pool
