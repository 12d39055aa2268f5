"""signoff next to LangGraph: the same approval cycle on the same SQLite file, in rounds.

Usage (LangGraph is a bench-only dependency, see ``bench/requirements.txt``)::

    python3.11 -m venv bench/.venv
    bench/.venv/bin/pip install -e . -r bench/requirements.txt
    bench/.venv/bin/python bench/vs_langgraph.py                      # 3 rounds of 300 cycles
    bench/.venv/bin/python bench/vs_langgraph.py --rounds 5 --runs 500 --concurrency 16
    .ci/with-postgres bench/.venv/bin/python bench/vs_langgraph.py --database postgres \
        --concurrency 16,64 --pg-stat-statements

The cycle, on both sides: a scripted model proposes one tool call that needs approval, the
run parks durably, it is approved, the tool runs, a second model call answers, the run is
done. Both write to one SQLite file (WAL, ``synchronous=FULL``), each to its own tables.

- signoff: `Runtime.start` (parks on an ``ask`` tool), then `Runtime.approve(...,
  resume=True)`; `SQLStore` on the file.
- LangGraph: a `StateGraph` with an ``agent`` node (the model) and a ``tools`` node that
  calls ``interrupt()`` before running the tool; `AsyncSqliteSaver` on the same file;
  ``ainvoke(input)`` parks, ``ainvoke(Command(resume="allow"))`` finishes. With
  ``durability="sync"`` every checkpoint is committed before the graph goes on (what
  signoff does with every step); ``"async"`` writes them in the background.

Each round measures, one after the other (the order alternates between rounds):

- the disk: raw committed transactions per second with `sqlite3` on the same file (WAL,
  FULL, one small insert per transaction);
- each system one cycle at a time (``c1``), and ``--concurrency`` cycles at once;

and prints cycles/s, CPU ms per cycle (this process, every thread), commits per cycle
(LangGraph: the COMMITs that changed a row; the others sync nothing),
and signoff's ratio to each LangGraph variant. ``disk %`` is cycles/s divided by the
disk's bound (raw commits/s over commits per cycle; signoff counts the commits it makes
durable, which transactions running at once share).

``signoff SQL replayed c1`` is the floor under signoff's own row: the statements and
commits signoff's store ran for `--runs` cycles (recorded in an untimed pass, with their
bound values), run again in the same order by plain `sqlite3` on a fresh database in the
same directory, with nothing else (no model, tool, records, JSON or checks). Its ``disk
%`` is what a runtime writing exactly what signoff writes, at no cost of its own, would
reach.

``--database postgres`` runs the same cycle on PostgreSQL (the cluster of
``--postgres-url`` or ``SIGNOFF_TEST_POSTGRES_URL``, on this machine): each side gets a
fresh database of its own on that server, signoff a `SQLStore` with its default pool
(15 connections, opened as needed and kept; ``--signoff-pool N``: N), LangGraph one
`AsyncPostgresSaver` on a psycopg ``AsyncConnectionPool`` of up to 15 (autocommit,
``prepare_threshold=0``, dict rows; the setup its documentation gives). Each measured
block opens the system anew, warms it, waits for PostgreSQL's statistics to settle, runs,
closes every connection and waits for the backends to leave, so the per-database
counters of ``pg_stat_database`` are exact:

- ``xact/cycle``: committed transactions (``xact_commit``; autocommitted single statements
  count as one each);
- ``WAL B/cycle``: WAL bytes (``pg_current_wal_lsn`` delta; only one side runs at a time);
- ``pg cpu ms/cycle``: CPU of the cluster's processes (``/proc``), next to this process's;
- ``stmts/cycle``: statements per cycle, ``BEGIN`` and ``COMMIT`` included (with
  ``--pg-stat-statements``, which also lists the statements that took most of the
  server's time, per side). The extension must be preloaded, which needs a restart: the
  flag sets ``shared_preload_libraries`` with ``ALTER SYSTEM`` and restarts the cluster
  with ``pg_ctl`` (as the data directory's owner) when it is not loaded yet;
- ``signoff SQL replayed c1``: the floor under signoff's row, as on SQLite: the
  statements signoff's store sent for `--runs` cycles (recorded on a database of their
  own, with their bound values, ``BEGIN`` and ``COMMIT``), sent again in the same order by
  one plain asyncpg connection to a fresh database, each statement prepared once. Its
  ``stmts/cycle`` is the round trips a cycle costs.

``--durable`` restarts the cluster with ``fsync``, ``synchronous_commit`` and
``full_page_writes`` on (``.ci/with-postgres`` starts it with all three off). After the
rounds, ``--parked N`` parks N runs on each side (never decided) and prints the bytes each
takes in its tables, indexes included; ``--profile FILE`` profiles `--runs` signoff cycles,
one at a time, with pyinstrument and writes the call tree to FILE. Use these flags on a
throwaway cluster only.
"""

from __future__ import annotations

import argparse
import asyncio
import operator
import os
import platform
import pwd
import secrets
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, TypedDict

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import aiosqlite
import asyncpg  # type: ignore[import-untyped]
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool
from serve_app import BenchModel
from sqlalchemy.engine import make_url

from bench._pg import cluster_cpu, cluster_pids, dsn
from runtime import Agent, RunStatus, Runtime, final_reply, tool_call_reply
from runtime.store.sql import PoolOptions, SQLStore
from runtime.store.sql.postgres_direct import DirectConnection

