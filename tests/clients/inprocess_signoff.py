"""A real signoff serving the approvals API, for the framework adapters' tests.

`serve_approvals` builds `signoff serve`'s process (`bot.bootstrap.build_service`) on a
fresh SQLite file with an agents file declaring the external agents below, listening on
127.0.0.1 (a free port) so agent code in threads and subprocesses reaches it over HTTP.
Its worker, outbox and deadline loop run; the console's cards are recorded by `Cards`,
which tells a test when a card went out (the positive signal to decide on). Time is a
`ManualClock` the test moves to make deadlines pass.
"""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from pydantic import SecretStr
from testkit import query

from adapters.web import ApiToken, TokenAuth
from bot.bootstrap import Parts, Service, build_service
from bot.settings import Settings
from runtime import ManualClock
from runtime.domain.notifications import ApprovalRequested

AGENT_TOKEN = "tok-agent-0123456789"
"""The token agent code asks with (requester ``svc-support``)."""
APPROVER_TOKEN = "tok-ann-0123456789ab"
"""The token of ``U-ann``, who decides the support agents' calls."""
OPERATOR_TOKEN = "tok-ops-0123456789abcdef"
COOKIE_SECRET = "test-cookie-secret-0123456789abcdef"

AGENTS_FILE = """
[agents.support]
external = true
description = "Customer support (runs elsewhere)"
approvers = ["U-ann"]

[agents.support.rules.refund]
permission = "ask"

[agents.support.rules.lookup_order]
permission = "allow"

[agents.hurried]
external = true
approvers = ["U-ann"]
deadline = 600
on_expiry = "deny"

[agents.hurried.rules."*"]
permission = "ask"
"""
"""``support``: refunds ask U-ann, look-ups are allowed; ``hurried``: every call asks and
is denied when nobody decides within ten minutes."""


@dataclass
class Cards:
    """The console's notifier: records approval cards and says when one goes out."""

    sent: list[ApprovalRequested] = field(default_factory=list)
    _changed: asyncio.Condition = field(default_factory=asyncio.Condition)

    async def deliver(self, note: Any, delivery: Any) -> dict[str, Any] | None:
        """Record an approval card; other notifications need nothing."""
        if isinstance(note, ApprovalRequested):
            async with self._changed:
                self.sent.append(note)
                self._changed.notify_all()
        return None

    async def wait_for(self, count: int, seconds: float = 30.0) -> list[ApprovalRequested]:
        """Wait until `count` cards went out; return them."""
        async with self._changed:
            await asyncio.wait_for(
                self._changed.wait_for(lambda: len(self.sent) >= count), timeout=seconds
            )
            return list(self.sent)


@dataclass
class Signoff:
    """The running service and what a test does with it."""

    url: str
    service: Service
    clock: ManualClock
    cards: Cards
    http: httpx.AsyncClient
    database: Path

    async def decide(self, ticket_id: str, **body: Any) -> dict[str, Any]:
        """Decide a ticket as U-ann through the JSON API (``decision="allow"`` ...)."""
        response = await self.http.post(
            f"/api/tickets/{ticket_id}/decision",
            json=body,
            headers={"Authorization": f"Bearer {APPROVER_TOKEN}"},
        )
        assert response.status_code == 200, response.text
        answer: dict[str, Any] = response.json()
        return answer

    async def approvals(self, **query: str) -> list[dict[str, Any]]:
        """The approvals the agent's token sees (``GET /api/approvals``)."""
        response = await self.http.get(
            "/api/approvals",
            params=query,
            headers={"Authorization": f"Bearer {AGENT_TOKEN}"},
        )
        assert response.status_code == 200, response.text
        found: list[dict[str, Any]] = response.json()["approvals"]
        return found

    async def approval(self, approval_id: str, *, wait: int = 0) -> dict[str, Any]:
        """One approval as the agent's token reads it, long polling up to `wait` seconds."""
        response = await self.http.get(
            f"/api/approvals/{approval_id}",
            params={"wait": str(wait)},
            headers={"Authorization": f"Bearer {AGENT_TOKEN}"},
            timeout=wait + 30,
        )
        assert response.status_code == 200, response.text
        body: dict[str, Any] = response.json()
        return body

    def count(self, table: str) -> int:
        """How many rows a table of the database holds (``runs``, ``tickets`` ...)."""
        [(rows,)] = query(self.database, f"SELECT count(*) FROM {table}")
        return int(rows)


@asynccontextmanager
async def serve_approvals(tmp_path: Path) -> AsyncIterator[Signoff]:
    """Serve signoff with the external agents of `AGENTS_FILE` until the block ends."""
    agents = tmp_path / "agents.toml"
    agents.write_text(AGENTS_FILE, encoding="utf-8")
    settings = Settings(
        database_url=f"sqlite+aiosqlite:///{tmp_path / 'signoff.db'}",
        agents=agents,
        operator_token=SecretStr(OPERATOR_TOKEN),
        cookie_secret=SecretStr(COOKIE_SECRET),
        bind_host="127.0.0.1",
        port=0,
        poll_seconds=0.05,
    )
    auth = TokenAuth(
        [
            ApiToken(AGENT_TOKEN, "svc-support", name="Support bot"),
            ApiToken(APPROVER_TOKEN, "U-ann", name="Ann"),
            ApiToken(OPERATOR_TOKEN, "ops:alice", operator=True, name="Alice"),
        ]
    )
    clock = ManualClock()
    cards = Cards()
    service = await build_service(
        settings,
        clock=clock,
        auth=auth,
        notifiers={"console": cards},
        parts=Parts(discord=False, wake_ups=False),
    )
    url = await service.start()
    http = httpx.AsyncClient(base_url=url, timeout=30)
    try:
        yield Signoff(url, service, clock, cards, http, tmp_path / "signoff.db")
    finally:
        await http.aclose()
        await service.stop(grace_seconds=5)


# -- the docs' examples, run as agent processes ---------------------------------------------

REPO = Path(__file__).resolve().parents[2]


def example_source(page: Path, test_module: str) -> str:
    """The Python example of `page` marked as run by `test_module` (its path in the repo)."""
    marker = re.escape(f"<!-- run: {test_module} -->")
    [source] = re.findall(marker + r"\n```python\n(.*?)```", page.read_text("utf-8"), re.S)
    return str(source)


def start_example(script: Path, url: str) -> subprocess.Popen[str]:
    """`script` run as an agent process asking the signoff at `url` with the agent token."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SIGNOFF_")}
    env.update(SIGNOFF_URL=url, SIGNOFF_TOKEN=AGENT_TOKEN, PYTHONPATH=str(REPO))
    return subprocess.Popen(
        [sys.executable, script.name],
        cwd=script.parent,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
