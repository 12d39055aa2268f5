"""A real signoff web service with external agents, for the approvals API tests.

`start_approvals` builds `signoff serve`'s process (`bot.bootstrap.build_service`) on a fresh
SQLite file with a `ManualClock`, the tokens below and two external agents, runs only its
worker, and serves its application on 127.0.0.1 (port 0) with an aiohttp test client.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections import defaultdict
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from testkit import echo_model

from adapters.web import ApiToken, TokenAuth
from adapters.web.decision_tokens import DecisionSigner
from bot.bootstrap import Parts, build_service
from bot.settings import Settings
from runtime import Agent, ExternalAgent, ManualClock, Runtime, Tool, tool
from runtime.domain.external import authorising_tool
from runtime.domain.tools import Permission
from runtime.store.sql import SQLStore
from runtime.worker import Worker

TOKENS = [
    ApiToken("tok-bot", "svc:bot", name="Support bot", on_behalf_of=("U*",)),
    ApiToken("tok-u1", "U1", name="Uma"),
    ApiToken("tok-u2", "U2", name="Udo"),
    ApiToken("tok-u3", "U3", name="Una"),
    ApiToken("tok-ops", "ops:alice", operator=True, name="Alice"),
]
COOKIE_SECRET = b"test-cookie-secret-0123456789abcdef"
REFUND = {"order": "A-1", "amount": 25.0, "card": "4111-1111"}


def billing_tools(name: str) -> Tool:
    """The billing agent's rules: refunds ask (the card number is secret), lookups are
    allowed, deletions denied, anything else asks."""
    if name.startswith("lookup"):
        return authorising_tool(name, Permission.ALLOW)
    if name.startswith("drop"):
        return authorising_tool(name, Permission.DENY)
    if name == "refund":
        return dataclasses.replace(authorising_tool(name), secret=frozenset({"card"}))
    return authorising_tool(name)


@tool(permission="ask")
async def note(text: str) -> str:
    """Write a note (asks first)."""
    return f"noted {text}"


def agents() -> list[Agent]:
    """Two external agents, and one signoff runs itself (``helper``)."""
    return [
        Agent("helper", "Help.", echo_model(("note", {"text": "hi"})), tools=[note]),
        ExternalAgent("billing", billing_tools),
        ExternalAgent(
            "deployer", approvers=["U2"], four_eyes=True, overrides=["approvers", "deadline"]
        ),
    ]


@dataclass
class Approvals:
    """The running service and a client of its HTTP API."""

    runtime: Runtime
    store: SQLStore
    clock: ManualClock
    worker: Worker
    client: TestClient[web.Request, web.Application]
    signer: DecisionSigner
    points: defaultdict[str, asyncio.Event] = field(
        default_factory=lambda: defaultdict(asyncio.Event)
    )
    """One event per runtime checkpoint, set each time the runtime reaches it."""

    async def call(
        self,
        method: str,
        path: str,
        *,
        token: str | None = "tok-u1",
        json: Any = None,
        data: bytes | None = None,
        headers: dict[str, str] | None = None,
    ) -> tuple[int, Any]:
        """Call the API; returns the status and the decoded JSON body."""
        sent = {"Authorization": f"Bearer {token}"} if token else {}
        if data is not None:
            sent["Content-Type"] = "application/json"
        sent.update(headers or {})
        response = await self.client.request(method, path, headers=sent, json=json, data=data)
        assert response.content_type == "application/json", await response.text()
        return response.status, await response.json()

    async def ask(self, token: str = "tok-u1", **body: Any) -> dict[str, Any]:
        """POST /api/approvals, which must answer 201; returns the approval."""
        body = {"agent": "billing", "tool": "refund", "arguments": REFUND, **body}
        status, answer = await self.call("POST", "/api/approvals", token=token, json=body)
        assert status == 201, answer
        return dict(answer)

    async def counts(self) -> tuple[int, int]:
        """How many runs and tickets the store holds (for "nothing changed" checks)."""
        async with self.store.transaction() as tx:
            runs = await tx.list_runs(statuses=[], limit=100_000)
            tickets = [t for run in runs for t in await tx.tickets_for_run(run.run_id)]
        return len(runs), len(tickets)


PARTS = Parts(listen=False, outbox=False, deadlines=False, wake_ups=False)


@contextlib.asynccontextmanager
async def start_approvals(tmp_path: Path, **settings: Any) -> AsyncIterator[Approvals]:
    """The running service (with these settings besides the test's), stopped after the
    block."""
    path = tmp_path / "signoff.db"
    store = SQLStore.sqlite(path)
    await store.migrate()
    # Now, so that decision tokens verify against the real time (and go stale with it).
    clock = ManualClock(datetime.now(UTC).replace(microsecond=0))
    configured = Settings(
        database_url=f"sqlite+aiosqlite:///{path}",
        operator_token="tok-ops-0123456789abcdef",
        cookie_secret=COOKIE_SECRET.decode(),
        poll_seconds=0.05,
        **settings,
    )
    points: defaultdict[str, asyncio.Event] = defaultdict(asyncio.Event)
    built = await build_service(
        configured,
        agents=agents(),
        store=store,
        clock=clock,
        auth=TokenAuth(TOKENS),
        parts=PARTS,
        checkpoint=lambda point, info: points[point].set(),
    )
    client = TestClient(TestServer(built.app, host="127.0.0.1", port=0))
    await client.start_server()
    await built.start()
    signer = DecisionSigner.derived(COOKIE_SECRET, issuer="signoff", ttl_seconds=3600)
    try:
        yield Approvals(built.runtime, store, clock, built.worker, client, signer, points)
    finally:
        await client.close()
        await built.stop(grace_seconds=5)
        await store.close()
