"""The bundled examples decided from the console by the right people: ``deploys`` (typed
input, then a four-eyes approval by the ``release-managers`` group) with console tokens
that carry groups; the requester sees why they cannot decide, not dead buttons."""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from adapters.web import ApiToken, TokenAuth
from bot.bootstrap import Parts, build_service
from bot.settings import Settings
from examples import demo_agents
from runtime import RunResult, RunStatus, Runtime
from runtime.store.sql import SQLStore

TOKENS = [
    ApiToken("tok-dev", "dev:ada", name="Ada"),
    ApiToken("tok-rm", "rm:grace", name="Grace", groups=frozenset({"release-managers"})),
    ApiToken("tok-other", "dev:alan", name="Alan", groups=frozenset({"sales"})),
    ApiToken("tok-ops", "ops:linus", operator=True, name="Linus"),
]

pytestmark = pytest.mark.timeout(60)


class Console:
    def __init__(self, client: TestClient[web.Request, web.Application], runtime: Runtime):
        self.client = client
        self.runtime = runtime

    async def login(self, token: str) -> str:
        self.client.session.cookie_jar.clear()
        page = await self.client.get("/login")
        csrf = _csrf(await page.text())
        done = await self.client.post(
            "/login", data={"csrf": csrf, "token": token}, allow_redirects=False
        )
        assert done.status == 303
        return _csrf(await (await self.client.get("/runs")).text())

    async def page(self, path: str) -> str:
        response = await self.client.get(path)
        assert response.status == 200, await response.text()
        return await response.text()

    async def post(self, path: str, data: dict[str, str], status: int = 303) -> str:
        response = await self.client.post(path, data=data, allow_redirects=False)
        assert response.status == status, await response.text()
        return await response.text()

    async def until(self, run_id: str, check: Any) -> RunResult:
        deadline = time.monotonic() + 10
        while True:
            run = await self.runtime.get(run_id)
            if check(run):
                return run
            assert time.monotonic() < deadline, run
            await asyncio.sleep(0.02)


def _csrf(html: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', html)
    assert found
    return found.group(1)


@pytest.fixture
async def console(tmp_path: Path) -> AsyncIterator[Console]:
    path = tmp_path / "signoff.db"
    store = SQLStore.sqlite(path)
    await store.migrate()
    settings = Settings.model_validate(
        {
            "database_url": f"sqlite+aiosqlite:///{path}",
            "operator_token": "examples-operator-0123456789",
            "cookie_secret": "c" * 32,
            "poll_seconds": 0.05,
        }
    )
    service = await build_service(
        settings,
        agents=demo_agents(),
        store=store,
        auth=TokenAuth(TOKENS),
        parts=Parts(listen=False, outbox=False, deadlines=False, wake_ups=False),
    )
    client = TestClient(TestServer(service.app, host="127.0.0.1", port=0))
    await client.start_server()
    await service.start()
    try:
        yield Console(client, service.runtime)
    finally:
        await client.close()
        await service.stop(grace_seconds=5)
        await store.close()


async def test_deploys_is_decided_by_a_release_manager_from_the_console(
    console: Console,
) -> None:
    csrf = await console.login("tok-dev")
    await console.post(
        "/start", {"csrf": csrf, "agent": "deploys", "input": "deploy checkout 2.4.1"}
    )
    [run] = await console.runtime.list_runs()
    run = await console.until(run.run_id, lambda r: r.status is RunStatus.AWAITING)
    here = f"/runs/{run.run_id}"

    # The requester answers the rollback-plan form (it is theirs to answer).
    [plan] = run.pending
    await console.post(
        f"/tickets/{plan.ticket_id}/decide",
        {
            "csrf": csrf,
            "action": "input",
            "next": here,
            "field.previous_version": "2.4.0",
            "field.strategy": "redeploy_previous",
        },
    )
    run = await console.until(
        run.run_id, lambda r: r.pending and r.pending[0].call.name == "deploy"
    )
    [deploy] = run.pending

    # Four-eyes: the requester sees why, and no buttons that could only be refused.
    html = await console.page(here)
    assert "Four-eyes: you asked for this call, so someone else must decide it" in html
    assert "members of release-managers (not the requester)" in html
    assert 'value="allow"' not in html
    before = await console.runtime.get(run.run_id)
    refused = await console.post(
        f"/tickets/{deploy.ticket_id}/decide",
        {"csrf": csrf, "action": "allow", "next": here},
        status=403,
    )
    assert "who may: members of release-managers (not the requester)" in refused
    assert await console.runtime.get(run.run_id) == before

    # Someone outside the group does not even see it.
    other = await console.login("tok-other")
    assert deploy.ticket_id not in await console.page("/tickets")
    await console.post(
        f"/tickets/{deploy.ticket_id}/decide",
        {"csrf": other, "action": "allow"},
        status=404,
    )

    # A release manager sees it among their tickets, with its buttons, and allows it.
    manager = await console.login("tok-rm")
    tickets = await console.page("/tickets")
    assert deploy.ticket_id in tickets and 'value="allow"' in tickets
    await console.post(
        f"/tickets/{deploy.ticket_id}/decide", {"csrf": manager, "action": "allow", "next": here}
    )
    done = await console.until(run.run_id, lambda r: r.status.finished)
    assert done.status is RunStatus.DONE
    assert "approved by rm:grace" in (done.text or "")


async def test_an_operator_who_asked_sees_the_same_explanation(console: Console) -> None:
    csrf = await console.login("tok-ops")
    await console.post("/start", {"csrf": csrf, "agent": "deploys", "input": "deploy search 1.2.0"})
    [run] = await console.runtime.list_runs()
    run = await console.until(run.run_id, lambda r: r.status is RunStatus.AWAITING)
    here = f"/runs/{run.run_id}"
    [plan] = run.pending
    await console.post(
        f"/tickets/{plan.ticket_id}/decide",
        {
            "csrf": csrf,
            "action": "input",
            "next": here,
            "field.previous_version": "1.1.0",
            "field.strategy": "redeploy_previous",
        },
    )
    await console.until(run.run_id, lambda r: r.pending and r.pending[0].call.name == "deploy")
    html = await console.page(here)
    assert "Four-eyes: you asked for this call" in html
    assert 'value="allow"' not in html