# --- the work ----------------------------------------------------------------------------


async def refund(order: str, amount: float) -> str:
    """The tool both sides run once approved."""
    return f"refunded {amount} on {order}"


def signoff_agent() -> Agent:
    model = BenchModel(
        [tool_call_reply(("refund", {"order": "A-1", "amount": 25})), final_reply("Refunded.")]
    )
    agent = Agent("refunds", "Refund what you are asked to.", model)
    agent.tool(permission="ask")(refund)
    return agent


class State(TypedDict):
    messages: Annotated[list[dict[str, Any]], operator.add]


async def lg_agent(state: State) -> dict[str, Any]:
    # The scripted model: a tool call first, the answer once the tool's result is in.
    if any(m["role"] == "tool" for m in state["messages"]):
        return {"messages": [{"role": "assistant", "content": "Refunded."}]}
    call = {"id": "call_1", "name": "refund", "args": {"order": "A-1", "amount": 25}}
    return {"messages": [{"role": "assistant", "content": None, "tool_calls": [call]}]}


async def lg_tools(state: State) -> dict[str, Any]:
    results = []
    for call in state["messages"][-1]["tool_calls"]:
        answer = interrupt({"tool": call["name"], "args": call["args"]})
        content = await refund(**call["args"]) if answer == "allow" else "Permission denied"
        results.append({"role": "tool", "tool_call_id": call["id"], "content": content})
    return {"messages": results}


def lg_route(state: State) -> str:
    return "tools" if state["messages"][-1].get("tool_calls") else END


async def lg_cycle(graph: Any, durability: str, thread: str, n: int) -> None:
    """One cycle of a compiled graph: park on the interrupt, resume with ``allow``."""
    config = {"configurable": {"thread_id": thread}}
    start = {"messages": [{"role": "user", "content": f"refund order {n}"}]}
    parked = await graph.ainvoke(start, config, durability=durability)
    if "__interrupt__" not in parked:
        raise RuntimeError("LangGraph run did not park")
    done = await graph.ainvoke(Command(resume="allow"), config, durability=durability)
    if done["messages"][-1]["content"] != "Refunded.":
        raise RuntimeError(f"LangGraph run did not finish: {done['messages'][-1]}")


def lg_graph(saver: AsyncSqliteSaver | AsyncPostgresSaver) -> Any:
    builder = StateGraph(State)
    builder.add_node("agent", lg_agent)
    builder.add_node("tools", lg_tools)
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", lg_route, ["tools", END])
    builder.add_edge("tools", "agent")
    return builder.compile(checkpointer=saver)


# --- measuring --------------------------------------------------------------------------


@dataclass
class Result:
    name: str
    cycles: int
    seconds: float
    cpu_seconds: float
    commits: int

    @property
    def rate(self) -> float:
        return self.cycles / self.seconds

    @property
    def commits_per_cycle(self) -> float:
        return self.commits / self.cycles


async def in_tasks(count: int, concurrency: int, work: Callable[[int], Awaitable[None]]) -> None:
    numbers = iter(range(count))

    async def worker() -> None:
        for n in numbers:
            await work(n)

    await asyncio.gather(*(worker() for _ in range(concurrency)))


async def timed(
    name: str,
    count: int,
    concurrency: int,
    work: Callable[[int], Awaitable[None]],
    commits: Callable[[], int],
) -> Result:
    before = commits()
    began, cpu = time.perf_counter(), time.process_time()
    await in_tasks(count, concurrency, work)
    seconds, cpu = time.perf_counter() - began, time.process_time() - cpu
    return Result(name, count, seconds, cpu, commits() - before)


