"""A real signoff web service for the adapter tests.

`service` builds `signoff serve`'s process (`bot.bootstrap.build_service`) on a fresh
SQLite file (migrated), with a `ManualClock`, the test tokens and agents, and starts only
its worker; an aiohttp test server on 127.0.0.1 (port 0) serves its application (JSON
API, console, webhooks, health). The test agents record every real tool execution in
``service.ledger``.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from testkit import Crash, RollbackPlan, echo_model

from adapters.web import ApiToken, TokenAuth, add_console_routes
from bot.bootstrap import Parts, build_service
from bot.settings import Settings
from runtime import (
    Agent,
    InputRequest,
    ManualClock,
    RunResult,
    RunStatus,
    Runtime,
    current_tool_context,
    tool,
)
from runtime.store.sql import SQLStore
from runtime.worker import Worker

TOKENS = [
    ApiToken("tok-u1", "U1", name="Uma"),
    ApiToken("tok-u2", "U2", name="Udo"),
    ApiToken("tok-u3", "U3", name="Una"),
    ApiToken("tok-ops", "ops:alice", operator=True, name="Alice"),
]
COOKIE_SECRET = b"test-cookie-secret-0123456789abcdef"
SECRET_KEY = "sk-live-123456"


# -- scripted agents -------------------------------------------------------------------


def build_agents(ledger: list[tuple[str, dict[str, Any]]]) -> list[Agent]:
    """The test agents; every real tool execution is appended to `ledger`."""

    @tool(permission="ask", secret=["api_key"], editable=("amount",))
    async def transfer(account: str, amount: float, api_key: str) -> dict[str, Any]:
        """Move money."""
        ledger.append(("transfer", {"account": account, "amount": amount}))
        return {"transferred": amount, "to": account}

    @tool(permission=lambda a: "deny" if a["amount"] > 1000 else "ask", deadline=60)
    async def wire(amount: float) -> str:
        """Wire money abroad (a decision is due within a minute; never over 1000)."""
        ledger.append(("wire", {"amount": amount}))
        return f"wired {amount}"

    @tool(permission="allow", replay_policy="safe")
    async def rollback_plan(service: str) -> Any:
        """Ask a person for a rollback plan."""
        answer = current_tool_context().answer
        if answer is None:
            return InputRequest(prompt=f"How do we roll {service} back?", schema=RollbackPlan)
        ledger.append(("rollback_plan", dict(answer)))
        return {"service": service, **answer}

    @tool(permission="allow", replay_policy="manual")
    async def page(engineer: str) -> str:
        """Page an engineer (never repeated on its own)."""
        ledger.append(("page", {"engineer": engineer}))
        return f"paged {engineer}"

    @tool(permission="ask")
    async def send_email(to: str, subject: str) -> str:
        """Send an e-mail."""
        ledger.append(("send_email", {"to": to, "subject": subject}))
        return f"sent to {to}"

    @tool(permission="ask", editable=False)
    async def delete_branch(name: str) -> str:
        """Delete a git branch."""
        ledger.append(("delete_branch", {"name": name}))
        return f"deleted {name}"

    @tool(permission="ask", approvers=["U2"], four_eyes=True)
    async def deploy(service: str) -> str:
        """Deploy (U2 decides; never the requester)."""
        ledger.append(("deploy", {"service": service}))
        return f"deployed {service}"

    transfer_args = {"account": "ACME-1", "amount": 250.0, "api_key": SECRET_KEY}
    return [
        Agent("deployer", "Deploy.", echo_model(("deploy", {"service": "api"})), tools=[deploy]),
        Agent(
            "bank",
            "Pay invoices.",
            echo_model(("transfer", transfer_args)),
            tools=[transfer],
            description="Pays invoices (asks first)",
        ),
        Agent("wires", "Wire money.", echo_model(("wire", {"amount": 99.0})), tools=[wire]),
        Agent(
            "release",
            "Deploy carefully.",
            echo_model(("rollback_plan", {"service": "checkout"})),
            tools=[rollback_plan],
        ),
        Agent("pager", "Page people.", echo_model(("page", {"engineer": "grace"})), tools=[page]),
        Agent(
            "pair",
            "Tidy up.",
            echo_model(
                ("send_email", {"to": "ops@example.com", "subject": "Release done"}),
                ("delete_branch", {"name": "release-2.4"}),
            ),
            tools=[send_email, delete_branch],
        ),
    ]


# -- the service -------------------------------------------------------------------------


@dataclass
class Service:
    """Everything a test needs to drive the running web service."""

    runtime: Runtime
    store: SQLStore
    clock: ManualClock
    worker: Worker
    client: TestClient[web.Request, web.Application]
    agents: list[Agent]
    ledger: list[tuple[str, dict[str, Any]]] = field(default_factory=list)

    # JSON API --------------------------------------------------------------------------
    async def api(
        self,
        method: str,
        path: str,
        *,
        token: str | None = "tok-u1",
        json: Any = None,
        data: bytes | None = None,
    ) -> tuple[int, Any]:
        """Call the API; returns the status and the decoded JSON body."""
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        if data is not None:
            headers["Content-Type"] = "application/json"
        response = await self.client.request(method, path, headers=headers, json=json, data=data)
        assert response.content_type == "application/json", await response.text()
        return response.status, await response.json()

    # runs ------------------------------------------------------------------------------
    async def wait(self, run_id: str, check: Callable[[RunResult], bool]) -> RunResult:
        """Poll the run until `check` holds (for up to ten seconds)."""
        deadline = time.monotonic() + 10.0
        while True:
            result = await self.runtime.get(run_id)
            if check(result):
                return result
            if time.monotonic() > deadline:
                raise AssertionError(f"run {run_id} never got there; it is {result}")
            await asyncio.sleep(0.02)

    async def wait_status(self, run_id: str, *statuses: RunStatus) -> RunResult:
        """Wait until the run is in one of `statuses`."""
        return await self.wait(run_id, lambda r: r.status in statuses)

    async def park(self, agent: str, requester: str = "U1", text: str = "go") -> RunResult:
        """Start a run and wait until the worker parked it."""
        started = await self.runtime.start(
            agent, text, requester=requester, origin={"platform": "console"}, wait=False
        )
        self.worker.wake()
        return await self.wait_status(started.run_id, RunStatus.AWAITING)

    async def finished(self, run_id: str) -> RunResult:
        """Wait until the run ended."""
        return await self.wait(run_id, lambda r: r.status.finished)

    async def crashed(self, requester: str = "U1") -> str:
        """A `pager` run whose worker died after committing the dispatch of `page`.

        The run stays ``running`` until the dead worker's lease runs out.
        """

        def crash(point: str, info: dict[str, Any]) -> None:
            if point == "dispatch_committed":
                raise Crash(point)

        dying = Runtime(self.store, self.agents, clock=self.clock, checkpoint=crash)
        with contextlib.suppress(Crash):
            await dying.start("pager", "page grace", requester=requester, wait=True)
        async with self.store.transaction() as tx:
            [run] = await tx.list_runs(statuses=[RunStatus.RUNNING])
        return run.run_id

    async def uncertain(self, requester: str = "U1") -> RunResult:
        """A crashed `pager` run recovered by the worker: its `page` call is uncertain."""
        run_id = await self.crashed(requester)
        self.clock.advance(120)  # the dead worker's lease runs out
        self.worker.wake()
        return await self.wait(run_id, lambda r: any(p.status == "uncertain" for p in r.pending))

    async def snapshot(self, run_id: str) -> tuple[Any, ...]:
        """The run, its events and its tickets, for "nothing changed" checks."""
        result = await self.runtime.get(run_id)
        events = await self.runtime.events(run_id)
        async with self.store.transaction() as tx:
            tickets = await tx.tickets_for_run(run_id)
        return result, events, tickets, list(self.ledger)

    # console ---------------------------------------------------------------------------
    def console_app(self, runtime: Runtime) -> web.Application:
        """Another console over `runtime`, configured like this one (a second replica)."""
        app = web.Application()
        add_console_routes(
            app, runtime, TokenAuth(TOKENS), lambda: None, cookie_secret=COOKIE_SECRET
        )
        return app

    async def csrf_of(self, path: str) -> str:
        """GET a console page and return the CSRF token its forms carry."""
        response = await self.client.get(path)
        assert response.status == 200, await response.text()
        return csrf_in(await response.text())

    async def login(self, token: str = "tok-u1") -> str:
        """Sign in through the login form; returns the session's CSRF token."""
        csrf = await self.csrf_of("/login")
        response = await self.client.post(
            "/login", data={"csrf": csrf, "token": token}, allow_redirects=False
        )
        assert response.status == 303, await response.text()
        return await self.csrf_of("/runs")


