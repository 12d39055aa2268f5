"""Decisions per second and decision -> resume latency: SQLite, PostgreSQL x1, PostgreSQL x3.

Usage::

    .ci/with-postgres .venv/bin/python bench/replicas.py            # starts a cluster
    python bench/replicas.py --postgres-url postgresql+asyncpg://me@127.0.0.1/postgres
    python bench/replicas.py --runs 300 --concurrency 32 --latency-runs 50

For each configuration, `--replicas` real ``signoff serve`` processes (the agents of
`bench/serve_app.py`: one ``ask`` tool, a scripted model, no network) share one fresh
database: a SQLite file, or a new PostgreSQL database on the cluster of `--postgres-url`
(or ``SIGNOFF_TEST_POSTGRES_URL``), dropped afterwards. This script is the client:

* ``decisions``  `--runs` runs are started over the JSON API and parked (untimed); then
                 one ``allow`` per ticket is sent over the API by `--concurrency` closed-loop
                 clients, spread round-robin over the replicas. Reported: decisions
                 answered per second (each answer means the decision is committed), and
                 runs finished per second from the first decision to the last ``done``.
* ``latency``    `--latency-runs` runs one at a time: park, then decide on the next replica
                 in turn; from the flight recorder, the time from the decision's commit
                 (``ticket_decided``) to a worker claiming the run (``run_claimed``, the
                 resume) and to its end (``run_done``). Across replicas the wake-up is the
                 PostgreSQL ``NOTIFY``; polling (every 0.5 s) is only the fallback.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import re
import secrets
import socket
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import aiohttp
from sqlalchemy import text

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench._pg import TOKEN, Serve, add_cluster_option, fresh_database, migrate, table  # noqa: E402
from runtime.store.sql import SQLStore  # noqa: E402


@contextlib.asynccontextmanager
async def database(kind: str, cluster: str | None, tmp: Path) -> AsyncIterator[str]:
    """A fresh, migrated database; yields its URL."""
    if kind == "sqlite":
        url = f"sqlite+aiosqlite:///{tmp / f'bench-{secrets.token_hex(3)}.db'}"
        await migrate(url)
        yield url
        return
    assert cluster is not None
    async with fresh_database(cluster, "signoff_bench") as url:
        yield url


class Client:
    """The JSON API of the replicas, as the operator."""

    def __init__(self, http: aiohttp.ClientSession, replicas: Sequence[Serve]) -> None:
        self.http = http
        self.urls = [r.url for r in replicas]
        self.headers = {"Authorization": f"Bearer {TOKEN}"}

    async def call(self, method: str, url: str, body: Any = None) -> tuple[int, Any]:
        async with self.http.request(method, url, json=body, headers=self.headers) as answer:
            return answer.status, await answer.json()

    async def start(self, n: int) -> str:
        status, body = await self.call(
            "POST", f"{self.urls[n % len(self.urls)]}/api/runs", {"agent": "refunds", "input": "x"}
        )
        assert status == 202, body
        return str(body["run_id"])

    async def ticket(self, run_id: str) -> str:
        while True:
            status, body = await self.call("GET", f"{self.urls[0]}/api/runs/{run_id}")
            assert status == 200, body
            if body["status"] == "awaiting" and body["pending"]:
                return str(body["pending"][0]["ticket_id"])
            await asyncio.sleep(0.01)

    async def decide(self, n: int, ticket_id: str) -> None:
        url = f"{self.urls[n % len(self.urls)]}/api/tickets/{ticket_id}/decision"
        status, body = await self.call("POST", url, {"decision": "allow"})
        assert status == 200, body

    async def status(self, run_id: str) -> str:
        _, body = await self.call("GET", f"{self.urls[0]}/api/runs/{run_id}")
        return str(body["status"])


async def events(url: str, kinds: Sequence[str]) -> dict[str, dict[str, list[int]]]:
    """`at` (microseconds) of the flight-recorder events of `kinds`, by run."""
    store = SQLStore.from_url(url)
    found: dict[str, dict[str, list[int]]] = {}
    try:
        async with store.engine.connect() as conn:
            rows = await conn.execute(text("SELECT run_id, kind, at FROM events ORDER BY seq"))
            for run_id, kind, at in rows:
                if kind in kinds:
                    found.setdefault(run_id, {}).setdefault(kind, []).append(int(at))
    finally:
        await store.close()
    return found


async def park(client: Client, runs: int, concurrency: int) -> list[tuple[str, str]]:
    """Start and park `runs` runs; their (run id, ticket id)."""
    slots = asyncio.Semaphore(concurrency)

    async def one(n: int) -> tuple[str, str]:
        async with slots:
            run_id = await client.start(n)
            return run_id, await client.ticket(run_id)

    return list(await asyncio.gather(*(one(n) for n in range(runs))))


async def until_done(client: Client, count: int) -> None:
    """Wait until `count` runs are done, as the servers' metrics say (no extra writer).

    Only the replica holding the ``metrics`` lease exports ``signoff_runs``, computed
    every ``SIGNOFF_METRICS_INTERVAL_SECONDS``: every replica's ``/metrics`` is read in
    turn, and the wait may end up to an interval late (the time of the last ``done`` is
    taken from the runs' events instead).
    """
    pattern = re.compile(r'^signoff_runs\{status="done"\} ([0-9.e+]+)$', re.M)
    while True:
        for url in client.urls:
            async with client.http.get(f"{url}/metrics") as answer:
                found = pattern.search(await answer.text())
            if found and float(found.group(1)) >= count:
                return
        await asyncio.sleep(0.02)


def pct(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def measure(kind: str, replicas: int, args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    async with database(kind, args.postgres_url, tmp) as url:
        started = [Serve(url) for _ in range(replicas)]
        try:
            await asyncio.gather(*(asyncio.to_thread(r.wait_ready) for r in started))
            async with aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=args.concurrency * 2)
            ) as http:
                client = Client(http, started)
                parked = await park(client, args.runs, args.concurrency)
                queue = list(enumerate(parked))
                began = time.perf_counter()
                began_at = time.time()

                async def decider() -> None:
                    while queue:
                        n, (_, ticket_id) = queue.pop()
                        await client.decide(n, ticket_id)

                await asyncio.gather(*(decider() for _ in range(args.concurrency)))
                answered = time.perf_counter() - began
                await until_done(client, args.runs)
                # Latency: one run at a time.
                singles = []
                for n in range(args.latency_runs):
                    run_id = await client.start(n)
                    ticket_id = await client.ticket(run_id)
                    await client.decide(n + 1, ticket_id)
                    singles.append(run_id)
                    while await client.status(run_id) != "done":  # noqa: ASYNC110
                        await asyncio.sleep(0.005)
            found = await events(url, ("ticket_decided", "run_claimed", "run_done"))
        finally:
            for replica in started:
                replica.stop()
    # The last of the decided runs' `run_done`, by the replicas' clocks (this machine's).
    last_done = max(found[run_id]["run_done"][-1] for run_id, _ in parked)
    finished = last_done / 1_000_000 - began_at
    claim_ms, done_ms = [], []
    for run_id in singles:
        runs = found[run_id]
        decided = runs["ticket_decided"][-1]
        claimed = next(at for at in runs["run_claimed"] if at >= decided)
        claim_ms.append((claimed - decided) / 1000)
        done_ms.append((runs["run_done"][-1] - decided) / 1000)
    return {
        "store": "SQLite file" if kind == "sqlite" else "PostgreSQL",
        "replicas": replicas,
        "decisions/s": args.runs / answered,
        "finished/s": args.runs / finished,
        "resume p50 ms": statistics.median(claim_ms),
        "resume p95 ms": pct(claim_ms, 0.95),
        "done p50 ms": statistics.median(done_ms),
        "done p95 ms": pct(done_ms, 0.95),
    }


async def main(args: argparse.Namespace) -> None:
    configs = [("sqlite", 1), ("postgresql", 1), ("postgresql", 3)]
    if args.postgres_url is None:
        print("no --postgres-url nor SIGNOFF_TEST_POSTGRES_URL: SQLite only", file=sys.stderr)
        configs = configs[:1]
    with tempfile.TemporaryDirectory() as tmp:
        rows = [await measure(kind, n, args, Path(tmp)) for kind, n in configs]
    print(table(rows))
    print(
        json.dumps(
            {
                "host": socket.gethostname(),
                "python": platform.python_version(),
                "cpus": os.cpu_count(),
                "load": os.getloadavg(),
                "runs": args.runs,
                "concurrency": args.concurrency,
                "latency_runs": args.latency_runs,
            }
        ),
        file=sys.stderr,
    )


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=300, help="runs decided concurrently")
    parser.add_argument("--concurrency", type=int, default=16, help="closed-loop API clients")
    parser.add_argument("--latency-runs", type=int, default=40, help="runs decided one by one")
    add_cluster_option(parser)
    return parser.parse_args()


if __name__ == "__main__":
    asyncio.run(main(parse()))
