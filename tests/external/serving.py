"""A served signoff for the external approval tests over HTTP: `signoff serve`'s process
(`bot.bootstrap.build_service`) on a SQLite file, listening on 127.0.0.1, with the
external agent `billing` (refunds ask ``U-ann``; look-ups are allowed), and a local
receiver of approval callbacks that verifies each one with the Standard Webhooks library.

Import the fixtures into a test module: ``from serving import receiver, serve``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from aiohttp import web
from pydantic import SecretStr
from standardwebhooks import Webhook

from adapters.web import ApiToken, TokenAuth
from bot.bootstrap import Parts, Service, build_service
from bot.settings import Settings
from runtime import Clock, ExternalAgent, Permission
from runtime.domain.external import authorising_tool
from runtime.services.delivery import RetryPolicy

SECRET = "whsec_" + "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
AGENT_TOKEN = "tok-agent-0123456789"
APPROVER_TOKEN = "tok-ann-0123456789ab"
OPERATOR_TOKEN = "tok-ops-0123456789abcdef"
STRANGER_TOKEN = "tok-eve-0123456789abcd"
FAST_RETRY = RetryPolicy(max_attempts=5, base_delay=0.05, max_delay=0.2)
PROXY_VARS = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy")


def billing() -> ExternalAgent:
    def tools(name: str) -> Any:
        return authorising_tool(name, Permission.ALLOW if name == "lookup" else Permission.ASK)

    return ExternalAgent(
        "billing", tools, fingerprint="v1", approvers=("U-ann",), deadline=timedelta(seconds=60)
    )


@dataclass
class Receiver:
    """A callback endpoint: verifies every request, answers `statuses` in turn, then 200."""

    statuses: list[int] = field(default_factory=list)
    received: list[tuple[dict[str, str], bytes]] = field(default_factory=list)
    verified: list[dict[str, Any]] = field(default_factory=list)
    url: str = ""
    _changed: asyncio.Condition = field(default_factory=asyncio.Condition)

    async def handle(self, request: web.Request) -> web.Response:
        headers, body = dict(request.headers), await request.read()
        payload = Webhook(SECRET).verify(body, headers)  # raises if forged or stale
        async with self._changed:
            self.received.append((headers, body))
            self.verified.append(payload)
            self._changed.notify_all()
        status = self.statuses.pop(0) if self.statuses else 200
        return web.json_response({"ok": status < 300}, status=status)

    async def wait_for(self, count: int) -> list[dict[str, Any]]:
        async with self._changed:
            await asyncio.wait_for(
                self._changed.wait_for(lambda: len(self.received) >= count), timeout=30
            )
            return list(self.verified)

    def of(self, approval_id: str) -> list[dict[str, Any]]:
        return [p for p in self.verified if p["approval_id"] == approval_id]


@dataclass
class Served:
    service: Service
    http: httpx.AsyncClient
    receiver: Receiver

    async def ask(self, tool: str, **extra: Any) -> httpx.Response:
        body = {"agent": "billing", "tool": tool, "arguments": {"order": "A-1"}, **extra}
        return await self.http.post(
            "/api/approvals", json=body, headers={"Authorization": f"Bearer {AGENT_TOKEN}"}
        )

    async def asked(self, tool: str = "refund") -> dict[str, Any]:
        response = await self.ask(tool, callback_url=self.receiver.url)
        assert response.status_code == 201, response.text
        answer: dict[str, Any] = response.json()
        return answer

    async def decide(self, ticket_id: str, **body: Any) -> None:
        response = await self.http.post(
            f"/api/tickets/{ticket_id}/decision",
            json=body,
            headers={"Authorization": f"Bearer {APPROVER_TOKEN}"},
        )
        assert response.status_code == 200, response.text

    async def get(self, approval_id: str) -> dict[str, Any]:
        response = await self.http.get(
            f"/api/approvals/{approval_id}", headers={"Authorization": f"Bearer {AGENT_TOKEN}"}
        )
        assert response.status_code == 200, response.text
        answer: dict[str, Any] = response.json()
        return answer

    async def callback_items(self, approval_id: str) -> list[Any]:
        async with self.service.store.transaction() as tx:
            items = await tx.outbox_for_run(approval_id)
        return [i for i in items if i.kind == "approval_callback"]

    async def delivered(self, approval_id: str) -> Any:
        """The approval's callback item once the outbox marked it delivered."""
        for _ in range(1500):
            (item,) = await self.callback_items(approval_id)
            if item.state == "delivered":
                return item
            await asyncio.sleep(0.02)
        raise AssertionError(f"the callback of {approval_id} was never marked delivered")

    async def runs(self) -> int:
        """How many runs the database holds."""
        async with self.service.store.transaction() as tx:
            return len(await tx.list_runs(limit=10_000))


@pytest.fixture
async def receiver(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Receiver]:
    """A callback receiver on 127.0.0.1 (proxy variables cleared)."""
    for name in PROXY_VARS:
        monkeypatch.delenv(name, raising=False)
    found = Receiver()
    app = web.Application()
    app.router.add_post("/hook", found.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    found.url = f"http://127.0.0.1:{runner.addresses[0][1]}/hook"
    try:
        yield found
    finally:
        await runner.cleanup()


Serve = Callable[..., Any]
"""``async with serve(clock=None, **settings) as served``: a served signoff."""


@pytest.fixture
def serve(tmp_path: Path, receiver: Receiver) -> Serve:
    """Serve signoff on one SQLite file (a second block is a restarted process)."""

    @asynccontextmanager
    async def serving(clock: Clock | None = None, **settings: Any) -> AsyncIterator[Served]:
        values: dict[str, Any] = {
            "database_url": f"sqlite+aiosqlite:///{tmp_path / 'signoff.db'}",
            "operator_token": SecretStr(OPERATOR_TOKEN),
            "cookie_secret": SecretStr("test-cookie-secret-0123456789abcdef"),
            "bind_host": "127.0.0.1",
            "port": 0,
            "poll_seconds": 0.05,
            "approval_callback_secret": SecretStr(SECRET),
            "approval_callback_hosts": ["127.0.0.1"],
            **settings,
        }
        auth = TokenAuth(
            [
                ApiToken(AGENT_TOKEN, "svc-billing", name="Billing bot"),
                ApiToken(APPROVER_TOKEN, "U-ann", name="Ann"),
                ApiToken(STRANGER_TOKEN, "U-eve", name="Eve"),
                ApiToken(OPERATOR_TOKEN, "ops:alice", operator=True, name="Alice"),
            ]
        )
        service = await build_service(
            Settings(**values),
            agents=[billing()],
            clock=clock,
            auth=auth,
            outbox_policy=FAST_RETRY,
            parts=Parts(discord=False, wake_ups=False, deadlines=False),
        )
        url = await service.start()
        http = httpx.AsyncClient(base_url=url, timeout=30)
        try:
            yield Served(service, http, receiver)
        finally:
            await http.aclose()
            await service.stop(grace_seconds=5)

    return serving