def plain_sqlite(path: Path) -> sqlite3.Connection:
    """A plain `sqlite3` connection to `path` in WAL mode, ``synchronous=FULL``,
    autocommit (transactions are begun by the statements)."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    return conn


def raw_commits(path: Path, seconds: float = 1.0) -> float:
    """Committed transactions per second of plain `sqlite3` on `path` (WAL, FULL)."""
    conn = plain_sqlite(path)
    try:
        conn.execute("CREATE TABLE IF NOT EXISTS bench_raw (id INTEGER PRIMARY KEY, v TEXT)")
        done = 0
        began = time.perf_counter()
        while (elapsed := time.perf_counter() - began) < seconds:
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("INSERT INTO bench_raw (v) VALUES (?)", ("x" * 100,))
            conn.execute("COMMIT")
            done += 1
        conn.execute("DELETE FROM bench_raw")
        return done / elapsed
    finally:
        conn.close()


class Signoff:
    def __init__(self, path: Path) -> None:
        self.store = SQLStore.sqlite(path, synchronous="full")
        self.runtime = Runtime(self.store, [signoff_agent()])

    async def open(self) -> None:
        await self.store.migrate()

    async def cycle(self, n: int) -> None:
        parked = await self.runtime.start("refunds", f"refund order {n}", requester="U1")
        if parked.status is not RunStatus.AWAITING:
            raise RuntimeError(f"signoff run did not park: {parked.status}")
        done = await self.runtime.approve(parked.pending[0], resume=True)
        if done.status is not RunStatus.DONE or done.text != "Refunded.":
            raise RuntimeError(f"signoff run did not finish: {done.status} {done.error}")

    def commits(self) -> int:
        return self.store.syncs

    async def close(self) -> None:
        await self.store.close()


class StatementLog:
    """What a SQLite store runs, in order, with bound values: statements and commits.

    Wraps the methods of the store's writer that reach its connection (in this process
    only; the benchmark's own instrument).
    """

    def __init__(self, store: SQLStore) -> None:
        writer = store.writer
        if writer is None:
            raise RuntimeError("not a SQLite store")
        self.entries: list[tuple[str, str, Any]] = []
        log = self.entries
        execute, run_sql, commit = writer.execute, writer._sql, writer._commit

        def recording_execute(conn: sqlite3.Connection, statement: Any, params: Any) -> Any:
            if type(params) is list:
                if params:
                    plan = writer.plan(statement, list(params[0]))
                    log.append(("many", plan.sql, [plan.parameters(p) for p in params]))
            else:
                given = params or {}
                plan = writer.plan(statement, list(given))
                sql, values = (
                    plan.expand(given) if plan.expanding else (plan.sql, plan.parameters(given))
                )
                log.append(("one", sql, values))
            return execute(conn, statement, params)

        def recording_sql(conn: sqlite3.Connection, sql: str) -> None:
            log.append(("sql", sql, None))
            run_sql(conn, sql)

        def recording_commit(conn: sqlite3.Connection) -> None:
            log.append(("commit", "", None))
            commit(conn)

        writer.execute = recording_execute  # type: ignore[method-assign]
        writer._sql = recording_sql  # type: ignore[method-assign]
        writer._commit = recording_commit  # type: ignore[method-assign]


async def record_signoff(path: Path, runs: int) -> list[tuple[str, str, Any]]:
    """signoff's statements for `runs` cycles one at a time, on a database of its own."""
    signoff = Signoff(path)
    await signoff.open()
    try:
        log = StatementLog(signoff.store)
        for n in range(runs):
            await signoff.cycle(n)
        return log.entries
    finally:
        await signoff.close()


def replay(path: Path, entries: list[tuple[str, str, Any]], cycles: int) -> Result:
    """Run recorded statements again with plain `sqlite3` on `path` (WAL, FULL)."""
    conn = plain_sqlite(path)
    try:
        conn.execute("PRAGMA foreign_keys=ON")
        commits = 0
        began, cpu = time.perf_counter(), time.process_time()
        for kind, sql, values in entries:
            if kind == "one":
                cursor = conn.execute(sql, values)
                cursor.fetchall()
                cursor.close()
            elif kind == "many":
                conn.executemany(sql, values)
            elif kind == "sql":
                if sql.startswith("BEGIN") and conn.in_transaction:
                    conn.commit()  # a transaction that wrote nothing ended without a sync
                conn.execute(sql).close()
            else:
                conn.commit()
                commits += 1
        if conn.in_transaction:
            conn.commit()
        seconds, cpu = time.perf_counter() - began, time.process_time() - cpu
        return Result("signoff SQL replayed c1", cycles, seconds, cpu, commits)
    finally:
        conn.close()


async def sql_floor(beside: Path, runs: int) -> Result:
    """Record signoff's statements for `runs` cycles, then replay them on a fresh file
    (both in a scratch directory beside `beside`: the same disk)."""
    with tempfile.TemporaryDirectory(prefix="signoff-floor-", dir=beside.parent) as scratch:
        directory = Path(scratch)
        entries = await record_signoff(directory / "recorded.db", runs)
        target = SQLStore.sqlite(directory / "replayed.db")
        await target.migrate()
        await target.close()
        return replay(directory / "replayed.db", entries, runs)


class LangGraph:
    def __init__(self, path: Path, durability: str) -> None:
        self.path = path
        self.durability = durability
        self.committed = 0
        self.conn: aiosqlite.Connection | None = None

    async def open(self) -> None:
        self.conn = await aiosqlite.connect(self.path)
        await self.conn.execute("PRAGMA journal_mode=WAL")
        await self.conn.execute("PRAGMA synchronous=FULL")
        saver = AsyncSqliteSaver(self.conn)
        await saver.setup()

        raw = self.conn._conn  # the sqlite3 connection; the trace runs on its thread
        changes = raw.total_changes

        def traced(statement: str) -> None:
            # A COMMIT that changed no row (an INSERT OR IGNORE that ignored) writes no
            # page and syncs nothing: count only those that did.
            nonlocal changes
            if statement.strip().upper().startswith("COMMIT") and raw.total_changes != changes:
                changes = raw.total_changes
                self.committed += 1

        await self.conn.set_trace_callback(traced)
        self.graph = lg_graph(saver)
        self.thread_prefix = f"t{time.monotonic_ns()}-"

    async def cycle(self, n: int) -> None:
        await lg_cycle(self.graph, self.durability, f"{self.thread_prefix}{n}", n)

    def commits(self) -> int:
        return self.committed

    async def close(self) -> None:
        if self.conn is not None:
            await self.conn.close()


