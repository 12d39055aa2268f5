"""Serving signoff in-process and reading its ``/metrics`` the way Prometheus does."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from bot.bootstrap import Service, build_service
from bot.settings import load_settings
from runtime import Agent

TOKEN = "metrics-kit-token-0123456789"


@asynccontextmanager
async def served(
    database: Path, agents: Sequence[Agent] | None = None, **kwargs: Any
) -> AsyncIterator[Service]:
    """A started `signoff serve` on `database` (SQLite), listening on a free port."""
    service = await serve(database, agents, **kwargs)
    try:
        yield service
    finally:
        await service.stop(grace_seconds=1)


async def serve(database: Path, agents: Sequence[Agent] | None = None, **kwargs: Any) -> Service:
    """Start `signoff serve` on `database` (SQLite); the caller stops it."""
    overrides = {
        "database_url": f"sqlite+aiosqlite:///{database}",
        "app": "tests.e2e.serve_app:agents",
        "port": 0,
        "operator_token": TOKEN,
        **kwargs.pop("settings", {}),
    }
    service = await build_service(load_settings(overrides=overrides), agents=agents, **kwargs)
    await service.start()
    return service


async def api(service: Service, method: str, path: str, body: object = None) -> Any:
    """Call the JSON API as the operator; the decoded answer (asserting a 2xx)."""
    headers = {"Authorization": f"Bearer {TOKEN}"}
    async with (
        aiohttp.ClientSession() as http,
        http.request(method, service.url + path, json=body, headers=headers) as answer,
    ):
        data = await answer.json()
        assert answer.status < 300, (answer.status, data)
        return data


async def until_status(service: Service, run_id: str, *statuses: str) -> dict[str, Any]:
    """The run once its status is one of `statuses` (polling the API)."""
    for _ in range(400):
        run: dict[str, Any] = await api(service, "GET", f"/api/runs/{run_id}")
        if run["status"] in statuses:
            return run
        await asyncio.sleep(0.025)
    raise AssertionError(f"run {run_id} never became {statuses}: {run}")


async def turn(service: Service) -> None:
    """Wait for a turn of the figures loop that started after this call (two turns: one
    may have been under way)."""
    for _ in range(2):
        service.metrics.figures_turned.clear()
        service.metrics.figures_wake.set()
        await asyncio.wait_for(service.metrics.figures_turned.wait(), timeout=10)


async def scrape(service: Service, *, fresh: bool = True) -> str:
    """``GET /metrics`` (after a figures turn when `fresh`), as Prometheus scrapes it."""
    if fresh:
        await turn(service)
    async with aiohttp.ClientSession() as http, http.get(service.url + "/metrics") as answer:
        assert answer.status == 200
        assert answer.headers["Content-Type"].startswith("text/plain")
        return await answer.text()


Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def samples(exposition: str) -> Samples:
    """Every sample by (name, labels)."""
    found: Samples = {}
    for family in text_string_to_metric_families(exposition):
        for sample in family.samples:
            found[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return found


def value(exposition: str, name: str, **labels: str) -> float | None:
    """The sample `name` with exactly `labels`, or None."""
    return samples(exposition).get((name, frozenset(labels.items())))


def total(exposition: str, name: str, **labels: str) -> float:
    """The sum of the samples `name` whose labels include `labels`."""
    wanted = set(labels.items())
    return sum(v for (n, have), v in samples(exposition).items() if n == name and wanted <= have)


_SUFFIXES = {
    "counter": ("_total", "_created"),
    "histogram": ("_bucket", "_count", "_sum", "_created"),
    "summary": ("_count", "_sum", "_created"),
}


def declared(exposition: str) -> set[str]:
    """Every series name a query may use: those with samples, and those of each family
    declared (``# TYPE``) even before its first sample (a labelled counter, say)."""
    names = {name for name, _ in samples(exposition)}
    for match in re.finditer(r"^# TYPE (\S+) (\S+)$", exposition, re.MULTILINE):
        name, kind = match.groups()
        names.add(name)
        base = name.removesuffix("_total") if kind == "counter" else name
        names.update(base + suffix for suffix in _SUFFIXES.get(kind, ()))
    return names


_KEYWORDS = frozenset(
    {
        "and", "or", "unless", "by", "without", "on", "ignoring", "group_left",
        "group_right", "offset", "bool", "inf", "nan", "le",
    }
)  # fmt: skip


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression reads."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # strings (label values, templates)
    text = re.sub(r"\{[^}]*\}", "", text)  # label matchers
    text = re.sub(r"\[[^\]]*\]", "", text)  # ranges and subqueries
    text = re.sub(
        r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", text
    )  # grouping labels
    names = set()
    for match in re.finditer(r"(?<![\w$.])([a-zA-Z_:][a-zA-Z0-9_:]*)\b(\s*\()?", text):
        name, call = match.groups()
        if call is None and name not in _KEYWORDS:
            names.add(name)
    return names
