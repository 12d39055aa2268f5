"""`signoff serve` as a real process: park via a webhook, SIGKILL, restart, decide, finish."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib import request as urlrequest
from urllib.error import HTTPError

import pytest

from adapters.webhook.signing import sign

ROOT = Path(__file__).resolve().parents[2]
SECRET = "hook-secret-for-tests"
TOKEN = "api-token-for-tests"


class Server:
    """One `signoff serve` subprocess and a tiny HTTP client for it."""

    def __init__(self, env: dict[str, str]) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "bot", "serve"],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.url = self._read_url()

    def _read_url(self) -> str:
        assert self.process.stdout is not None
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            line = self.process.stdout.readline()
            if not line:
                break
            if line.startswith("signoff serving at "):
                return line.split("signoff serving at ", 1)[1].strip()
        self.process.kill()
        _out, err = self.process.communicate(timeout=10)
        raise AssertionError(f"server did not start: {err[-3000:]}")

    def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        headers: dict[str, str] | None = None,
        raw: bytes | None = None,
    ) -> tuple[int, Any]:
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        req = urlrequest.Request(self.url + path, data=data, method=method)
        req.add_header("Authorization", f"Bearer {TOKEN}")
        req.add_header("Content-Type", "application/json")
        for key, value in (headers or {}).items():
            req.add_header(key, value)
        opener = urlrequest.build_opener(urlrequest.ProxyHandler({}))
        try:
            with opener.open(req, timeout=10) as answer:
                return answer.status, json.loads(answer.read() or b"null")
        except HTTPError as exc:
            return exc.code, json.loads(exc.read() or b"null")

    def wait_for(self, run_id: str, statuses: set[str], timeout: float = 30) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        last: Any = None
        while time.monotonic() < deadline:
            status, last = self.call("GET", f"/api/runs/{run_id}")
            if status == 200 and last["status"] in statuses:
                return dict(last)
            time.sleep(0.1)
        raise AssertionError(f"run {run_id} never reached {statuses}: {last}")

    def kill(self) -> int:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=10)
        self._close()
        return self.process.returncode

    def terminate(self) -> int:
        self.process.send_signal(signal.SIGTERM)
        self.process.wait(timeout=30)
        self._close()
        return self.process.returncode

    def _close(self) -> None:
        for stream in (self.process.stdout, self.process.stderr):
            if stream is not None:
                stream.close()


@pytest.fixture
def env(tmp_path: Path) -> Iterator[dict[str, str]]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("SIGNOFF_")}
    for proxy in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY"):
        base.pop(proxy, None)
    base.update(
        {
            "PYTHONPATH": str(ROOT),
            "SIGNOFF_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path / 'serve.db'}",
            "SIGNOFF_APP": "tests.e2e.serve_app:agents",
            "SIGNOFF_PORT": "0",
            "SIGNOFF_LEASE_SECONDS": "1",
            "SIGNOFF_API_TOKENS": json.dumps([{"token": TOKEN, "actor": "U-ops"}]),
            "SIGNOFF_HOOKS": json.dumps(
                {
                    "payments": {
                        "secret": SECRET,
                        "agent": "payments",
                        "input_template": "Pay {body[account]}",
                        "requester": "U-ops",
                    }
                }
            ),
            "SIGNOFF_TEST_LEDGER": str(tmp_path / "ledger.jsonl"),
        }
    )
    yield base


def start_by_hook(server: Server) -> str:
    body = json.dumps({"account": "ACC-1"}).encode()
    stamp = str(int(time.time()))
    status, answer = server.call(
        "POST",
        "/hooks/payments",
        raw=body,
        headers={
            "X-Signoff-Timestamp": stamp,
            "X-Signoff-Signature": sign(SECRET, stamp, body),
            "Idempotency-Key": "payment-1",
        },
    )
    assert status == 202, answer
    return str(answer["run_id"])


def ledger_lines(env: dict[str, str]) -> list[str]:
    path = Path(env["SIGNOFF_TEST_LEDGER"])
    return path.read_text().splitlines() if path.exists() else []


def test_killed_server_loses_nothing_and_runs_the_tool_once(env: dict[str, str]) -> None:
    first = Server(env)
    run_id = start_by_hook(first)
    parked = first.wait_for(run_id, {"awaiting"})
    ticket_id = parked["pending"][0]["ticket_id"]
    assert first.kill() == -signal.SIGKILL

    second = Server(env)
    try:
        status, tickets = second.call("GET", "/api/tickets")
        assert status == 200
        assert [t["ticket_id"] for t in tickets["tickets"]] == [ticket_id]
        status, answer = second.call(
            "POST", f"/api/tickets/{ticket_id}/decision", {"decision": "allow"}
        )
        assert status == 200, answer
        done = second.wait_for(run_id, {"done"})
        assert done["text"] == "Transfer complete."
        assert len(ledger_lines(env)) == 1
        # The same webhook delivery again starts nothing new.
        assert start_by_hook(second) == run_id
        status, again = second.call(
            "POST", f"/api/tickets/{ticket_id}/decision", {"decision": "allow"}
        )
        assert status == 409, again
    finally:
        second.terminate()
    assert len(ledger_lines(env)) == 1


def test_sigterm_keeps_parked_runs_parked(env: dict[str, str]) -> None:
    first = Server(env)
    run_id = start_by_hook(first)
    first.wait_for(run_id, {"awaiting"})
    assert first.terminate() == 0

    second = Server(env)
    try:
        parked = second.wait_for(run_id, {"awaiting"})
        assert len(parked["pending"]) == 1
        assert ledger_lines(env) == []
    finally:
        assert second.terminate() == 0
