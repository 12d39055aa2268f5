"""How fast the web role acknowledges decisions while every worker slot is busy.

Usage::

    .ci/with-postgres .venv/bin/python bench/web_ack.py
    python bench/web_ack.py --postgres-url postgresql+asyncpg://me@127.0.0.1/postgres \\
        --rounds 3 --clickers 100 --workers 4

Two layouts of real ``signoff serve`` processes on PostgreSQL (the roles need a database
both open; PostgreSQL's ``NOTIFY`` wakes the worker at once, where SQLite would leave it
to its next poll), measured in alternation, each on a fresh database:

- ``split``: one ``--role web`` process that takes every request and one ``--role
  worker`` process that drives the runs;
- ``all``: one ``--role all`` process that does both.

Each process runs the agents of this module (``SIGNOFF_APP=bench.web_ack:agents``):
``refunds`` parks on an ``ask`` tool; ``busy`` calls an allowed tool that works for
`--tool-seconds`, using the CPU for `--tool-busy-ms` of every 20 ms on the process's event
loop, as a tool that parses and computes as it goes does. For each round the script:

1. starts `--clickers` ``refunds`` runs over the JSON API and waits for their tickets;
2. starts twice ``SIGNOFF_WORKERS`` (`--workers`) ``busy`` runs and waits until every
   worker slot holds one (the rest wait queued);
3. sends the `--clickers` decisions (``POST /api/tickets/{id}/decision``, ``allow``) all at
   once, one client each, and times each answer (the acknowledgement: the decision is
   stored; the runs it releases wait for a free slot).

With `--pin` the ``split`` layout's web process runs on the first CPU and its worker on
the second (Linux's CPU affinity), as on machines or CPU quotas of their own; ``all`` runs
on any CPU. PostgreSQL is not pinned.

Printed per layout and round: ack latency p50, p99 and max (ms), every answer's status,
and the CPU the serving processes used while the clicks were answered.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def agents() -> list[Any]:
    """``refunds`` (parks on an ``ask`` tool) and ``busy`` (a long, partly CPU-bound tool).

    Read by ``signoff serve`` through ``SIGNOFF_APP``; the tool's length and CPU share come
    from ``WEB_ACK_TOOL_SECONDS`` and ``WEB_ACK_TOOL_BUSY_MS``.
    """
    from runtime import Agent, final_reply, tool_call_reply

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from serve_app import BenchModel
    from serve_app import agents as refund_agents

    seconds = float(os.environ.get("WEB_ACK_TOOL_SECONDS", "60"))
    busy_ms = float(os.environ.get("WEB_ACK_TOOL_BUSY_MS", "2"))
    model = BenchModel([tool_call_reply(("crunch", {"rows": 1000})), final_reply("Crunched.")])
    busy = Agent("busy", "Crunch what you are given.", model)

    @busy.tool(permission="allow")
    async def crunch(rows: int) -> str:
        """Work through rows for a while."""
        ends = time.monotonic() + seconds
        while time.monotonic() < ends:
            burn = time.process_time() + busy_ms / 1000
            while time.process_time() < burn:
                pass
            await asyncio.sleep(max(0.0, 0.02 - busy_ms / 1000))
        return f"crunched {rows}"

    return [*refund_agents(), busy]


# --- the bench (imports only what the serving processes do not need) ---------------------


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def pinned(role: str) -> set[int] | None:
    """`--pin`: the web process on the first CPU, the worker on the second; ``all`` on any."""
    match role:
        case "web":
            return {0}
        case "worker":
            return {1}
        case _:
            return None


async def measure(layout: str, round_: int, args: argparse.Namespace) -> dict[str, Any]:
    import aiohttp
    import asyncpg  # type: ignore[import-untyped]

    from bench._pg import TOKEN, Serve, dsn, fresh_database, until

    roles = ["web", "worker"] if layout == "split" else ["all"]
    headers = {"Authorization": f"Bearer {TOKEN}"}
    env = {
        "SIGNOFF_WORKERS": str(args.workers),
        "WEB_ACK_TOOL_SECONDS": str(args.tool_seconds),
        "WEB_ACK_TOOL_BUSY_MS": str(args.tool_busy_ms),
    }
    async with fresh_database(args.postgres_url, "signoff_ack") as url:
        servers = [
            Serve(
                url,
                args=("--role", role),
                app="bench.web_ack:agents",
                env=env,
                cpus=pinned(role) if args.pin else None,
            )
            for role in roles
        ]
        try:
            await asyncio.gather(*(asyncio.to_thread(s.wait_ready) for s in servers))
            web = servers[0].url
            conn = await asyncpg.connect(dsn(url))
            try:
                async with aiohttp.ClientSession() as http:

                    async def start(agent: str) -> str:
                        body = {"agent": agent, "input": "go"}
                        async with http.post(f"{web}/api/runs", json=body, headers=headers) as r:
                            assert r.status in (200, 202), await r.text()
                            return str((await r.json())["run_id"])

                    ids = await asyncio.gather(*(start("refunds") for _ in range(args.clickers)))
                    await until(
                        conn,
                        "SELECT count(*) = $2 FROM tickets WHERE run_id = ANY($1) "
                        "AND status = 'open'",
                        list(ids),
                        args.clickers,
                    )
                    tickets = [
                        str(row["ticket_id"])
                        for row in await conn.fetch(
                            "SELECT ticket_id FROM tickets WHERE run_id = ANY($1)", list(ids)
                        )
                    ]
                    for _ in range(2 * args.workers):
                        await start("busy")
                    await until(
                        conn,
                        "SELECT count(*) >= $1 FROM tool_calls WHERE tool = 'crunch' "
                        "AND state = 'dispatched'",
                        args.workers,
                    )
                    before = [s.cpu() for s in servers]
                    statuses: list[int] = []
                    latencies: list[float] = []

                    async def click(ticket: str) -> None:
                        began = time.perf_counter()
                        async with http.post(
                            f"{web}/api/tickets/{ticket}/decision",
                            json={"decision": "allow"},
                            headers=headers,
                        ) as answer:
                            await answer.read()
                            latencies.append(1000 * (time.perf_counter() - began))
                            statuses.append(answer.status)

                    began = time.perf_counter()
                    await asyncio.gather(*(click(t) for t in tickets))
                    wall = time.perf_counter() - began
                    after = [s.cpu() for s in servers]
                    running = await conn.fetchval(
                        "SELECT count(*) FROM tool_calls WHERE tool = 'crunch' "
                        "AND state = 'dispatched'"
                    )
            finally:
                await conn.close()
        finally:
            for server in servers:
                server.stop()
    return {
        "layout": layout,
        "round": round_,
        "clicks": len(latencies),
        "statuses": ",".join(f"{s}x{statuses.count(s)}" for s in sorted(set(statuses))),
        "p50 ms": statistics.median(latencies),
        "p99 ms": percentile(latencies, 0.99),
        "max ms": max(latencies),
        "wall s": wall,
        "serving cpu ms/click": 1000 * (sum(after) - sum(before)) / len(latencies),
        "busy tools running after": int(running),
    }


async def main(args: argparse.Namespace) -> None:
    from bench._pg import table

    if not args.postgres_url:
        sys.exit("no --postgres-url nor SIGNOFF_TEST_POSTGRES_URL")
    print(
        f"machine: {platform.machine()}, nproc {os.cpu_count()}, Python "
        f"{platform.python_version()}, load average {os.getloadavg()}",
        flush=True,
    )
    rows = []
    for round_ in range(1, args.rounds + 1):
        layouts = ["split", "all"] if round_ % 2 else ["all", "split"]
        for layout in layouts:
            row = await measure(layout, round_, args)
            print(row, file=sys.stderr, flush=True)
            rows.append(row)
    print(table(rows))
    for layout in ("split", "all"):
        mine = [r for r in rows if r["layout"] == layout]
        print(
            f"{layout}: median p50 {statistics.median(r['p50 ms'] for r in mine):.1f} ms, "
            f"median p99 {statistics.median(r['p99 ms'] for r in mine):.1f} ms"
        )
    print(f"load average at the end {os.getloadavg()}")


def parse() -> argparse.Namespace:
    from bench._pg import add_cluster_option

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clickers", type=int, default=100, help="decisions sent at once")
    parser.add_argument("--workers", type=int, default=4, help="SIGNOFF_WORKERS of each process")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of each layout")
    parser.add_argument("--tool-seconds", type=float, default=60.0, help="how long a tool works")
    parser.add_argument(
        "--tool-busy-ms", type=float, default=2.0, help="CPU ms of every 20 ms a tool uses"
    )
    parser.add_argument(
        "--pin",
        action="store_true",
        help="split: run the web process on CPU 0 and the worker on CPU 1 (all: on any CPU), "
        "as web and worker processes on CPUs of their own would",
    )
    add_cluster_option(parser)
    parsed = parser.parse_args()
    if parsed.pin and len(os.sched_getaffinity(0)) < 2:
        parser.error("--pin needs two CPUs")
    return parsed


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    asyncio.run(main(parse()))
