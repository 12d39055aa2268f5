"""What each role of `signoff serve` runs (``SIGNOFF_ROLE``): `bot.bootstrap.build_service`
built as production builds it, its application served by an aiohttp test server."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer
from testkit import echo_model

from bot.bootstrap import Parts, Role, Service, build_service, check_role
from bot.settings import Settings
from runtime import Agent, ConfigurationError
from runtime.engine.deps import Checkpoint
from runtime.worker import Worker

TOKEN = "roles-operator-token-0123456789"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def settings_for(path: Path | None, role: str, **values: Any) -> Settings:
    url = f"sqlite+aiosqlite:///{path}" if path is not None else "sqlite+aiosqlite://"
    return Settings.model_validate(
        {
            "database_url": url,
            "operator_token": TOKEN,
            "cookie_secret": "roles-cookie-secret-0123456789abcdef0123",
            "poll_seconds": 60,  # only a wake-up makes a worker look
            "role": role,
            **values,
        }
    )


def payments() -> Agent:
    agent = Agent("payments", "Move money.", echo_model(("transfer", {"amount": 5})))

    @agent.tool(permission="ask")
    def transfer(amount: int) -> str:
        """Transfer money."""
        return f"sent {amount}"

    return agent


@asynccontextmanager
async def served(
    path: Path,
    role: Role,
    worker_type: type[Worker] = Worker,
    checkpoint: Checkpoint | None = None,
) -> AsyncIterator[tuple[Service, TestClient[Any, Any]]]:
    """The service of `role`, started, its application behind a test server."""
    service = await build_service(
        settings_for(path, role),
        agents=[payments()],
        worker_type=worker_type,
        checkpoint=checkpoint,
        parts=dataclasses.replace(Parts.of_role(role), listen=False),
    )
    client: TestClient[Any, Any] = TestClient(TestServer(service.app, host="127.0.0.1", port=0))
    await client.start_server()
    try:
        await service.start()
        yield service, client
    finally:
        await client.close()
        await service.stop(grace_seconds=1)


def loops(service: Service) -> set[str]:
    # Every role takes its turn at the metrics lease (`bot.metrics.figures_loop`).
    return {task.get_name() for task in service._tasks} - {"metrics"}


def test_each_role_runs_its_parts() -> None:
    assert Parts.of_role("all") == Parts()
    web = Parts.of_role("web")
    assert web.web and web.listen
    assert not (web.worker or web.outbox or web.deadlines or web.discord or web.wake_ups)
    worker = Parts.of_role("worker")
    assert worker.worker and worker.outbox and worker.deadlines and worker.discord
    assert worker.wake_ups and worker.listen
    assert not worker.web


async def test_web_stores_starts_queued_and_runs_no_loop(tmp_path: Path) -> None:
    async with served(tmp_path / "signoff.db", "web") as (service, client):
        assert loops(service) == set()
        answer = await client.post(
            "/api/runs", json={"agent": "payments", "input": "pay"}, headers=AUTH
        )
        assert answer.status == 202, await answer.text()
        started = await answer.json()
        # No hand-over to a local worker place: the run waits for a worker process.
        assert started["status"] == "queued"
        run = await service.runtime.get(started["run_id"], viewer=None)
        assert run.status.value == "queued"
        ready = await client.get("/readyz")
        assert ready.status == 200
        assert (await ready.json())["role"] == "web"
        for path in ("/login", "/runs", "/api/runs"):
            assert (await client.get(path, headers=AUTH)).status == 200, path


async def test_all_hands_a_start_to_its_own_worker(tmp_path: Path) -> None:
    async with served(tmp_path / "signoff.db", "all") as (service, client):
        assert loops(service) == {"worker", "outbox", "deadlines", "wake-ups"}
        answer = await client.post(
            "/api/runs", json={"agent": "payments", "input": "pay"}, headers=AUTH
        )
        assert (await answer.json())["status"] == "running"
        assert (await (await client.get("/readyz")).json())["role"] == "all"


async def test_worker_serves_only_health_and_drives_what_web_stored(tmp_path: Path) -> None:
    path = tmp_path / "signoff.db"
    async with served(path, "web") as (_web, web_client):
        answer = await web_client.post(
            "/api/runs", json={"agent": "payments", "input": "pay"}, headers=AUTH
        )
        run_id = (await answer.json())["run_id"]
    driven: asyncio.Queue[dict[str, Any]] = asyncio.Queue()

    def observe(point: str, info: dict[str, Any]) -> None:
        if point == "run_driven":
            driven.put_nowait(info)

    async with served(path, "worker", checkpoint=observe) as (service, client):
        assert loops(service) == {"worker", "outbox", "deadlines", "wake-ups"}
        for path_ in ("/", "/login", "/runs", "/api/runs", "/api/approvals", "/hooks/x"):
            assert (await client.get(path_, headers=AUTH)).status == 404, path_
        refused = await client.post(
            "/api/runs", json={"agent": "payments", "input": "pay"}, headers=AUTH
        )
        assert refused.status in (404, 405)
        assert (await client.get("/healthz")).status == 200
        assert (await client.get("/metrics")).status == 200
        ready = await client.get("/readyz")
        assert ready.status == 200
        assert (await ready.json())["role"] == "worker"
        # The worker looks once at start: the run the web process stored parks.
        info = await asyncio.wait_for(driven.get(), timeout=20)
        assert info == {"run_id": run_id, "status": "awaiting"}
        run = await service.runtime.get(run_id, viewer=None)
        assert run.status.value == "awaiting"


class Quitting(Worker):
    """A worker whose loop ends at once, as if it had crashed."""

    async def run(self, stop: asyncio.Event) -> None:
        return None


async def test_readyz_is_not_ready_when_a_loop_of_the_role_stopped(tmp_path: Path) -> None:
    async with served(tmp_path / "signoff.db", "worker", Quitting) as (service, client):
        [task] = [t for t in service._tasks if t.get_name() == "worker"]
        await task
        ready = await client.get("/readyz")
        assert ready.status == 503
        body = await ready.json()
        assert body["role"] == "worker"
        assert body["problems"] == ["the worker loop stopped"]


@pytest.mark.parametrize("role", ["web", "worker"])
@pytest.mark.parametrize("url", ["sqlite+aiosqlite://", "sqlite+aiosqlite:///:memory:"])
async def test_a_split_role_on_an_in_memory_database_is_refused(role: str, url: str) -> None:
    settings = settings_for(None, role, database_url=url)
    with pytest.raises(ConfigurationError, match=f"SIGNOFF_ROLE={role}: an in-memory database"):
        check_role(settings)
    with pytest.raises(ConfigurationError, match="in-memory"):
        await build_service(settings, agents=[payments()])


def test_web_on_sqlite_warns_that_nothing_runs_without_a_worker(tmp_path: Path) -> None:
    warning = check_role(settings_for(tmp_path / "signoff.db", "web"))
    assert warning is not None
    assert "drives no runs" in warning and "--role worker" in warning
    assert check_role(settings_for(tmp_path / "signoff.db", "worker")) is None
    assert check_role(settings_for(tmp_path / "signoff.db", "all")) is None
    assert check_role(settings_for(None, "all")) is None
    postgres = settings_for(
        None, "web", database_url="postgresql+asyncpg://signoff@db.internal/signoff"
    )
    assert check_role(postgres) is None  # a commit's NOTIFY wakes the workers


def test_an_unknown_role_is_a_setting_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="role"):
        settings_for(tmp_path / "signoff.db", "both")