async def one_round(
    path: Path, runs: int, levels: tuple[int, ...], first: str
) -> tuple[float, dict[str, Result]]:
    results: dict[str, Result] = {}
    signoff = Signoff(path)
    graphs = {d: LangGraph(path, d) for d in ("sync", "async")}
    await signoff.open()
    for graph in graphs.values():
        await graph.open()
    try:
        for warm in range(20):  # imports, statement caches, the first pages
            await signoff.cycle(-1 - warm)
            for graph in graphs.values():
                await graph.cycle(-1 - warm)
        disk = raw_commits(path)
        order = ["signoff", "sync", "async"]
        if first != "signoff":
            order = ["sync", "async", "signoff"]
        for tasks in levels:
            for who in order:
                system = signoff if who == "signoff" else graphs[who]
                label = "signoff" if who == "signoff" else f"langgraph {who}"
                offset = 1_000_000 * tasks
                results[f"{label} c{tasks}"] = await timed(
                    f"{label} c{tasks}",
                    runs,
                    tasks,
                    lambda n, s=system, o=offset: s.cycle(o + n),  # type: ignore[misc]
                    system.commits,
                )
        results["signoff SQL replayed c1"] = await sql_floor(path, runs)
    finally:
        await signoff.close()
        for graph in graphs.values():
            await graph.close()
    return disk, results


def report_round(
    number: int, disk: float, results: dict[str, Result], levels: tuple[int, ...]
) -> str:
    lines = [
        f"round {number}: disk {disk:.0f} commits/s (sqlite3 WAL FULL), "
        f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}",
        f"  {'':<22} {'cycles/s':>9} {'cpu ms/cycle':>13} {'commits/cycle':>14} {'disk %':>7}",
    ]
    for name, r in results.items():
        bound = disk / r.commits_per_cycle if r.commits else float("inf")
        lines.append(
            f"  {name:<22} {r.rate:>9.1f} {1000 * r.cpu_seconds / r.cycles:>13.2f} "
            f"{r.commits_per_cycle:>14.2f} {100 * r.rate / bound:>6.0f}%"
        )
    floor = results.get("signoff SQL replayed c1")
    if floor is not None:
        lines.append(
            f"  signoff c1 / its SQL replayed: {results['signoff c1'].rate / floor.rate:.2f}x"
        )
    for tasks in levels:
        ours = results[f"signoff c{tasks}"].rate
        ratios = ", ".join(
            f"{ours / results[f'langgraph {d} c{tasks}'].rate:.2f}x vs {d}"
            for d in ("sync", "async")
        )
        lines.append(f"  ratio c{tasks}: signoff {ratios}")
    return "\n".join(lines)


# --- PostgreSQL ---------------------------------------------------------------------------


@dataclass
class PgResult(Result):
    xacts: int = 0
    wal_bytes: int = 0
    pg_cpu_seconds: float = 0.0
    statements: int = 0
    top: list[tuple[str, int, float]] | None = None


class Monitor:
    """One connection to the cluster's ``postgres`` database that reads the counters."""

    def __init__(self, cluster: str) -> None:
        self.cluster = cluster
        self.conn: asyncpg.Connection | None = None
        self.statements = False

    async def open(self, want_statements: bool, durable: bool) -> None:
        self.conn = await asyncpg.connect(dsn(self.cluster))
        loaded = await self.conn.fetchval("SHOW shared_preload_libraries")
        fsync = await self.conn.fetchval("SHOW fsync")
        if (want_statements and "pg_stat_statements" not in loaded) or (durable and fsync != "on"):
            if want_statements:
                await self.conn.execute(
                    "ALTER SYSTEM SET shared_preload_libraries = 'pg_stat_statements'"
                )
            # pg_ctl restart with -o replaces the options the cluster was started with:
            # give back those that reach it, and the durability asked for.
            kept = {}
            for setting in (
                "listen_addresses",
                "port",
                "unix_socket_directories",
                "max_connections",
                "shared_buffers",
                "fsync",
                "synchronous_commit",
                "full_page_writes",
            ):
                kept[setting] = await self.conn.fetchval(f"SHOW {setting}")
            if durable:
                kept.update(fsync="on", synchronous_commit="on", full_page_writes="on")
            options = " ".join(f"-c {key}={value}" for key, value in kept.items())
            data = Path(await self.conn.fetchval("SHOW data_directory"))
            await self.conn.close()
            await asyncio.to_thread(restart_cluster, data, options)
            self.conn = await asyncpg.connect(dsn(self.cluster))
        if want_statements:
            await self.conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
            self.statements = True
        self.postmaster, self.me = await cluster_pids(self.conn)

    async def new_database(self, prefix: str) -> str:
        assert self.conn is not None
        name = f"{prefix}_{secrets.token_hex(4)}"
        await self.conn.execute(f'CREATE DATABASE "{name}"')
        return name

    async def drop(self, name: str) -> None:
        assert self.conn is not None
        await self.conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    async def xacts(self, name: str) -> int:
        assert self.conn is not None
        await self.conn.execute("SELECT pg_stat_clear_snapshot()")
        return int(
            await self.conn.fetchval(
                "SELECT xact_commit FROM pg_stat_database WHERE datname = $1", name
            )
        )

    async def settled(self, name: str) -> int:
        """The database's commit count once no backend of it has stats left to report.

        Backends report their counters when idle, at most once a second: the count is
        taken when it has not moved for 1.2 s.
        """
        last = await self.xacts(name)
        while True:
            await asyncio.sleep(1.2)
            now = await self.xacts(name)
            if now == last:
                return now
            last = now

    async def gone(self, name: str) -> None:
        """Wait until no backend is connected to `name` (they report their stats on exit)."""
        assert self.conn is not None
        deadline = time.monotonic() + 30
        while await self.conn.fetchval(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = $1", name
        ):
            if time.monotonic() > deadline:
                raise RuntimeError(f"backends of {name} did not leave")
            await asyncio.sleep(0.05)

    async def wal(self) -> int:
        assert self.conn is not None
        return int(await self.conn.fetchval("SELECT pg_current_wal_lsn() - '0/0'::pg_lsn"))

    async def statement_calls(self, name: str) -> dict[str, tuple[int, float]]:
        """``query -> (calls, total exec ms)`` of database `name` (pg_stat_statements)."""
        if not self.statements:
            return {}
        assert self.conn is not None
        rows = await self.conn.fetch(
            "SELECT query, sum(calls)::bigint AS calls, sum(total_exec_time) AS ms "
            "FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid "
            "WHERE d.datname = $1 GROUP BY query",
            name,
        )
        return {row["query"]: (int(row["calls"]), float(row["ms"])) for row in rows}

    async def close(self) -> None:
        if self.conn is not None:
            await self.conn.close()