def csrf_in(html: str) -> str:
    """The CSRF token in a rendered page."""
    found = re.search(r'name="csrf" value="([^"]+)"', html)
    assert found, "no CSRF field on the page"
    return found.group(1)


ONLY_THE_WORKER = Parts(listen=False, outbox=False, deadlines=False, wake_ups=False)
"""What the adapter tests run of `signoff serve`: the worker (the test serves the app)."""


@pytest.fixture
async def service(tmp_path: Path) -> AsyncIterator[Service]:
    path = tmp_path / "signoff.db"
    store = SQLStore.sqlite(path)
    await store.migrate()
    clock = ManualClock()
    ledger: list[tuple[str, dict[str, Any]]] = []
    agents = build_agents(ledger)
    settings = Settings(
        database_url=f"sqlite+aiosqlite:///{path}",
        operator_token="tok-ops-0123456789abcdef",
        cookie_secret=COOKIE_SECRET.decode(),
        poll_seconds=0.05,
    )
    built = await build_service(
        settings,
        agents=agents,
        store=store,
        clock=clock,
        auth=TokenAuth(TOKENS),
        parts=ONLY_THE_WORKER,
    )
    client = TestClient(TestServer(built.app, host="127.0.0.1", port=0))
    await client.start_server()
    await built.start()
    try:
        yield Service(built.runtime, store, clock, built.worker, client, agents, ledger)
    finally:
        await client.close()
        await built.stop(grace_seconds=5)
        await store.close()
