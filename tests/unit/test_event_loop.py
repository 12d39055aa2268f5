"""`SIGNOFF_EVENT_LOOP`: which event loop `signoff serve` runs on."""

from __future__ import annotations

import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from bot import event_loop
from bot.settings import load_settings
from runtime import ConfigurationError

ROOT = Path(__file__).resolve().parents[2]


async def _loop_kind() -> str:
    return event_loop.running_name()


@pytest.mark.parametrize(
    ("choice", "kind"), [("auto", "uvloop"), ("uvloop", "uvloop"), ("asyncio", "asyncio")]
)
def test_each_choice_runs_on_its_loop(choice: event_loop.EventLoopChoice, kind: str) -> None:
    # uvloop is a dependency on this platform, so `auto` finds it.
    assert event_loop.run(_loop_kind(), choice) == kind


def test_without_uvloop_auto_falls_back_and_uvloop_is_a_configuration_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "uvloop", None)  # `import uvloop` now fails
    assert event_loop.run(_loop_kind(), "auto") == "asyncio"
    coro = _loop_kind()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a coroutine left unawaited would warn
        with pytest.raises(ConfigurationError, match="uvloop is not installed"):
            event_loop.run(coro, "uvloop")
    assert coro.cr_frame is None  # closed, not left pending


def test_the_setting_takes_the_three_names_only(monkeypatch: pytest.MonkeyPatch) -> None:
    assert load_settings().event_loop == "auto"
    monkeypatch.setenv("SIGNOFF_EVENT_LOOP", "asyncio")
    assert load_settings().event_loop == "asyncio"
    monkeypatch.setenv("SIGNOFF_EVENT_LOOP", "tokio")
    with pytest.raises(ConfigurationError, match="SIGNOFF_EVENT_LOOP"):
        load_settings()


def test_serve_asked_for_a_missing_uvloop_exits_3_before_serving(tmp_path: Path) -> None:
    script = (
        "import sys; sys.modules['uvloop'] = None; sys.argv = ['signoff', 'serve'];"
        "from bot.__main__ import main; main()"
    )
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
        "SIGNOFF_EVENT_LOOP": "uvloop",
        "SIGNOFF_PORT": "0",
        "SIGNOFF_DATABASE_URL": f"sqlite:///{tmp_path / 'signoff.db'}",
    }
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 3, done.stderr
    assert "uvloop is not installed" in done.stderr
    assert "signoff serving at" not in done.stdout
    assert not (tmp_path / "signoff.db").exists()  # nothing was opened