def restart_cluster(data: Path, options: str) -> None:
    """``pg_ctl restart`` the cluster in `data` with `options`, as the directory's owner."""
    pg_ctl = str(Path(pg_bindir()) / "pg_ctl")
    command = [pg_ctl, "-D", str(data), "-w", "-m", "fast", "-o", options, "restart"]
    owner = data.stat().st_uid
    if os.getuid() == 0 and owner != 0:
        command = ["runuser", "-u", pwd.getpwuid(owner).pw_name, "--", *command]
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)


def pg_bindir() -> str:
    found = os.environ.get("PG_BINDIR")
    if found:
        return found
    dirs = sorted(Path("/usr/lib/postgresql").glob("*/bin"), key=lambda d: int(d.parent.name))
    if not dirs:
        raise RuntimeError("no PostgreSQL binaries: set PG_BINDIR")
    return str(dirs[-1])


SIGNOFF_POOL: PoolOptions | None = None
"""signoff's pool on PostgreSQL (`--signoff-pool`); None: the store's default."""


class PgSignoff(Signoff):
    def __init__(self, url: str) -> None:
        self.store = SQLStore.from_url(url, pool=SIGNOFF_POOL)
        self.runtime = Runtime(self.store, [signoff_agent()])


class PgLangGraph:
    def __init__(self, url: str, durability: str, pool_size: int) -> None:
        self.url = url
        self.durability = durability
        self.pool_size = pool_size
        self.pool: AsyncConnectionPool[Any] | None = None

    async def open(self) -> None:
        self.pool = AsyncConnectionPool(
            dsn(self.url),
            min_size=5,
            max_size=self.pool_size,
            kwargs={"autocommit": True, "prepare_threshold": 0, "row_factory": dict_row},
            open=False,
        )
        await self.pool.open(wait=True)
        saver = AsyncPostgresSaver(self.pool)
        await saver.setup()
        self.graph = lg_graph(saver)
        self.thread_prefix = f"t{time.monotonic_ns()}-"

    async def cycle(self, n: int) -> None:
        await lg_cycle(self.graph, self.durability, f"{self.thread_prefix}{n}", n)

    def commits(self) -> int:
        return 0

    async def close(self) -> None:
        if self.pool is not None:
            await self.pool.close()


async def pg_block(
    monitor: Monitor, name: str, url: str, who: str, runs: int, tasks: int, seed: int
) -> PgResult:
    """Open `who` on `url`, warm it, time `runs` cycles `tasks` at once, close it."""
    system: PgSignoff | PgLangGraph
    system = PgSignoff(url) if who == "signoff" else PgLangGraph(url, who, pool_size=15)
    await system.open()
    try:
        for warm in range(10):
            await system.cycle(seed - 1 - warm)
        before_xacts = await monitor.settled(name)
        before_calls = await monitor.statement_calls(name)
        before_wal = await monitor.wal()
        before_pg = cluster_cpu(monitor.postmaster, monitor.me)
        began, cpu = time.perf_counter(), time.process_time()
        await in_tasks(runs, tasks, lambda n: system.cycle(seed + n))
        seconds, cpu = time.perf_counter() - began, time.process_time() - cpu
        after_pg = cluster_cpu(monitor.postmaster, monitor.me)
        after_wal = await monitor.wal()
    finally:
        await system.close()
    await monitor.gone(name)
    after_xacts = await monitor.xacts(name)
    after_calls = await monitor.statement_calls(name)
    delta = {
        query: (
            calls - before_calls.get(query, (0, 0.0))[0],
            ms - before_calls.get(query, (0, 0.0))[1],
        )
        for query, (calls, ms) in after_calls.items()
    }
    top = sorted(((q, c, ms) for q, (c, ms) in delta.items() if c > 0), key=lambda t: -t[2])
    label = "signoff" if who == "signoff" else f"langgraph {who}"
    return PgResult(
        f"{label} c{tasks}",
        runs,
        seconds,
        cpu,
        commits=after_xacts - before_xacts,
        xacts=after_xacts - before_xacts,
        wal_bytes=after_wal - before_wal,
        pg_cpu_seconds=after_pg - before_pg,
        statements=sum(calls for _, calls, _ in top),
        top=top,
    )


