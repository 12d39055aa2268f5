"""`make run` and `make cli`, as a newcomer types them: what they install, that the
command line sees the same agents as the server, and that the demo's second sign-in
finishes the four-eyes deploys example. The real Makefile runs against this test's
virtual environment (``-o`` keeps make from installing anything) and a SQLite file in
a temporary directory."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp import ClientSession

from tests.e2e.test_cli import REPO

pytestmark = [
    pytest.mark.timeout(180),
    pytest.mark.skipif(shutil.which("make") is None, reason="needs make"),
]

VENV = Path(sys.prefix)
OPERATOR = "operator-token-0123456789"


def _make(tmp_path: Path, *args: str) -> list[str]:
    """`make` in the checkout, on this test's venv, without installing anything."""
    return [
        "make",
        "-s",
        f"VENV={VENV}",
        f"DEMO_TOKENS={tmp_path / 'demo-tokens.json'}",
        "-o",
        str(VENV / ".signoff-run-installed"),
        *args,
    ]


def _environment(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SIGNOFF_", "MAKE"))}
    env.update(SIGNOFF_DATABASE_URL=f"sqlite+aiosqlite:///{tmp_path / 'signoff.db'}")
    return env


def test_make_run_installs_only_what_running_needs(tmp_path: Path) -> None:
    def planned(target: str) -> str:
        venv = f"VENV={tmp_path / 'venv'}"
        done = subprocess.run(
            ["make", "-n", venv, f"DEMO_TOKENS={tmp_path / 't.json'}", target],
            cwd=REPO,
            env=_environment(tmp_path),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    run = planned("run")
    assert "pip install --quiet -e '.[mcp]'" in run
    assert "[dev]" not in run
    assert "pip install --quiet -e '.[dev]'" in planned("test")


def test_make_cli_sees_the_agents_of_make_run(tmp_path: Path) -> None:
    done = subprocess.run(
        _make(tmp_path, "cli", "ARGS=agents"),
        cwd=REPO,
        env=_environment(tmp_path),
        capture_output=True,
        text=True,
        timeout=120,
    )

    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("4 agents from examples:demo_agents and examples/mcp/agents.toml")
    assert "\ninfra (version" in done.stdout


async def test_the_release_manager_of_make_run_finishes_the_deploys_example(
    tmp_path: Path,
) -> None:
    env = {**_environment(tmp_path), "SIGNOFF_PORT": "0", "SIGNOFF_OPERATOR_TOKEN": OPERATOR}
    make = _start(_make(tmp_path, "run"), env)
    try:
        printed = await asyncio.wait_for(asyncio.to_thread(_until_serving, make), 60)
        url = printed[-1].removeprefix("signoff serving at ").strip()
        [manager] = [line.rsplit(": ", 1)[1] for line in printed if "four-eyes deploy:" in line]
        async with ClientSession() as session:

            async def call(token: str, method: str, path: str, body: Any = None) -> Any:
                headers = {"Authorization": f"Bearer {token}"}
                async with session.request(
                    method, url + path, json=body, headers=headers
                ) as response:
                    return response.status, await response.json()

            async def parked(run_id: str, tool: str) -> dict[str, Any] | None:
                _, run = await call(OPERATOR, "GET", f"/api/runs/{run_id}")
                pending = [p for p in run["pending"] if p["tool"] == tool]
                return pending[0] if run["status"] == "awaiting" and pending else None

            status, started = await call(
                OPERATOR,
                "POST",
                "/api/runs",
                {"agent": "deploys", "input": "deploy checkout 2.4.1"},
            )
            assert status == 202, started
            run_id = started["run_id"]
            plan = await until(lambda: parked(run_id, "rollback_plan"), "the rollback plan")
            answer = {"previous_version": "2.4.0", "strategy": "redeploy_previous"}
            status, _ = await call(
                OPERATOR, "POST", f"/api/tickets/{plan['ticket_id']}/decision", {"answer": answer}
            )
            assert status == 200
            deploy = await until(lambda: parked(run_id, "deploy"), "the deploy")

            # Four-eyes: the operator asked, so the operator may not approve ...
            allow = {"decision": "allow"}
            path = f"/api/tickets/{deploy['ticket_id']}/decision"
            status, refused = await call(OPERATOR, "POST", path, allow)
            assert status == 403, refused
            # ... and the release manager of `make run` may.
            status, decided = await call(manager, "POST", path, allow)
            assert status == 200, decided

            async def done() -> dict[str, Any] | None:
                _, run = await call(OPERATOR, "GET", f"/api/runs/{run_id}")
                return run if run["status"] == "done" else None

            finished = await until(done, "the deploy done", seconds=60)
            assert finished["text"].endswith("approved by demo:release-manager.")
    finally:
        os.killpg(make.pid, signal.SIGTERM)
        await asyncio.to_thread(make.wait, 60)
        assert make.stdout is not None
        make.stdout.close()


async def until(
    check: Callable[[], Awaitable[dict[str, Any] | None]], what: str, seconds: float = 30.0
) -> dict[str, Any]:
    """Ask `check` until it finds something; the server answers every time."""
    deadline = time.monotonic() + seconds
    while (found := await check()) is None:
        if time.monotonic() > deadline:
            raise AssertionError(f"never saw {what}")
        await asyncio.sleep(0.05)
    return found


def _start(command: list[str], env: dict[str, str]) -> subprocess.Popen[str]:
    """`command` in a session of its own, so that the server under make stops with it."""
    return subprocess.Popen(
        command,
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    )


def _until_serving(make: subprocess.Popen[str]) -> list[str]:
    assert make.stdout is not None
    lines = []
    for line in make.stdout:
        lines.append(line.rstrip("\n"))
        if line.startswith("signoff serving at "):
            return lines
    raise AssertionError(f"make run did not serve: {lines}")
