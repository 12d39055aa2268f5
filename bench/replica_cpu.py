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
import contextlib
import json
import os
import platform
import secrets
import statistics
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg
from sqlalchemy.engine import make_url

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from runtime.store.sql import SQLStore  # noqa: E402

TOKEN = "bench-operator-token-0123456789"
COOKIE = "bench-cookie-secret-0123456789-0123456789"
TICK = os.sysconf("SC_CLK_TCK")


def _dsn(url: str) -> str:
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


def cpu_seconds(pid: int, *, children: bool = False) -> float:
    """User + system CPU of `pid` (with its reaped children's), 0 if it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0.0
    fields = stat.rsplit(")", 1)[1].split()
    # After the name: state ppid ... utime(14) stime(15) cutime(16) cstime(17), 1-based.
    used = int(fields[11]) + int(fields[12])
    if children:
        used += int(fields[13]) + int(fields[14])
    return used / TICK


def children_of(pid: int) -> list[int]:
    """The live processes whose parent is `pid`."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            stat = (entry / "stat").read_text()
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
    return found


class Cluster:
    """The PostgreSQL cluster's CPU, without one backend (the client's)."""

    def __init__(self, postmaster: int, skip: int) -> None:
        self.postmaster = postmaster
        self.skip = skip

    def cpu(self) -> float:
        total = cpu_seconds(self.postmaster, children=True)
        for pid in children_of(self.postmaster):
            if pid != self.skip:
                total += cpu_seconds(pid)
        return total


@contextlib.asynccontextmanager
async def database(cluster: str) -> AsyncIterator[str]:
    """A fresh, migrated database on `cluster`; yields its URL."""
    name = f"signoff_cpu_{secrets.token_hex(4)}"
    admin = await asyncpg.connect(_dsn(cluster))
    await admin.execute(f'CREATE DATABASE "{name}"')
    await admin.close()
    url = make_url(cluster).set(database=name).render_as_string(hide_password=False)
    store = SQLStore.from_url(url)
    await store.migrate()
    await store.close()
    try:
        yield url
    finally:
        admin = await asyncpg.connect(_dsn(cluster))
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()


class Replica:
    """One ``signoff serve`` subprocess of the code tree `code`."""

    def __init__(self, code: Path, url: str, extra: dict[str, str]) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("SIGNOFF_")}
        env.update(
            {
                "PYTHONPATH": str(code),
                "SIGNOFF_DATABASE_URL": url,
                "SIGNOFF_APP": "bench.serve_app:agents",
                "SIGNOFF_PORT": "0",
                "SIGNOFF_OPERATOR_TOKEN": TOKEN,
                "SIGNOFF_COOKIE_SECRET": COOKIE,
                "SIGNOFF_AUTO_MIGRATE": "false",
                "SIGNOFF_LOG_LEVEL": "ERROR",
                **extra,
            }
        )
        self.process = subprocess.Popen(
            [sys.executable, "-m", "bot", "serve"],
            cwd=code,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        self.url = ""

    def wait_ready(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            if line.startswith("signoff serving at "):
                self.url = line.split("signoff serving at ", 1)[1].strip()
                return
        raise RuntimeError("signoff serve did not start")

    def cpu(self) -> float:
        return cpu_seconds(self.process.pid)

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(10)
        if self.process.stdout is not None:
            self.process.stdout.close()


async def until(conn: asyncpg.Connection, sql: str, *args: Any) -> Any:
    """Poll `sql` every 50 ms until it returns a truthy value (within 120 s)."""
    deadline = time.monotonic() + 120
    while True:
        found = await conn.fetchval(sql, *args)
        if found:
            return found
        if time.monotonic() > deadline:
            raise RuntimeError(f"never true: {sql}")
        await asyncio.sleep(0.05)


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
    async with database(args.postgres_url) as url:
        started = [Replica(code, url, dict(args.env)) for _ in range(replicas)]
        try:
            await asyncio.gather(*(asyncio.to_thread(r.wait_ready) for r in started))
            urls = [r.url for r in started]
            conn = await asyncpg.connect(_dsn(url))
            try:
                me = int(await conn.fetchval("SELECT pg_backend_pid()"))
                data = Path(await conn.fetchval("SHOW data_directory"))
                postmaster = int((data / "postmaster.pid").read_text().split()[0])
                pg = Cluster(postmaster, me)
                async with aiohttp.ClientSession() as http:
                    await cycles(http, conn, urls, args.warmup, args.batch, hop)
                    before = [r.cpu() for r in started], pg.cpu(), time.monotonic()
                    await cycles(http, conn, urls, args.runs, args.batch, hop)
                    after = [r.cpu() for r in started], pg.cpu(), time.monotonic()
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


def table(rows: list[dict[str, Any]]) -> str:
    headers = list(rows[0])
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    for row in rows:
        cells = [f"{v:.1f}" if isinstance(v, float) else str(v) for v in row.values()]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


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
    parser.add_argument(
        "--postgres-url",
        default=os.environ.get("SIGNOFF_TEST_POSTGRES_URL"),
        help="a PostgreSQL cluster on this machine where databases may be created",
    )
    args = parser.parse_args()
    args.code = [(name, Path(where).resolve()) for name, where in args.code or [("this", ROOT)]]
    return args


if __name__ == "__main__":
    asyncio.run(main(parse()))