class PgStatementLog:
    """What signoff's PostgreSQL store sends, in order, with bound values: each execution
    of a prepared statement, ``BEGIN`` and ``COMMIT``.

    Wraps the methods of `DirectConnection` that reach the driver while the block runs
    (in this process only; the benchmark's own instrument).
    """

    def __init__(self) -> None:
        self.entries: list[tuple[str, str, Any]] = []
        self._saved: dict[str, Any] = {}

    def __enter__(self) -> PgStatementLog:
        log = self.entries
        saved = self._saved
        saved.update(
            _prepare=DirectConnection._prepare,
            _begin=DirectConnection._begin,
            commit=DirectConnection.commit,
        )

        class Recorded:
            def __init__(self, prepared: Any, sql: str) -> None:
                self.prepared, self.sql = prepared, sql

            async def fetch(self, *values: Any) -> Any:
                log.append(("one", self.sql, list(values)))
                return await self.prepared.fetch(*values)

            async def executemany(self, values: list[Any]) -> Any:
                log.append(("many", self.sql, list(values)))
                return await self.prepared.executemany(values)

            def __getattr__(self, name: str) -> Any:
                return getattr(self.prepared, name)

        async def prepare(link: Any, sql: str) -> Any:
            return Recorded(await saved["_prepare"](link, sql), sql)

        async def begin(link: Any) -> None:
            if not link.begun:
                log.append(("sql", "BEGIN", None))
            await saved["_begin"](link)

        async def commit(link: Any) -> None:
            if link.begun:
                log.append(("sql", "COMMIT", None))
            await saved["commit"](link)

        DirectConnection._prepare = prepare  # type: ignore[method-assign]
        DirectConnection._begin = begin  # type: ignore[method-assign]
        DirectConnection.commit = commit  # type: ignore[method-assign]
        return self

    def __exit__(self, *exc: object) -> None:
        for name, method in self._saved.items():
            setattr(DirectConnection, name, method)


async def pg_floor(monitor: Monitor, cluster: str, runs: int) -> PgResult:
    """``signoff SQL replayed c1`` on PostgreSQL: signoff's statements for `runs` cycles,
    recorded on a database of their own, sent again in the same order by one plain asyncpg
    connection (each prepared once, JSON passed as the text the store encoded) to a fresh
    database: the round trips and server work of signoff's cycle at no cost of its own."""
    recorded = await monitor.new_database("vs_floor_rec")
    target = await monitor.new_database("vs_floor_rep")
    try:
        signoff = PgSignoff(make_url(cluster).set(database=recorded).render_as_string(False))
        await signoff.open()
        try:
            with PgStatementLog() as log:
                for n in range(runs):
                    await signoff.cycle(n)
        finally:
            await signoff.close()
        url = make_url(cluster).set(database=target).render_as_string(False)
        store = SQLStore.from_url(url)
        await store.migrate()
        await store.close()
        await monitor.gone(target)
        conn = await asyncpg.connect(dsn(url))
        try:
            for json_type in ("json", "jsonb"):
                # As SQLAlchemy's asyncpg dialect sends JSON (binary format, the text).
                prefix = b"\x01" if json_type == "jsonb" else b""
                await conn.set_type_codec(
                    json_type,
                    encoder=lambda text, p=prefix: p + text.encode(),
                    decoder=lambda raw: raw,
                    schema="pg_catalog",
                    format="binary",
                )
            before_xacts = await monitor.settled(target)
            before_wal = await monitor.wal()
            before_pg = cluster_cpu(monitor.postmaster, monitor.me)
            prepared: dict[str, Any] = {}
            began, cpu = time.perf_counter(), time.process_time()
            for kind, sql, values in log.entries:
                if kind == "sql":
                    await conn.execute(sql)
                    continue
                statement = prepared.get(sql)
                if statement is None:
                    statement = prepared[sql] = await conn.prepare(sql)
                if kind == "many":
                    await statement.executemany(values)
                else:
                    await statement.fetch(*values)
            seconds, cpu = time.perf_counter() - began, time.process_time() - cpu
            after_pg = cluster_cpu(monitor.postmaster, monitor.me)
            after_wal = await monitor.wal()
        finally:
            await conn.close()
        await monitor.gone(target)
        xacts = await monitor.xacts(target) - before_xacts
        return PgResult(
            "signoff SQL replayed c1",
            runs,
            seconds,
            cpu,
            commits=xacts,
            xacts=xacts,
            wal_bytes=after_wal - before_wal,
            pg_cpu_seconds=after_pg - before_pg,
            statements=len(log.entries),
        )
    finally:
        await monitor.drop(recorded)
        await monitor.drop(target)


async def profile_signoff(url: str, runs: int, out: Path) -> None:
    """Profile signoff's side, one cycle at a time, with pyinstrument; write the text tree."""
    from pyinstrument import Profiler

    system = PgSignoff(url)
    await system.open()
    try:
        for warm in range(10):
            await system.cycle(90_000_000 - warm)
        profiler = Profiler(interval=0.0005, async_mode="disabled")
        profiler.start()
        for n in range(runs):
            await system.cycle(90_000_100 + n)
        profiler.stop()
    finally:
        await system.close()
    text = profiler.output_text(unicode=False, color=False, show_all=False)
    await asyncio.to_thread(out.write_text, text)
    print(f"pyinstrument profile of {runs} signoff cycles (c1) written to {out}")


