"""Webhooks push back with 503 while too many runs wait for a worker."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp.test_utils import TestClient, TestServer

from adapters.webhook.signing import signed_headers
from bot.bootstrap import Parts, build_service
from bot.settings import Settings
from runtime import Agent, Runtime, ScriptedModel, final_reply
from runtime.store.sql import SQLStore

SECRET = "whsec-busy-0123456789"


@pytest.fixture
async def client(tmp_path: Path) -> AsyncIterator[tuple[TestClient, Runtime]]:
    path = tmp_path / "busy.db"
    store = SQLStore.sqlite(path)
    await store.migrate()
    settings = Settings.model_validate(
        {
            "database_url": f"sqlite+aiosqlite:///{path}",
            "operator_token": "busy-operator-0123456789",
            "cookie_secret": "busy-cookie-secret-0123456789abcdef",
            "max_queued_runs": 2,
            "hooks": {"echo": {"secret": SECRET, "agent": "echo", "input_template": "{raw}"}},
        }
    )
    service = await build_service(
        settings,
        agents=[Agent("echo", "Echo.", ScriptedModel([final_reply("ok")]))],
        store=store,
        # No worker runs here, so every started run stays queued.
        parts=Parts(
            listen=False, outbox=False, deadlines=False, wake_ups=False, discord=False, worker=False
        ),
    )
    await service.start()
    try:
        async with TestClient(TestServer(service.app)) as http:
            yield http, service.runtime
    finally:
        await service.stop(grace_seconds=1)
        await store.close()


async def post(http: TestClient, payload: object, key: str) -> tuple[int, dict, dict]:
    body = json.dumps(payload).encode()
    headers = {
        "Content-Type": "application/json",
        "Idempotency-Key": key,
        **signed_headers(SECRET, body, time.time()),
    }
    async with http.post("/hooks/echo", data=body, headers=headers) as answer:
        return answer.status, await answer.json(), dict(answer.headers)


async def test_a_full_queue_refuses_new_runs_but_answers_replays(
    client: tuple[TestClient, Runtime],
) -> None:
    http, runtime = client
    assert (await post(http, {"n": 1}, "k1"))[0] == 202
    assert (await post(http, {"n": 2}, "k2"))[0] == 202
    # The queue is read at most twice a second; wait that out so the third sees two.
    await asyncio.sleep(0.6)
    status, answer, headers = await post(http, {"n": 3}, "k3")
    assert status == 503
    assert answer["error"] == "busy"
    assert headers["Retry-After"] == "5"
    assert (await runtime.run_counts()) == {"queued": 2}
    # A retry of an accepted delivery still gets its run, not a refusal.
    status, answer, headers = await post(http, {"n": 1}, "k1")
    assert status == 202 and headers.get("Idempotent-Replayed") == "true"
