"""Where `signoff serve` gets the console's sign-in token and cookie key from: the
settings, the kept file next to a SQLite database, or (in memory) the process alone."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from bot.console_secrets import console_secrets, kept_path
from bot.settings import Settings
from runtime import ConfigurationError


@pytest.fixture(autouse=True)
def no_signoff_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.upper().startswith("SIGNOFF_"):
            monkeypatch.delenv(name)


def settings(url: str, **extra: str) -> Settings:
    return Settings(database_url=url, **extra)


def test_kept_once_and_read_back_with_owner_only_permissions(tmp_path: Path) -> None:
    given = settings(f"sqlite+aiosqlite:///{tmp_path / 'signoff.db'}")
    first = console_secrets(given)
    assert first.token_origin == "made" and first.path == tmp_path / "signoff.db-console.json"
    assert stat.S_IMODE(os.stat(tmp_path / "signoff.db-console.json").st_mode) == 0o600
    again = console_secrets(given)
    assert again.token_origin == "kept"
    assert (again.operator_token, again.cookie_secret) == (
        first.operator_token,
        first.cookie_secret,
    )
    assert len(first.operator_token) >= 16 and len(first.cookie_secret) >= 32
    assert [p.name for p in tmp_path.iterdir()] == ["signoff.db-console.json"]  # no leftovers


def test_configured_values_win(tmp_path: Path) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'signoff.db'}"
    kept = console_secrets(settings(url))
    token = "configured-token-0123456789"
    both = console_secrets(settings(url, operator_token=token, cookie_secret="k" * 40))
    assert (both.operator_token, both.cookie_secret, both.token_origin) == (
        token,
        b"k" * 40,
        "configured",
    )
    only_token = console_secrets(settings(url, operator_token=token))
    assert only_token.operator_token == token and only_token.cookie_secret == kept.cookie_secret


def test_an_in_memory_database_keeps_nothing() -> None:
    given = settings("sqlite+aiosqlite:///:memory:")
    assert kept_path(given) is None
    one, two = console_secrets(given), console_secrets(given)
    assert one.token_origin == "process" and one.path is None
    assert one.operator_token != two.operator_token


def test_a_foreign_file_is_refused_and_left_alone(tmp_path: Path) -> None:
    kept = tmp_path / "signoff.db-console.json"
    kept.write_text('{"operator_token": "short"}')
    with pytest.raises(ConfigurationError, match="is not the console's kept sign-in token"):
        console_secrets(settings(f"sqlite+aiosqlite:///{tmp_path / 'signoff.db'}"))
    assert kept.read_text() == '{"operator_token": "short"}'


def test_an_unwritable_data_directory_is_a_clear_error(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere" / "signoff.db"
    with pytest.raises(ConfigurationError, match="cannot keep the console's sign-in token"):
        console_secrets(settings(f"sqlite+aiosqlite:///{missing}"))