async def table_bytes(url: str) -> dict[str, int]:
    """Bytes of every table of `url`'s database, indexes and TOAST included."""
    conn = await asyncpg.connect(dsn(url))
    try:
        rows = await conn.fetch(
            "SELECT relname, pg_total_relation_size(c.oid) AS size FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE c.relkind = 'r' AND n.nspname = 'public'"
        )
        return {row["relname"]: int(row["size"]) for row in rows}
    finally:
        await conn.close()


async def parked_bytes(url: str, who: str, count: int) -> str:
    """Park `count` runs of `who` (never decided) and report the bytes they take."""
    before = await table_bytes(url)
    system: PgSignoff | PgLangGraph
    system = PgSignoff(url) if who == "signoff" else PgLangGraph(url, who, pool_size=15)
    await system.open()
    try:

        async def park(n: int) -> None:
            if isinstance(system, PgSignoff):
                run = await system.runtime.start("refunds", f"refund order {n}", requester="U1")
                if run.status is not RunStatus.AWAITING:
                    raise RuntimeError(f"signoff run did not park: {run.status}")
            else:
                config = {"configurable": {"thread_id": f"parked-{n}"}}
                start = {"messages": [{"role": "user", "content": f"refund order {n}"}]}
                await system.graph.ainvoke(start, config, durability=who)

        await in_tasks(count, 16, park)
    finally:
        await system.close()
    after = await table_bytes(url)
    grown = {t: after[t] - before.get(t, 0) for t in after if after[t] != before.get(t, 0)}
    total = sum(grown.values())
    parts = ", ".join(f"{t} {b / count:.0f}" for t, b in sorted(grown.items(), key=lambda x: -x[1]))
    label = "signoff" if who == "signoff" else f"langgraph {who}"
    return f"  {label}: {total / count:.0f} bytes per parked run ({parts})"


async def pg_round(
    monitor: Monitor,
    names: dict[str, tuple[str, str]],
    runs: int,
    levels: tuple[int, ...],
    first: str,
    number: int,
) -> dict[str, PgResult]:
    order = ["signoff", "sync", "async"]
    if first != "signoff":
        order = ["sync", "async", "signoff"]
    results: dict[str, PgResult] = {}
    for tasks in levels:
        for who in order:
            name, url = names[who]
            seed = 10_000_000 * number + 100_000 * tasks
            result = await pg_block(
                monitor, name, url, who, runs * max(1, tasks // 16), tasks, seed
            )
            results[result.name] = result
    return results


def report_pg_round(number: int, results: dict[str, PgResult], levels: tuple[int, ...]) -> str:
    lines = [
        f"round {number} (PostgreSQL), load average "
        f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}",
        f"  {'':<20} {'cycles/s':>9} {'cpu ms/cycle':>13} {'pg cpu ms/cyc':>14} "
        f"{'xact/cycle':>11} {'stmts/cycle':>12} {'WAL B/cycle':>12}",
    ]
    for name, r in results.items():
        lines.append(
            f"  {name:<20} {r.rate:>9.1f} {1000 * r.cpu_seconds / r.cycles:>13.2f} "
            f"{1000 * r.pg_cpu_seconds / r.cycles:>14.2f} {r.xacts / r.cycles:>11.2f} "
            f"{r.statements / r.cycles:>12.2f} {r.wal_bytes / r.cycles:>12.0f}"
        )
    for tasks in levels:
        ours = results[f"signoff c{tasks}"]
        ratios = ", ".join(
            f"{ours.rate / results[f'langgraph {d} c{tasks}'].rate:.2f}x vs {d}"
            for d in ("sync", "async")
        )
        lines.append(f"  ratio c{tasks}: signoff {ratios}")
    floor = results.get("signoff SQL replayed c1")
    if floor is not None:
        ratios = ", ".join(
            f"{floor.rate / results[f'langgraph {d} c1'].rate:.2f}x vs {d}"
            for d in ("sync", "async")
        )
        lines.append(
            f"  signoff c1 / its SQL replayed: {results['signoff c1'].rate / floor.rate:.2f}x;"
            f" its SQL replayed c1: {ratios}"
        )
    return "\n".join(lines)


def report_statements(results: dict[str, PgResult], count: int = 8) -> str:
    lines = []
    for name, r in results.items():
        if not r.top:
            continue
        total = sum(ms for _, _, ms in r.top) or 1.0
        lines.append(f"  {name}: server time per statement (pg_stat_statements), top {count}")
        for query, calls, ms in r.top[:count]:
            text = " ".join(query.split())[:90]
            lines.append(
                f"    {calls / r.cycles:>5.2f}/cycle {1000 * ms / r.cycles:>7.1f} us/cycle "
                f"{100 * ms / total:>4.0f}%  {text}"
            )
    return "\n".join(lines)


