"""Secrets stay out of what the web service answers: a secret argument that fails its
schema, a refused edit of a schema tool whose root has ``anyOf``, and an edit that
guesses a secret (the same refusal whatever the guess).

A real web service: `signoff serve`'s process (`bot.bootstrap.build_service`) on a SQLite
file, its worker running, and its application (JSON API, console) on an aiohttp test
server on 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from testkit import echo_model

from adapters.web import ApiToken, TokenAuth
from bot.bootstrap import Parts, build_service
from bot.settings import Settings
from runtime import Agent, RunResult, RunStatus, Runtime, Tool
from runtime.store.sql import SQLStore
from runtime.worker import Worker

pytestmark = pytest.mark.timeout(60)

SECRET = "tok_live_5e3c2b1a0f9e"
LOGIN_SCHEMA = {
    "type": "object",
    "properties": {"user": {"type": "string"}, "token": {"type": "string", "pattern": "^tok_"}},
    "required": ["user", "token"],
}
DEPLOY_SCHEMA = {
    "type": "object",
    "properties": {
        "env": {"type": "string"},
        "replicas": {"type": "integer"},
        "token": {"type": "string"},
    },
    "required": ["env", "token"],
    "anyOf": [{"properties": {"env": {"const": "staging"}}}, {"required": ["ticket"]}],
}
DEPLOY_ARGS = {"env": "staging", "replicas": 2, "token": SECRET}


@dataclass
class Web:
    runtime: Runtime
    worker: Worker
    client: TestClient[web.Request, web.Application]
    ran: list[dict[str, Any]] = field(default_factory=list)

    async def api(self, method: str, path: str, json: Any = None) -> tuple[int, Any, str]:
        headers = {"Authorization": "Bearer tok-u1"}
        response = await self.client.request(method, path, headers=headers, json=json)
        text = await response.text()
        body = await response.json() if response.content_type == "application/json" else None
        return response.status, body, text

    async def run(self, agent: str, until: Any) -> RunResult:
        """Start a run for the worker and wait until `until` holds for it."""
        started = await self.runtime.start(
            agent, "go", requester="U1", origin={"platform": "console"}, wait=False
        )
        self.worker.wake()
        return await self.wait(started.run_id, until)

    async def wait(self, run_id: str, until: Any) -> RunResult:
        """Poll the run until `until` holds (for up to ten seconds)."""
        deadline = time.monotonic() + 10.0
        while True:
            result = await self.runtime.get(run_id)
            if until(result):
                return result
            if time.monotonic() > deadline:
                raise AssertionError(f"run {run_id} never got there: {result}")
            await asyncio.sleep(0.02)


@pytest.fixture
async def service(tmp_path: Path) -> AsyncIterator[Web]:
    ran: list[dict[str, Any]] = []

    async def invoke(args: dict[str, Any]) -> str:
        ran.append(args)
        return "done"

    login = Tool.from_schema("login", "Log in.", LOGIN_SCHEMA, invoke, secret=["token"])
    deploy = Tool.from_schema(
        "deploy", "Deploy.", DEPLOY_SCHEMA, invoke, permission="ask", secret=["token"]
    )
    agents = [
        Agent(
            "vault",
            "Log in.",
            echo_model(("login", {"user": "ana", "token": "sk-" + SECRET})),
            tools=[login],
        ),
        Agent("ops", "Deploy.", echo_model(("deploy", DEPLOY_ARGS)), tools=[deploy]),
    ]
    path = tmp_path / "signoff.db"
    store = SQLStore.sqlite(path)
    await store.migrate()
    settings = Settings.model_validate(
        {
            "database_url": f"sqlite+aiosqlite:///{path}",
            "operator_token": "secrets-operator-0123456789",
            "cookie_secret": "k" * 32,
            "poll_seconds": 0.05,
        }
    )
    service = await build_service(
        settings,
        agents=agents,
        store=store,
        auth=TokenAuth([ApiToken("tok-u1", "U1", name="Uma")]),
        parts=Parts(listen=False, outbox=False, deadlines=False, wake_ups=False),
    )
    client = TestClient(TestServer(service.app, host="127.0.0.1", port=0))
    await client.start_server()
    await service.start()
    try:
        yield Web(service.runtime, service.worker, client, ran)
    finally:
        await client.close()
        await service.stop(grace_seconds=5)
        await store.close()


async def test_a_secret_that_fails_its_schema_is_in_no_answer_of_the_api(service: Web) -> None:
    done = await service.run("vault", lambda r: r.status.finished)
    assert done.status is RunStatus.DONE
    assert done.text == (
        "Finished. Error: invalid arguments for login: token: the secret value does not "
        "match '^tok_'"
    )
    assert service.ran == []

    answers = []
    for path in (
        f"/api/runs/{done.run_id}",
        f"/api/runs/{done.run_id}/events",
        f"/api/runs/{done.run_id}/events?format=jsonl",
        "/api/runs",
    ):
        status, _, text = await service.api("GET", path)
        assert status == 200, text
        answers.append(text)
    assert "the secret value does not match" in answers[2]  # the jsonl export has the event
    for text in answers:
        assert SECRET not in text

    # The console's run page shows the flight recorder: the error, without the value.
    page = await service.client.get("/login")
    csrf = re.search(r'name="csrf" value="([^"]+)"', await page.text())
    assert csrf is not None
    signed = await service.client.post(
        "/login", data={"csrf": csrf.group(1), "token": "tok-u1"}, allow_redirects=False
    )
    assert signed.status == 303
    html = await (await service.client.get(f"/runs/{done.run_id}")).text()
    assert "the secret value does not match" in html
    assert SECRET not in html


async def test_a_refused_edit_of_a_root_any_of_schema_is_a_422_without_the_secret(
    service: Web,
) -> None:
    parked = await service.run("ops", lambda r: r.status is RunStatus.AWAITING)
    ticket_id = parked.pending[0].ticket_id

    status, body, text = await service.api(
        "POST",
        f"/api/tickets/{ticket_id}/decision",
        {"decision": "allow", "args": {"env": "production"}},
    )
    assert status == 422, text
    assert body["error"] == "invalid_edit"
    assert body["errors"] == [
        {"path": "", "message": "the argument object is not valid under any of the given schemas"}
    ]
    assert SECRET not in text


async def test_an_edit_guessing_a_secret_gets_one_refusal_whatever_the_guess(
    service: Web,
) -> None:
    parked = await service.run("ops", lambda r: r.status is RunStatus.AWAITING)
    ticket_id = parked.pending[0].ticket_id

    answers = []
    for guess in (SECRET, "tok_wrong"):
        for other in ({"replicas": "many"}, {"replicas": 3}):
            status, body, text = await service.api(
                "POST",
                f"/api/tickets/{ticket_id}/decision",
                {"decision": "allow", "args": {**other, "token": guess}},
            )
            assert status == 422, text
            answers.append((body["error"], body["message"], body["errors"]))
    assert answers == [answers[0]] * 4
    assert answers[0][0] == "not_editable"
    assert service.ran == []

    # The mask keeps it, as a form sends it back; the call runs with the real value.
    status, body, text = await service.api(
        "POST",
        f"/api/tickets/{ticket_id}/decision",
        {"decision": "allow", "args": {"replicas": 3, "token": "••••••"}},
    )
    assert status == 200, text
    service.worker.wake()
    done = await service.wait(parked.run_id, lambda r: r.status.finished)
    assert done.status is RunStatus.DONE
    assert service.ran == [{**DEPLOY_ARGS, "replicas": 3}]
