"""CPU per run with one, two and three replicas on one PostgreSQL, old and new code side by side.

Usage::

    .ci/with-postgres .venv/bin/python bench/replica_cpu.py --code after=. --code before=/tmp/before
    python bench/replica_cpu.py --postgres-url postgresql+asyncpg://me@127.0.0.1/postgres

For each round, each code tree (`--code NAME=DIR`, a checkout of this repository; the
configurations are interleaved so that load from elsewhere falls on all of them alike) and
each replica count (`--replicas`, default 1 2 3), a fresh database on the cluster of
`--postgres-url` (or ``SIGNOFF_TEST_POSTGRES_URL``) gets that many real ``signoff serve``
processes of that tree (the agents of `bench/serve_app.py`: one ``ask`` tool, a scripted
model, no network). After `--warmup` cycles, `--runs` full approval cycles are timed in
batches of `--batch`: each run is started over the JSON API on one replica, its ticket is
allowed on the next one, and the batch ends when every run is done and no notification is
pending. This script reads the runs' and tickets' states from the database itself, on one
connection whose backend is left out of the figures.

CPU is read from ``/proc`` before and after the timed cycles: user + system time of every
replica process, and of the PostgreSQL cluster (the postmaster with its reaped children,
and every live backend and auxiliary process but this script's). The cluster must run on
this machine and be used by nothing else meanwhile (``.ci/with-postgres`` starts one).
Printed: ms of CPU per run for each tree and count (replicas, PostgreSQL, both) and the
ratio of three replicas to one.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg  # type: ignore[import-untyped]

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench._pg import (  # noqa: E402
    TOKEN,
    Serve,
    add_cluster_option,
    cluster_cpu,
    cluster_pids,
    dsn,
    fresh_database,
    table,
    until,
)


async def cycles(
    http: aiohttp.ClientSession,
    conn: asyncpg.Connection,
    urls: Sequence[str],
    runs: int,
    batch: int,
    hop: int = 1,
) -> None:
    """`runs` full approval cycles, `batch` at a time."""
    headers = {"Authorization": f"Bearer {TOKEN}"}

    async def post(url: str, body: Any) -> Any:
        async with http.post(url, json=body, headers=headers) as answer:
            assert answer.status in (200, 202), await answer.text()
            return await answer.json()

    done = 0
    while done < runs:
        size = min(batch, runs - done)
        started = await asyncio.gather(
            *(
                post(f"{urls[(done + n) % len(urls)]}/api/runs", {"agent": "refunds", "input": "x"})
                for n in range(size)
            )
        )
        ids = [str(body["run_id"]) for body in started]
        at = {run_id: n for n, run_id in enumerate(ids)}
        await until(
            conn,
            "SELECT count(*) = $2 FROM tickets WHERE run_id = ANY($1) AND status = 'open'",
            ids,
            size,
        )
        tickets = await conn.fetch(
            "SELECT ticket_id, run_id FROM tickets WHERE run_id = ANY($1)", ids
        )
        await asyncio.gather(
            *(
                post(
                    f"{urls[(done + at[row['run_id']] + hop) % len(urls)]}"
                    f"/api/tickets/{row['ticket_id']}/decision",
                    {"decision": "allow"},
                )
                for row in tickets
            )
        )
        await until(
            conn,
            "SELECT count(*) = $2 FROM runs WHERE run_id = ANY($1) AND status = 'done'",
            ids,
            size,
        )
        await until(conn, "SELECT count(*) = 0 FROM outbox WHERE state = 'pending'")
        done += size


async def measure(
    name: str, code: Path, replicas: int, hop: int, args: argparse.Namespace
) -> dict[str, Any]:
    async with fresh_database(args.postgres_url, "signoff_cpu") as url:
        started = [Serve(url, code=code, env=dict(args.env)) for _ in range(replicas)]
        try:
            await asyncio.gather(*(asyncio.to_thread(r.wait_ready) for r in started))
            urls = [r.url for r in started]
            conn = await asyncpg.connect(dsn(url))
            try:
                pg = functools.partial(cluster_cpu, *await cluster_pids(conn))
                async with aiohttp.ClientSession() as http:
                    await cycles(http, conn, urls, args.warmup, args.batch, hop)
                    before = [r.cpu() for r in started], pg(), time.monotonic()
                    await cycles(http, conn, urls, args.runs, args.batch, hop)
                    after = [r.cpu() for r in started], pg(), time.monotonic()
            finally:
                await conn.close()
        finally:
            for replica in started:
                replica.stop()
    served = sum(after[0]) - sum(before[0])
    database_cpu = after[1] - before[1]
    return {
        "code": name,
        "replicas": replicas,
        "wall s": after[2] - before[2],
        "replicas ms/run": 1000 * served / args.runs,
        "postgres ms/run": 1000 * database_cpu / args.runs,
        "total ms/run": 1000 * (served + database_cpu) / args.runs,
    }


async def main(args: argparse.Namespace) -> None:
    if args.postgres_url is None:
        sys.exit("no --postgres-url nor SIGNOFF_TEST_POSTGRES_URL")
    codes: list[tuple[str, Path, int]] = [
        (name if len(args.hop) == 1 else f"{name}, hop {hop}", code, hop)
        for name, code in args.code
        for hop in args.hop
    ]
    rows: list[dict[str, Any]] = []
    for round_ in range(args.rounds):
        for name, code, hop in codes:
            for count in args.replicas:
                row = await measure(name, code, count, hop, args)
                row["round"] = round_ + 1
                print(json.dumps(row), file=sys.stderr, flush=True)
                rows.append(row)
    print(table(rows))
    summary = []
    for name, _, _ in codes:
        medians = {}
        for count in args.replicas:
            mine = [r["total ms/run"] for r in rows if r["code"] == name and r["replicas"] == count]
            medians[count] = statistics.median(mine)
        first, last = args.replicas[0], args.replicas[-1]
        summary.append(
            {
                "code": name,
                **{f"x{count} median ms/run": value for count, value in medians.items()},
                f"ratio {last}/{first}": medians[last] / medians[first],
            }
        )
    print()
    print(table(summary))
    print(
        json.dumps(
            {
                "python": platform.python_version(),
                "cpus": os.cpu_count(),
                "load": os.getloadavg(),
                "runs": args.runs,
                "batch": args.batch,
                "rounds": args.rounds,
            }
        ),
        file=sys.stderr,
    )


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--code",
        action="append",
        type=lambda s: tuple(s.split("=", 1)),
        help="NAME=DIR: a code tree to measure (repeatable; default: this one)",
    )
    parser.add_argument("--replicas", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--runs", type=int, default=200, help="timed cycles per configuration")
    parser.add_argument("--warmup", type=int, default=20, help="untimed cycles first")
    parser.add_argument("--batch", type=int, default=20, help="runs started at once")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument(
        "--hop",
        type=int,
        nargs="+",
        default=[1],
        help="a run is decided on the replica this many after the one it started on "
        "(0: the same one); several: each is measured, as if another code tree",
    )
    parser.add_argument(
        "--env",
        action="append",
        default=[],
        type=lambda s: tuple(s.split("=", 1)),
        help="NAME=VALUE: a setting of every replica (repeatable)",
    )
    add_cluster_option(
        parser, "a PostgreSQL cluster on this machine where databases may be created"
    )
    args = parser.parse_args()
    args.code = [(name, Path(where).resolve()) for name, where in args.code or [("this", ROOT)]]
    return args


if __name__ == "__main__":
    asyncio.run(main(parse()))
