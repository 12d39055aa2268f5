"""Settings for several replicas: shared secrets, ``*_FILE`` variants, SIGNOFF_AUTO_MIGRATE.

The command line runs as a real subprocess, so exit codes and messages are the ones an
operator sees.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from cluster import Cluster
from pgtest import fresh_database

from bot.settings import load_settings, require_shared_settings
from runtime import ConfigurationError

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.upper().startswith("SIGNOFF_") and name != "SIGNOFF_TEST_POSTGRES_URL":
            monkeypatch.delenv(name)


def signoff(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.upper().startswith("SIGNOFF_")}
    base.update({"PYTHONPATH": str(ROOT), **env})
    return subprocess.run(
        [sys.executable, "-m", "bot", *args],
        cwd=ROOT,
        env=base,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


# --- *_FILE ----------------------------------------------------------------------------------


def test_secrets_are_read_from_files(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    token = tmp_path / "operator_token"
    token.write_text("a-token-from-a-secret-file\n")
    tokens = tmp_path / "api_tokens.json"
    tokens.write_text('[{"token": "alice-token-0123456789", "actor": "U1"}]')
    monkeypatch.setenv("SIGNOFF_OPERATOR_TOKEN_FILE", str(token))
    monkeypatch.setenv("SIGNOFF_API_TOKENS_FILE", str(tokens))
    settings = load_settings()
    assert settings.operator_token is not None
    assert settings.operator_token.get_secret_value() == "a-token-from-a-secret-file"
    assert [t.actor for t in settings.api_tokens] == ["U1"]


def test_a_value_and_its_file_together_are_refused(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    secret = tmp_path / "cookie"
    secret.write_text("x" * 40)
    monkeypatch.setenv("SIGNOFF_COOKIE_SECRET", "y" * 40)
    monkeypatch.setenv("SIGNOFF_COOKIE_SECRET_FILE", str(secret))
    with pytest.raises(ConfigurationError, match="SIGNOFF_COOKIE_SECRET_FILE: set either"):
        load_settings()


def test_file_problems_name_the_file_variable(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("SIGNOFF_OPERATOR_TOKEN_FILE", str(tmp_path / "missing"))
    with pytest.raises(ConfigurationError, match="SIGNOFF_OPERATOR_TOKEN_FILE: cannot read"):
        load_settings()
    short = tmp_path / "short"
    short.write_text("short\n")
    monkeypatch.setenv("SIGNOFF_OPERATOR_TOKEN_FILE", str(short))
    with pytest.raises(ConfigurationError, match=r"^SIGNOFF_OPERATOR_TOKEN_FILE: "):
        load_settings()
    bad = tmp_path / "hooks.json"
    bad.write_text("{not json")
    monkeypatch.delenv("SIGNOFF_OPERATOR_TOKEN_FILE")
    monkeypatch.setenv("SIGNOFF_HOOKS_FILE", str(bad))
    with pytest.raises(ConfigurationError, match="SIGNOFF_HOOKS_FILE: the file is not valid JSON"):
        load_settings()


# --- shared settings --------------------------------------------------------------------------


def test_sqlite_needs_no_shared_secrets() -> None:
    require_shared_settings(load_settings(overrides={"database_url": "sqlite:///x.db"}))


@pytest.mark.parametrize(
    ("given", "missing"),
    [
        ({}, "SIGNOFF_COOKIE_SECRET"),
        ({"cookie_secret": "c" * 32}, "SIGNOFF_OPERATOR_TOKEN"),
    ],
)
def test_postgres_needs_the_shared_secrets(given: dict[str, str], missing: str) -> None:
    settings = load_settings(
        overrides={"database_url": "postgresql+asyncpg://u@127.0.0.1/db", **given}
    )
    with pytest.raises(ConfigurationError, match=f"^{missing}: required when"):
        require_shared_settings(settings)


def test_serve_on_postgres_without_the_secrets_stops_with_exit_3() -> None:
    done = signoff(
        "serve",
        SIGNOFF_DATABASE_URL="postgresql+asyncpg://nobody@127.0.0.1:1/none",
        SIGNOFF_OPERATOR_TOKEN="operator-token-0123456789",
    )
    assert done.returncode == 3, done.stderr
    [line] = done.stderr.strip().splitlines()
    assert "SIGNOFF_COOKIE_SECRET: required when SIGNOFF_DATABASE_URL is not SQLite" in line


# --- SIGNOFF_AUTO_MIGRATE ----------------------------------------------------------------------


async def test_without_auto_migrate_commands_need_a_migrated_database() -> None:
    async with fresh_database(migrated=False) as url:
        env = {"SIGNOFF_DATABASE_URL": url, "SIGNOFF_AUTO_MIGRATE": "false"}
        refused = signoff("tickets", **env)
        assert refused.returncode == 10, refused.stderr
        assert "no schema" in refused.stderr and "signoff migrate" in refused.stderr
        migrated = signoff("migrate", **env)
        assert migrated.returncode == 0, migrated.stderr
        assert "migrated" in migrated.stdout
        assert signoff("tickets", **env).returncode == 0
        again = signoff("migrate", **env)
        assert "already at the newest schema" in again.stdout


# --- readiness during a rolling upgrade --------------------------------------------------------


async def test_readiness_accepts_a_newer_backward_compatible_schema(cluster: Cluster) -> None:
    [replica] = await cluster.start(1)
    async with aiohttp.ClientSession() as http:

        async def ready() -> tuple[int, Any]:
            async with http.get(f"{replica.url}/readyz") as answer:
                return answer.status, await answer.json()

        status, body = await ready()
        assert status == 200, body
        head = body["schema"]["code_revision"]
        assert body["schema"] == {"revision": head, "code_revision": head, "state": "current"}
        # A newer version migrated the database with an expand-only migration.
        await cluster.query(
            "INSERT INTO schema_revisions VALUES ('9000_expand', $1, true, 0)", head
        )
        await cluster.query("UPDATE alembic_version SET version_num = '9000_expand'")
        status, body = await ready()
        assert status == 200, body
        assert body["schema"]["revision"] == "9000_expand"
        assert body["schema"]["state"] == "newer_compatible"
        # Then one that drops what this version still uses.
        await cluster.query(
            "INSERT INTO schema_revisions VALUES ('9001_contract', '9000_expand', false, 0)"
        )
        await cluster.query("UPDATE alembic_version SET version_num = '9001_contract'")
        status, body = await ready()
        assert status == 503, body
        assert body["schema"]["state"] == "newer_incompatible"
        assert "not backward-compatible" in body["problems"][0]
