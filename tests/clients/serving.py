"""A real `signoff serve` process for the client tests, and an operator's HTTP calls to it.

The server runs on a SQLite file, listens on a fixed free port (so a restarted server is
found at the same address), signs decisions with a key the test knows, and declares the
external agent ``billing`` in an agents file.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

ROOT = Path(__file__).resolve().parents[2]
AGENT_TOKEN = "tok-agent-billing-0123456789"
"""The token the external agent (the client under test) uses."""
OPERATOR_TOKEN = "tok-ops-alice-0123456789"
"""The token of the person who decides tickets."""
STRANGER_TOKEN = "tok-stranger-0123456789"
AGENTS_TOML = """\
[agents.billing]
external = true

[agents.billing.rules."lookup_*"]
permission = "allow"

[agents.billing.rules.refund]
permission = "ask"
editable = ["amount"]
"""


def free_port() -> int:
    """A port nothing listens on now (the server binds it with SO_REUSEADDR)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def signing_key() -> Ed25519PrivateKey:
    """A fresh Ed25519 key for the server to sign decisions with."""
    return Ed25519PrivateKey.generate()


def pem(key: Ed25519PrivateKey) -> str:
    """The key as the PEM ``SIGNOFF_SIGNING_KEY`` takes."""
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()


def server_env(directory: Path, key: Ed25519PrivateKey, **extra: str) -> dict[str, str]:
    """The environment of a `signoff serve` on `directory`'s SQLite file."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SIGNOFF_")}
    for proxy in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY"):
        env.pop(proxy, None)
    agents = directory / "agents.toml"
    agents.write_text(AGENTS_TOML, encoding="utf-8")
    env.update(
        {
            "PYTHONPATH": str(ROOT),
            "SIGNOFF_DATABASE_URL": f"sqlite+aiosqlite:///{directory / 'signoff.db'}",
            "SIGNOFF_AGENTS": str(agents),
            "SIGNOFF_BIND_HOST": "127.0.0.1",
            "SIGNOFF_PORT": str(free_port()),
            "SIGNOFF_LEASE_SECONDS": "1",
            "SIGNOFF_SIGNING_KEY": pem(key),
            "SIGNOFF_API_TOKENS": json.dumps(
                [
                    {"token": AGENT_TOKEN, "actor": "svc:billing-agent"},
                    {"token": OPERATOR_TOKEN, "actor": "U-alice", "operator": True},
                    {"token": STRANGER_TOKEN, "actor": "U-mallory"},
                ]
            ),
        }
    )
    env.update(extra)
    return env


class Server:
    """One `signoff serve` subprocess; stop it with `kill` or `terminate`."""

    def __init__(self, env: dict[str, str], log: Path) -> None:
        # Its log goes to a file: a pipe nobody reads would fill up and block it.
        self._log = log.open("a", encoding="utf-8")
        self.log = log
        self.process = subprocess.Popen(
            [sys.executable, "-m", "bot", "serve"],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=self._log,
            text=True,
        )
        self.url = self._read_url()
        self._http = httpx.Client(base_url=self.url, timeout=30, trust_env=False)

    def _read_url(self) -> str:
        assert self.process.stdout is not None
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            line = self.process.stdout.readline()
            if not line:
                break
            if line.startswith("signoff serving at "):
                return line.split("signoff serving at ", 1)[1].strip()
        self.process.kill()
        self.process.wait(timeout=10)
        self.process.stdout.close()
        self._log.close()
        raise AssertionError(f"signoff serve did not start: {self.log.read_text()[-3000:]}")

    def call(
        self, method: str, path: str, body: Any = None, *, token: str = OPERATOR_TOKEN
    ) -> tuple[int, Any]:
        """One request as `token`'s user: the status and the JSON answer."""
        response = self._http.request(
            method, path, json=body, headers={"Authorization": f"Bearer {token}"}
        )
        return response.status_code, response.json() if response.content else None

    def decide(self, ticket_id: str, body: dict[str, Any]) -> dict[str, Any]:
        """Decide a ticket as the operator (``POST /api/tickets/{id}/decision``)."""
        status, answer = self.call("POST", f"/api/tickets/{ticket_id}/decision", body)
        assert status == 200, answer
        return dict(answer)

    def tickets(self) -> list[dict[str, Any]]:
        """Every open ticket the operator sees."""
        status, answer = self.call("GET", "/api/tickets")
        assert status == 200, answer
        return list(answer["tickets"])

    def kill(self) -> None:
        """SIGKILL: nothing is shut down cleanly."""
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=10)
        self._close()

    def terminate(self) -> None:
        """SIGTERM: the ordinary shutdown."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            self.process.wait(timeout=30)
        self._close()

    def _close(self) -> None:
        self._http.close()
        self._log.close()
        if self.process.stdout is not None:
            self.process.stdout.close()
