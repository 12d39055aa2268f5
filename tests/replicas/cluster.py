"""Several real `signoff serve` processes on one PostgreSQL database: the test helpers.

Each test gets a fresh database (dropped after it) on the cluster named by
``SIGNOFF_TEST_POSTGRES_URL``; its replicas run `tests/replicas/replica_app.py` with short
leases, against the fake Slack or Discord of the adapter tests.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp

ROOT = Path(__file__).resolve().parents[2]
# The fakes of the adapter tests, imported as those tests import them.
for _fakes in ("tests/adapters/slack", "tests/adapters/discord"):
    if str(ROOT / _fakes) not in sys.path:
        sys.path.append(str(ROOT / _fakes))

from pgtest import fetch  # noqa: E402
from testkit import Served  # noqa: E402

OPERATOR_TOKEN = "replica-operator-token-0123456789"
COOKIE_SECRET = "replica-cookie-secret-0123456789-abcdef"


class Cluster:
    """Replicas of `signoff serve` sharing one database, a ledger and settings."""

    def __init__(self, url: str, tmp_path: Path) -> None:
        self.url = url
        self.ledger = tmp_path / "ledger.jsonl"
        self.replicas: list[Served] = []
        self.settings: dict[str, str] = {}
        self.roles: dict[int, str] = {}
        """SIGNOFF_ROLE of each replica by process id (``all`` unless started with one)."""
        self.split = 0
        """With a number, `start` without a role starts web replicas, and before the
        first ones that many workers (a layout of split roles)."""

    def env(self) -> dict[str, str]:
        """The environment of a replica."""
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.upper().startswith(("SIGNOFF_", "SLACK_")) and "PROXY" not in k.upper()
        }
        env.update(
            {
                "PYTHONPATH": str(ROOT),
                "SIGNOFF_DATABASE_URL": self.url,
                "SIGNOFF_APP": "tests.replicas.replica_app:agents",
                "SIGNOFF_PORT": "0",
                "SIGNOFF_LEASE_SECONDS": "1",
                "SIGNOFF_OUTBOX_LEASE_SECONDS": "5",
                "SIGNOFF_AUTO_MIGRATE": "false",
                "SIGNOFF_OPERATOR_TOKEN": OPERATOR_TOKEN,
                "SIGNOFF_COOKIE_SECRET": COOKIE_SECRET,
                "SIGNOFF_SHUTDOWN_GRACE_SECONDS": "2",
                "SIGNOFF_TEST_LEDGER": str(self.ledger),
                **self.settings,
            }
        )
        return env

    async def start(self, count: int, role: str | None = None) -> list[Served]:
        """Start `count` more replicas at once, of `role` (SIGNOFF_ROLE: ``all``, ``web``
        or ``worker``; see `split` without one); return them once each serves."""
        if role is None and self.split:
            if not any(r == "worker" for r in self.roles.values()):
                await self.start(self.split, "worker")
            role = "web"
        env = self.env() if role is None else {**self.env(), "SIGNOFF_ROLE": role}
        started = await asyncio.gather(
            *(Served.start(env) for _ in range(count)), return_exceptions=True
        )
        for served in started:
            if isinstance(served, Served):
                self.replicas.append(served)
                self.roles[served.process.pid] = role or "all"
        for served in started:
            if isinstance(served, BaseException):
                raise served
        return [s for s in started if isinstance(s, Served)]

    def serving(self) -> list[Served]:
        """The replicas still running that serve the API (role ``all`` or ``web``)."""
        return [r for r in self.replicas if self.roles[r.process.pid] != "worker"]

    def driving(self) -> list[Served]:
        """The replicas still running that drive runs (role ``all`` or ``worker``)."""
        return [r for r in self.replicas if self.roles[r.process.pid] != "web"]

    def worker_id(self, served: Served) -> str:
        """How a replica names itself in leases."""
        return f"{socket.gethostname()}:{served.process.pid}"

    def kill(self, served: Served) -> None:
        """SIGKILL a replica."""
        served.kill()
        self.replicas.remove(served)

    async def stop(self) -> None:
        """SIGTERM every replica still running and wait for them."""
        running, self.replicas = self.replicas, []
        for served in running:
            served.process.send_signal(signal.SIGTERM)
        for served in running:
            await served.stop()

    def ledger_entries(self) -> list[dict[str, Any]]:
        """Every real tool execution so far."""
        if not self.ledger.exists():
            return []
        return [json.loads(line) for line in self.ledger.read_text().splitlines() if line]

    async def query(self, sql: str, *args: Any) -> list[Any]:
        """Rows of a query on the shared database."""
        return await fetch(self.url, sql, *args)

    async def value(self, sql: str, *args: Any) -> Any:
        """The single value a query returns."""
        rows = await self.query(sql, *args)
        return rows[0][0] if rows else None


async def eventually(check: Callable[[], Awaitable[Any]], what: str, seconds: float = 30) -> Any:
    """Wait until `check()` returns something truthy; return it."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    while True:
        found = await check()
        if found:
            return found
        if loop.time() > deadline:
            raise AssertionError(f"never saw {what}")
        await asyncio.sleep(0.05)


class Api:
    """The JSON API of the replicas, as the operator."""

    def __init__(self, http: aiohttp.ClientSession) -> None:
        self.http = http
        self.headers = {"Authorization": f"Bearer {OPERATOR_TOKEN}"}

    async def call(self, method: str, url: str, body: Any = None) -> tuple[int, Any]:
        """One request; the status and the JSON answer."""
        async with self.http.request(method, url, json=body, headers=self.headers) as answer:
            return answer.status, await answer.json()
