"""What the PostgreSQL benchmark scripts share.

`replica_cpu.py`, `replicas.py`, `web_ack.py` and `vs_langgraph.py` import it as
``bench._pg`` (each puts the repository's root on ``sys.path`` first). It holds:

- `dsn`: the libpq URL (for asyncpg and psycopg) of a SQLAlchemy one;
- `fresh_database`: a new, migrated database on a cluster, dropped afterwards;
- `until`: wait for a query to answer a truthy value;
- `Serve`: one real ``signoff serve`` subprocess, its address once it serves, its CPU;
- `cpu_seconds`, `cluster_cpu`, `cluster_pids`: CPU read from ``/proc``, of one process
  and of a PostgreSQL cluster running on this machine;
- `table`: result rows as a Markdown table;
- `add_cluster_option`: the ``--postgres-url`` option;
- `TOKEN` and `COOKIE`: the operator token and cookie secret the served processes get.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import secrets
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import asyncpg  # type: ignore[import-untyped]
from sqlalchemy.engine import make_url

from runtime.store.sql import SQLStore

ROOT = Path(__file__).resolve().parents[1]
TOKEN = "bench-operator-token-0123456789"
COOKIE = "bench-cookie-secret-0123456789-0123456789"
TICK = os.sysconf("SC_CLK_TCK")


def dsn(url: str) -> str:
    """A libpq URL (for asyncpg and psycopg) from a SQLAlchemy one."""
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


async def migrate(url: str) -> None:
    """Create signoff's tables in the empty database `url`."""
    store = SQLStore.from_url(url)
    await store.migrate()
    await store.close()


@contextlib.asynccontextmanager
async def fresh_database(cluster: str, prefix: str) -> AsyncIterator[str]:
    """A fresh, migrated database on `cluster`, named `prefix` and a random suffix.

    Yields its URL; the database is dropped (its connections ended) afterwards.
    """
    name = f"{prefix}_{secrets.token_hex(4)}"
    admin = await asyncpg.connect(dsn(cluster))
    await admin.execute(f'CREATE DATABASE "{name}"')
    await admin.close()
    url = make_url(cluster).set(database=name).render_as_string(hide_password=False)
    await migrate(url)
    try:
        yield url
    finally:
        admin = await asyncpg.connect(dsn(cluster))
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()


async def until(conn: Any, sql: str, *args: Any) -> Any:
    """Poll `sql` on the asyncpg connection `conn` every 50 ms until it returns a truthy
    value (within 120 s); that value."""
    deadline = time.monotonic() + 120
    while True:
        found = await conn.fetchval(sql, *args)
        if found:
            return found
        if time.monotonic() > deadline:
            raise RuntimeError(f"never true: {sql}")
        await asyncio.sleep(0.05)


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


def cluster_cpu(postmaster: int, skip: int) -> float:
    """User + system CPU of a PostgreSQL cluster: the postmaster with its reaped children
    and every live child but the backend `skip` (the measuring script's own)."""
    total = cpu_seconds(postmaster, children=True)
    for pid in children_of(postmaster):
        if pid != skip:
            total += cpu_seconds(pid)
    return total


async def cluster_pids(conn: Any) -> tuple[int, int]:
    """The postmaster's pid and the backend's of the asyncpg connection `conn`.

    The cluster must run on this machine: the pid is read from its data directory.
    """
    backend = int(await conn.fetchval("SELECT pg_backend_pid()"))
    data = Path(await conn.fetchval("SHOW data_directory"))
    return int((data / "postmaster.pid").read_text().split()[0]), backend


class Serve:
    """One ``signoff serve`` subprocess on the database `url`.

    Args:
        url: the database (``SIGNOFF_DATABASE_URL``); migrated already.
        args: more arguments of ``signoff serve`` (``--role web``).
        app: the agents (``SIGNOFF_APP``).
        code: the checkout of this repository to run (its ``bot``, its ``bench``).
        env: more settings, over the ones given here.
        cpus: the CPUs the process may run on (Linux's affinity); None: any.
    """

    def __init__(
        self,
        url: str,
        *,
        args: Sequence[str] = (),
        app: str = "bench.serve_app:agents",
        code: Path = ROOT,
        env: Mapping[str, str] | None = None,
        cpus: set[int] | None = None,
    ) -> None:
        environ = {k: v for k, v in os.environ.items() if not k.startswith("SIGNOFF_")}
        environ.update(
            {
                "PYTHONPATH": str(code),
                "SIGNOFF_DATABASE_URL": url,
                "SIGNOFF_APP": app,
                "SIGNOFF_PORT": "0",
                "SIGNOFF_OPERATOR_TOKEN": TOKEN,
                "SIGNOFF_COOKIE_SECRET": COOKIE,
                "SIGNOFF_AUTO_MIGRATE": "false",
                "SIGNOFF_LOG_LEVEL": "ERROR",
                **(env or {}),
            }
        )
        self.command = " ".join(["signoff serve", *args])
        self.process = subprocess.Popen(
            [sys.executable, "-m", "bot", "serve", *args],
            cwd=code,
            env=environ,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            preexec_fn=None if cpus is None else lambda: os.sched_setaffinity(0, cpus),
        )
        self.url = ""

    def wait_ready(self) -> None:
        """Block until the process says where it serves (`url`)."""
        assert self.process.stdout is not None
        for line in self.process.stdout:
            if line.startswith("signoff serving at "):
                self.url = line.split("signoff serving at ", 1)[1].strip()
                return
        raise RuntimeError(f"{self.command} did not start")

    def cpu(self) -> float:
        """The process's user + system CPU seconds so far."""
        return cpu_seconds(self.process.pid)

    def stop(self) -> None:
        """Terminate the process (kill it after 30 s) and close its output."""
        self.process.terminate()
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(10)
        if self.process.stdout is not None:
            self.process.stdout.close()


def table(rows: list[dict[str, Any]]) -> str:
    """`rows` (one dict each, the first's keys as headers) as a Markdown table; floats to
    one decimal."""
    headers = list(rows[0])
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    for row in rows:
        cells = [f"{v:.1f}" if isinstance(v, float) else str(v) for v in row.values()]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def add_cluster_option(
    parser: argparse.ArgumentParser,
    text: str = "a PostgreSQL cluster where databases may be created",
) -> None:
    """``--postgres-url`` (help `text`), by default ``SIGNOFF_TEST_POSTGRES_URL`` (which
    ``.ci/with-postgres`` sets)."""
    parser.add_argument(
        "--postgres-url", default=os.environ.get("SIGNOFF_TEST_POSTGRES_URL"), help=text
    )
