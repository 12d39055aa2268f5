"""A web process and a worker process of `signoff serve` on one SQLite file: a run started
through the web process's API is driven by the worker, parks, and a decision posted to
the web process resumes it on the worker."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "roles-e2e-operator-token-0123456789"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


class Process:
    """One `signoff serve` subprocess; its stderr goes to a file."""

    def __init__(self, env: dict[str, str], args: list[str], stderr: Path) -> None:
        self.url = ""
        self.printed: list[str] = []
        self.stderr = stderr
        with stderr.open("w") as err:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "bot", "serve", *args],
                cwd=ROOT,
                env=env,
                stdout=subprocess.PIPE,
                stderr=err,
                text=True,
            )

    @classmethod
    async def start(cls, env: dict[str, str], args: list[str], stderr: Path) -> Process:
        """Start it and wait until it printed its address and what it serves."""
        started = cls(env, args, stderr)
        try:
            await asyncio.wait_for(asyncio.to_thread(started._read_head), timeout=60)
        except BaseException:
            started.process.kill()
            started.process.wait(timeout=10)
            raise
        return started

    def _read_head(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.printed.append(line.rstrip("\n"))
            if line.startswith("signoff serving at "):
                self.url = line.split("signoff serving at ", 1)[1].strip()
            elif self.url and line.startswith("  role: "):
                return
        raise AssertionError(f"signoff serve did not start: {self.stderr.read_text()[-3000:]}")

    async def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        code = await asyncio.to_thread(self.process.wait, 30)
        if self.process.stdout is not None:
            self.process.stdout.close()
        assert code == 0, self.stderr.read_text()[-3000:]


def environment(tmp_path: Path) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("SIGNOFF_") and "PROXY" not in k.upper()
    }
    env.update(
        {
            "PYTHONPATH": str(ROOT),
            "SIGNOFF_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path / 'signoff.db'}",
            "SIGNOFF_APP": "tests.e2e.serve_app:agents",
            "SIGNOFF_PORT": "0",
            "SIGNOFF_OPERATOR_TOKEN": TOKEN,
            "SIGNOFF_COOKIE_SECRET": "roles-e2e-cookie-secret-0123456789abcdef",
            "SIGNOFF_POLL_SECONDS": "0.1",  # SQLite: workers find other processes' work by polling
            "SIGNOFF_SHUTDOWN_GRACE_SECONDS": "2",
            "SIGNOFF_LOG_LEVEL": "WARNING",
            "SIGNOFF_TEST_LEDGER": str(tmp_path / "ledger.jsonl"),
        }
    )
    return env


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(headers=AUTH) as session:
        yield session


async def call(
    http: aiohttp.ClientSession, method: str, url: str, body: Any = None
) -> tuple[int, Any]:
    async with http.request(method, url, json=body) as answer:
        text = await answer.text()
        try:
            return answer.status, json.loads(text)
        except ValueError:
            return answer.status, text


async def until_status(
    http: aiohttp.ClientSession, url: str, run_id: str, wanted: str
) -> dict[str, Any]:
    """Read the run until it reaches `wanted` (the worker's commit is the signal)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 30
    while True:
        status, body = await call(http, "GET", f"{url}/api/runs/{run_id}")
        assert status == 200, body
        if body["status"] == wanted:
            return dict(body)
        assert loop.time() < deadline, f"run {run_id} never became {wanted}: {body}"
        await asyncio.sleep(0.05)


async def test_a_run_started_on_the_web_process_is_driven_by_the_worker(
    tmp_path: Path, http: aiohttp.ClientSession
) -> None:
    env = environment(tmp_path)
    # The web process migrates the file first; the worker's option wins over the setting.
    web = await Process.start(env, ["--role", "web"], tmp_path / "web.log")
    worker = None
    try:
        worker = await Process.start(
            {**env, "SIGNOFF_ROLE": "web"}, ["--role", "worker"], tmp_path / "worker.log"
        )
        assert any(line.startswith("  console: ") for line in web.printed)
        assert not any(line.startswith("  console: ") for line in worker.printed)
        warned = web.stderr.read_text()
        assert "SIGNOFF_ROLE=web drives no runs" in warned
        assert "--role worker" in warned
        assert "drives no runs" not in worker.stderr.read_text()

        for process, role in ((web, "web"), (worker, "worker")):
            status, ready = await call(http, "GET", f"{process.url}/readyz")
            assert (status, ready["status"], ready["role"]) == (200, "ready", role)
        # The worker serves no console, API, approvals API or webhook.
        for method, path in (
            ("GET", "/"),
            ("GET", "/login"),
            ("GET", "/runs"),
            ("GET", "/api/runs"),
            ("POST", "/api/runs"),
            ("GET", "/api/approvals"),
            ("POST", "/hooks/payments"),
        ):
            status, _ = await call(http, method, f"{worker.url}{path}", {})
            assert status in (404, 405), (method, path, status)
        status, _ = await call(http, "GET", f"{worker.url}/metrics")
        assert status == 200

        status, started = await call(
            http, "POST", f"{web.url}/api/runs", {"agent": "payments", "input": "pay ACC-1"}
        )
        assert status == 202, started
        assert started["status"] == "queued"  # the web process drives nothing
        run_id = started["run_id"]
        parked = await until_status(http, web.url, run_id, "awaiting")
        ticket_id = parked["pending"][0]["ticket_id"]
        status, decided = await call(
            http,
            "POST",
            f"{web.url}/api/tickets/{ticket_id}/decision",
            {"decision": "allow"},
        )
        assert status == 200, decided
        done = await until_status(http, web.url, run_id, "done")
        assert done["text"] == "Transfer complete."

        ledger = (tmp_path / "ledger.jsonl").read_text().splitlines()
        assert len(ledger) == 1
        status, events = await call(http, "GET", f"{web.url}/api/runs/{run_id}/events")
        assert status == 200, events
        claims = [e for e in events["events"] if e["kind"] == "run_claimed"]
        assert len(claims) == 2
        for claim in claims:  # both drives, before and after the decision, on the worker
            assert claim["data"]["worker"].endswith(f":{worker.process.pid}"), claim
    finally:
        if worker is not None:
            await worker.stop()
        await web.stop()


@pytest.mark.parametrize("role", ["web", "worker"])
def test_a_split_role_on_an_in_memory_database_stops_the_start(tmp_path: Path, role: str) -> None:
    env = {**environment(tmp_path), "SIGNOFF_DATABASE_URL": "sqlite+aiosqlite://"}
    done = subprocess.run(
        [sys.executable, "-m", "bot", "serve", "--role", role],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 3, done.stderr
    assert f"SIGNOFF_ROLE={role}: an in-memory database" in done.stderr
    assert "signoff serving" not in done.stdout