async def main_postgres(args: argparse.Namespace, levels: tuple[int, ...]) -> None:
    global SIGNOFF_POOL
    if not args.postgres_url:
        sys.exit("--database postgres needs --postgres-url or SIGNOFF_TEST_POSTGRES_URL")
    if args.signoff_pool:
        SIGNOFF_POOL = PoolOptions(size=args.signoff_pool, max_overflow=0)
    monitor = Monitor(args.postgres_url)
    await monitor.open(args.pg_stat_statements, args.durable)
    assert monitor.conn is not None
    print(
        f"PostgreSQL {await monitor.conn.fetchval('SHOW server_version')}, "
        f"fsync {await monitor.conn.fetchval('SHOW fsync')}, "
        f"synchronous_commit {await monitor.conn.fetchval('SHOW synchronous_commit')}, "
        f"full_page_writes {await monitor.conn.fetchval('SHOW full_page_writes')}, "
        f"pg_stat_statements {'on' if monitor.statements else 'off'}"
    )
    names: dict[str, tuple[str, str]] = {}
    try:
        for who, prefix in (
            ("signoff", "vs_signoff"),
            ("sync", "vs_lg_sync"),
            ("async", "vs_lg_async"),
        ):
            name = await monitor.new_database(prefix)
            url = (
                make_url(args.postgres_url).set(database=name).render_as_string(hide_password=False)
            )
            names[who] = (name, url)
        store = SQLStore.from_url(names["signoff"][1])
        await store.migrate()
        await store.close()
        ratios: dict[str, list[float]] = {}
        for number in range(1, args.rounds + 1):
            first = "signoff" if number % 2 else "langgraph"
            results = await pg_round(monitor, names, args.runs, levels, first, number)
            results["signoff SQL replayed c1"] = await pg_floor(
                monitor, args.postgres_url, args.runs
            )
            print(report_pg_round(number, results, levels), flush=True)
            if number == args.rounds and monitor.statements:
                print(report_statements(results, args.top), flush=True)
            for tasks in levels:
                for d in ("sync", "async"):
                    ours = results[f"signoff c{tasks}"].rate
                    ratios.setdefault(f"c{tasks} vs {d}", []).append(
                        ours / results[f"langgraph {d} c{tasks}"].rate
                    )
        print(
            "median ratio over the rounds: "
            + ", ".join(f"{key} {statistics.median(v):.2f}x" for key, v in ratios.items())
        )
        if args.parked:
            print(f"{args.parked} runs parked, never decided (table sizes, indexes included):")
            for who in ("signoff", "sync"):
                print(await parked_bytes(names[who][1], who, args.parked), flush=True)
        if args.profile is not None:
            await profile_signoff(names["signoff"][1], args.runs, args.profile)
    finally:
        for name, _ in names.values():
            await monitor.drop(name)
        await monitor.close()


def levels_of(text: str) -> tuple[int, ...]:
    found = [int(part) for part in text.split(",") if part.strip()]
    if not found or min(found) < 1:
        raise argparse.ArgumentTypeError(f"concurrency levels are positive integers: {text!r}")
    return (1, *[level for level in found if level != 1])


async def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=300, help="cycles per system and round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--concurrency",
        type=levels_of,
        default=(1, 16),
        help="cycles at once, comma-separated (one at a time is always measured): 16,64",
    )
    parser.add_argument("--database", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--db", type=Path, default=None, help="SQLite file (default: temp)")
    parser.add_argument(
        "--postgres-url",
        default=os.environ.get("SIGNOFF_TEST_POSTGRES_URL"),
        help="a PostgreSQL cluster on this machine where databases may be created",
    )
    parser.add_argument(
        "--pg-stat-statements",
        action="store_true",
        help="load pg_stat_statements (restarts the cluster when it is not preloaded)",
    )
    parser.add_argument(
        "--durable",
        action="store_true",
        help="PostgreSQL: restart the cluster with fsync, synchronous_commit and "
        "full_page_writes on when it runs without them (as .ci/with-postgres starts it)",
    )
    parser.add_argument(
        "--top", type=int, default=8, help="statements listed per side (pg_stat_statements)"
    )
    parser.add_argument(
        "--signoff-pool",
        type=int,
        default=0,
        help="PostgreSQL: signoff's pool keeps this many connections open and opens no "
        "more (LangGraph's keeps up to 15); default: the store's own (15)",
    )
    parser.add_argument(
        "--parked",
        type=int,
        default=0,
        help="PostgreSQL: after the rounds, park this many runs on each side and report "
        "the bytes each takes",
    )
    parser.add_argument(
        "--profile",
        type=Path,
        default=None,
        help="PostgreSQL: after the rounds, profile --runs signoff cycles with pyinstrument "
        "and write the call tree to this file",
    )
    args = parser.parse_args(argv)
    levels: tuple[int, ...] = args.concurrency
    print(
        f"machine: {platform.machine()}, nproc {os.cpu_count()}, Python "
        f"{platform.python_version()}, SQLite {sqlite3.sqlite_version}, "
        f"{platform.system()} {platform.release()}"
    )
    if args.database == "postgres":
        await main_postgres(args, levels)
        return
    ratios: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="signoff-vs-") as scratch:
        path = args.db or Path(scratch) / "both.db"
        for number in range(1, args.rounds + 1):
            first = "signoff" if number % 2 else "langgraph"
            disk, results = await one_round(path, args.runs, levels, first)
            print(report_round(number, disk, results, levels), flush=True)
            for tasks in levels:
                for d in ("sync", "async"):
                    key = f"c{tasks} vs {d}"
                    ours = results[f"signoff c{tasks}"].rate
                    ratios.setdefault(key, []).append(
                        ours / results[f"langgraph {d} c{tasks}"].rate
                    )
    print(
        "median ratio over the rounds: "
        + ", ".join(f"{key} {statistics.median(values):.2f}x" for key, values in ratios.items())
    )


if __name__ == "__main__":
    asyncio.run(main())
