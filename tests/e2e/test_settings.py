"""Settings: defaults, SIGNOFF_* variables, the TOML file, precedence, and clear errors.

Also `bot.wiring.load_agents`, which turns ``SIGNOFF_APP`` into agents.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from bot.settings import DEFAULT_DATABASE_URL, Settings, load_settings
from bot.wiring import load_agents
from runtime import Agent, ConfigurationError


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.upper().startswith("SIGNOFF_"):
            monkeypatch.delenv(name)


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


# --- values ---------------------------------------------------------------------------------


def test_defaults() -> None:
    settings = load_settings()

    assert settings.database_url == DEFAULT_DATABASE_URL == "sqlite+aiosqlite:///signoff.db"
    assert settings.app == "examples:demo_agents"
    assert settings.sqlite_busy_timeout_ms == 750
    assert settings.sqlite_synchronous == "full"
    assert settings.lease_seconds == 30
    assert settings.bind_host == "127.0.0.1"
    assert settings.port == 8080
    assert settings.log_level == "WARNING"


def test_environment_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SIGNOFF_DATABASE_URL", "sqlite+aiosqlite:////var/lib/signoff/s.db")
    monkeypatch.setenv("SIGNOFF_APP", "myapp.agents:build")
    monkeypatch.setenv("SIGNOFF_SQLITE_BUSY_TIMEOUT_MS", "1200")
    monkeypatch.setenv("SIGNOFF_SQLITE_SYNCHRONOUS", "NORMAL")
    monkeypatch.setenv("SIGNOFF_LEASE_SECONDS", "2.5")
    monkeypatch.setenv("SIGNOFF_BIND_HOST", "0.0.0.0")
    monkeypatch.setenv("SIGNOFF_PORT", "0")
    monkeypatch.setenv("signoff_log_level", "debug")

    settings = load_settings()

    assert settings.database_url == "sqlite+aiosqlite:////var/lib/signoff/s.db"
    assert settings.app == "myapp.agents:build"
    assert settings.sqlite_busy_timeout_ms == 1200
    assert settings.sqlite_synchronous == "normal"
    assert settings.lease_seconds == 2.5
    assert settings.bind_host == "0.0.0.0"
    assert settings.port == 0
    assert settings.log_level == "DEBUG"


def test_toml_file(tmp_path: Path) -> None:
    config = write(
        tmp_path / "signoff.toml",
        'database_url = "sqlite+aiosqlite:///from-file.db"\nport = 9000\n'
        'SIGNOFF_LOG_LEVEL = "info"\nsqlite_synchronous = "normal"\n',
    )

    settings = load_settings(config)

    assert settings.database_url == "sqlite+aiosqlite:///from-file.db"
    assert settings.port == 9000
    assert settings.log_level == "INFO"
    assert settings.sqlite_synchronous == "normal"
    assert settings.app == "examples:demo_agents"  # untouched values keep their default


def test_toml_file_may_use_a_signoff_table(tmp_path: Path) -> None:
    config = write(tmp_path / "shared.toml", "[signoff]\nport = 9100\n\n[other_tool]\nx = 1\n")

    assert load_settings(config).port == 9100


def test_environment_beats_the_file_and_code_beats_both(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = write(
        tmp_path / "signoff.toml",
        'port = 9000\nbind_host = "10.0.0.1"\ndatabase_url = "sqlite+aiosqlite:///file.db"\n',
    )
    monkeypatch.setenv("SIGNOFF_PORT", "9001")
    monkeypatch.setenv("SIGNOFF_DATABASE_URL", "sqlite+aiosqlite:///env.db")

    settings = load_settings(config, overrides={"database_url": "sqlite+aiosqlite:///cli.db"})

    assert settings.port == 9001  # environment over file
    assert settings.bind_host == "10.0.0.1"  # file over default
    assert settings.database_url == "sqlite+aiosqlite:///cli.db"  # code over environment
    assert load_settings(config, overrides={"database_url": None}).database_url.endswith("env.db")


def test_settings_class_reads_the_environment_directly(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SIGNOFF_PORT", "8181")

    assert Settings().port == 8181
    assert Settings(port=1234).port == 1234


# --- errors ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("SIGNOFF_PORT", "eighty", "SIGNOFF_PORT: Input should be a valid integer"),
        ("SIGNOFF_PORT", "70000", "SIGNOFF_PORT: Input should be less than or equal to 65535"),
        ("SIGNOFF_PORT", "-1", "SIGNOFF_PORT: Input should be greater than or equal to 0"),
        ("SIGNOFF_SQLITE_SYNCHRONOUS", "off", "SIGNOFF_SQLITE_SYNCHRONOUS: Input should be"),
        ("SIGNOFF_SQLITE_BUSY_TIMEOUT_MS", "-5", "SIGNOFF_SQLITE_BUSY_TIMEOUT_MS: Input should"),
        ("SIGNOFF_LEASE_SECONDS", "0", "SIGNOFF_LEASE_SECONDS: Input should be greater than 0"),
        ("SIGNOFF_LOG_LEVEL", "loud", "SIGNOFF_LOG_LEVEL: Input should be"),
        ("SIGNOFF_APP", "examples", "SIGNOFF_APP: expected package.module:attr"),
        ("SIGNOFF_DATABASE_URL", "signoff.db", "SIGNOFF_DATABASE_URL: expected a database URL"),
    ],
)
def test_invalid_environment_values_name_the_setting(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str, message: str
) -> None:
    monkeypatch.setenv(name, value)

    with pytest.raises(ConfigurationError) as raised:
        load_settings()

    assert str(raised.value).startswith(message)
    assert "\n" not in str(raised.value)


def test_every_invalid_setting_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SIGNOFF_PORT", "x")
    monkeypatch.setenv("SIGNOFF_LEASE_SECONDS", "y")

    with pytest.raises(ConfigurationError, match=r"SIGNOFF_LEASE_SECONDS: .*SIGNOFF_PORT: "):
        load_settings()


def test_a_database_url_is_never_echoed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SIGNOFF_DATABASE_URL", "user:hunter2@db/signoff")

    with pytest.raises(ConfigurationError) as raised:
        load_settings()

    assert "SIGNOFF_DATABASE_URL" in str(raised.value)
    assert "hunter2" not in str(raised.value)


def test_invalid_file_values_name_the_file(tmp_path: Path) -> None:
    config = write(tmp_path / "signoff.toml", 'port = "eighty"\n')

    with pytest.raises(ConfigurationError) as raised:
        load_settings(config)

    assert str(raised.value).startswith(f"port in {config}: Input should be a valid integer")


def test_a_bad_file_value_overridden_by_the_environment_is_fine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = write(tmp_path / "signoff.toml", 'port = "eighty"\n')
    monkeypatch.setenv("SIGNOFF_PORT", "8082")

    assert load_settings(config).port == 8082


def test_override_errors_use_the_given_name() -> None:
    with pytest.raises(ConfigurationError, match=r"^--database-url: expected a database URL"):
        load_settings(
            overrides={"database_url": "nope"}, override_names={"database_url": "--database-url"}
        )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("prot = 8080\n", "unknown setting 'prot'"),
        ("port = \n", "is not valid TOML"),
    ],
)
def test_broken_files(tmp_path: Path, text: str, message: str) -> None:
    config = write(tmp_path / "signoff.toml", text)

    with pytest.raises(ConfigurationError, match=message):
        load_settings(config)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="does not exist"):
        load_settings(tmp_path / "nope.toml")


# --- SIGNOFF_APP --------------------------------------------------------------------------------


def test_default_app_loads_the_examples() -> None:
    agents = load_agents(load_settings())

    assert [a.name for a in agents] == ["refunds", "deploys", "oncall"]
    assert all(isinstance(a, Agent) for a in agents)


@pytest.fixture
def app_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A module in the working directory, importable as ``SIGNOFF_APP`` names it."""
    write(
        tmp_path / "my_signoff_app.py",
        "from examples import refunds\n"
        "AGENTS = [refunds.build_agent()]\n"
        "ONE = refunds.build_agent()\n"
        "TWICE = (refunds.build_agent(), refunds.build_agent())\n"
        "NOT_AGENTS = ['refunds']\n"
        "EMPTY = []\n"
        "def build():\n    return (refunds.build_agent(),)\n"
        "def needs_args(x):\n    return []\n"
        "def broken():\n    raise RuntimeError('no API key')\n",
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.delitem(sys.modules, "my_signoff_app", raising=False)
    monkeypatch.setattr(sys, "path", list(sys.path))
    return "my_signoff_app"


@pytest.mark.parametrize("attr", ["AGENTS", "ONE", "build"])
def test_app_may_be_a_list_an_agent_or_a_callable(app_module: str, attr: str) -> None:
    agents = load_agents(Settings(app=f"{app_module}:{attr}"))

    assert [a.name for a in agents] == ["refunds"]


@pytest.mark.parametrize(
    ("app", "message"),
    [
        ("no_such_module_xyz:agents", "cannot import module 'no_such_module_xyz'"),
        ("my_signoff_app:MISSING", "has no attribute 'MISSING'"),
        ("my_signoff_app:NOT_AGENTS", "item 0 is a str, not a runtime.Agent"),
        ("my_signoff_app:EMPTY", "gave no agents"),
        ("my_signoff_app:TWICE", "two agents are named 'refunds'"),
        ("my_signoff_app:needs_args", "it must take no arguments"),
        ("my_signoff_app:broken", "RuntimeError: no API key"),
        ("examples.refunds:ORDERS", "expected a list or tuple of runtime.Agent"),
    ],
)
def test_bad_app_paths(app_module: str, app: str, message: str) -> None:
    with pytest.raises(ConfigurationError) as raised:
        load_agents(Settings(app=app))

    assert str(raised.value).startswith(f"SIGNOFF_APP={app}: ")
    assert message in str(raised.value)
