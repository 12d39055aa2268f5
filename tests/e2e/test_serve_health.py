"""`signoff serve` in-process: health, readiness, metrics and a settings-built app."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from sqlalchemy import text

from bot.serve import Service, build_service
from bot.settings import load_settings

TOKEN = "metrics-test-token-0123456789"


@pytest.fixture
async def service(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Service]:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("SIGNOFF_TEST_LEDGER", str(tmp_path / "ledger.jsonl"))
    settings = load_settings(
        overrides={
            "database_url": f"sqlite+aiosqlite:///{tmp_path / 'health.db'}",
            "app": "tests.e2e.serve_app:agents",
            "port": 0,
            "operator_token": TOKEN,
        }
    )
    running = await build_service(settings)
    await running.start()
    try:
        yield running
    finally:
        await running.stop(grace_seconds=1)


async def get(url: str, path: str) -> tuple[int, str]:
    async with aiohttp.ClientSession() as http, http.get(url + path) as answer:
        return answer.status, await answer.text()


async def api(url: str, method: str, path: str, body: object = None) -> tuple[int, dict]:
    headers = {"Authorization": f"Bearer {TOKEN}"}
    async with (
        aiohttp.ClientSession() as http,
        http.request(method, url + path, json=body, headers=headers) as answer,
    ):
        return answer.status, await answer.json()


def metric(exposition: str, name: str) -> float:
    for line in exposition.splitlines():
        if line.startswith(name + " ") or (
            line.startswith(name + "{") and line.split(" ")[0] == name
        ):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name} not in metrics:\n{exposition}")


def total(exposition: str, name: str) -> float:
    """The sum of every series of `name`, whatever its labels (0 when there is none)."""
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in exposition.splitlines()
        if line.split("{", 1)[0].split(" ", 1)[0] == name
    )


async def figures(service: Service) -> str:
    """`/metrics` once the database-wide figures were read after this call (two turns of
    the figures loop: one may have been reading already)."""
    for _ in range(2):
        service.metrics.figures_turned.clear()
        service.metrics.figures_wake.set()
        await asyncio.wait_for(service.metrics.figures_turned.wait(), timeout=10)
    status, exposition = await get(service.url, "/metrics")
    assert status == 200
    return exposition


async def until_status(url: str, run_id: str, status: str) -> dict:
    for _ in range(200):
        code, run = await api(url, "GET", f"/api/runs/{run_id}")
        if code == 200 and run["status"] == status:
            return run
        await asyncio.sleep(0.05)
    raise AssertionError(f"run {run_id} never became {status}")


async def test_health_and_readiness(service: Service) -> None:
    assert await get(service.url, "/healthz") == (200, json.dumps({"status": "ok"}))
    status, body = await get(service.url, "/readyz")
    assert status == 200 and json.loads(body)["status"] == "ready"


async def test_readiness_fails_when_the_schema_is_behind(service: Service) -> None:
    engine = service.store.engine  # type: ignore[attr-defined]  # the SQL store
    async with engine.begin() as connection:
        await connection.execute(text("DELETE FROM alembic_version"))
    status, body = await get(service.url, "/readyz")
    assert status == 503
    assert "migration" in json.loads(body)["problems"][0]


async def test_metrics_follow_runs_tickets_and_decisions(service: Service) -> None:
    exposition = await figures(service)
    assert metric(exposition, 'signoff_runs{status="awaiting"}') == 0
    assert metric(exposition, "signoff_open_tickets") == 0

    code, started = await api(
        service.url, "POST", "/api/runs", {"agent": "payments", "input": "pay ACC-1"}
    )
    assert code == 202, started
    run = await until_status(service.url, started["run_id"], "awaiting")
    exposition = await figures(service)
    assert metric(exposition, 'signoff_runs{status="awaiting"}') == 1
    assert metric(exposition, "signoff_open_tickets") == 1
    assert total(exposition, "signoff_decision_latency_seconds_count") == 0

    ticket = run["pending"][0]["ticket_id"]
    code, _ = await api(
        service.url, "POST", f"/api/tickets/{ticket}/decision", {"decision": "allow"}
    )
    assert code == 200
    await until_status(service.url, run["run_id"], "done")
    exposition = await figures(service)
    assert metric(exposition, 'signoff_runs{status="done"}') == 1
    assert metric(exposition, "signoff_open_tickets") == 0
    assert total(exposition, "signoff_decision_latency_seconds_count") == 1
    assert metric(exposition, 'signoff_decisions_total{decision="allow",edge="api"}') == 1
