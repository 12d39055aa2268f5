"""signoff next to LangGraph: the same approval cycle on the same SQLite file, in rounds.

Usage (LangGraph is a bench-only dependency, see ``bench/requirements.txt``)::

    python3.11 -m venv bench/.venv
    bench/.venv/bin/pip install -e . -r bench/requirements.txt
    bench/.venv/bin/python bench/vs_langgraph.py                      # 3 rounds of 300 cycles
    bench/.venv/bin/python bench/vs_langgraph.py --rounds 5 --runs 500 --concurrency 16

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
"""

from __future__ import annotations

import argparse
import asyncio
import operator
import os
import platform
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, TypedDict

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import aiosqlite
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt
from serve_app import BenchModel

from runtime import Agent, RunStatus, Runtime, final_reply, tool_call_reply
from runtime.store.sql import SQLStore

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


def lg_graph(saver: AsyncSqliteSaver) -> Any:
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
                    plan = writer.plan(statement, params[0])
                    log.append(("many", plan.sql, [plan.parameters(p) for p in params]))
            else:
                given = params or {}
                plan = writer.plan(statement, given)
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
        config = {"configurable": {"thread_id": f"{self.thread_prefix}{n}"}}
        start = {"messages": [{"role": "user", "content": f"refund order {n}"}]}
        parked = await self.graph.ainvoke(start, config, durability=self.durability)
        if "__interrupt__" not in parked:
            raise RuntimeError("LangGraph run did not park")
        done = await self.graph.ainvoke(Command(resume="allow"), config, durability=self.durability)
        if done["messages"][-1]["content"] != "Refunded.":
            raise RuntimeError(f"LangGraph run did not finish: {done['messages'][-1]}")

    def commits(self) -> int:
        return self.committed

    async def close(self) -> None:
        if self.conn is not None:
            await self.conn.close()


async def one_round(
    path: Path, runs: int, concurrency: int, first: str
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
        for tasks in (1, concurrency):
            for who in order:
                system = signoff if who == "signoff" else graphs[who]
                label = "signoff" if who == "signoff" else f"langgraph {who}"
                offset = 1_000_000 * (tasks != 1)
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


def report_round(number: int, disk: float, results: dict[str, Result], concurrency: int) -> str:
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
    for tasks in (1, concurrency):
        ours = results[f"signoff c{tasks}"].rate
        ratios = ", ".join(
            f"{ours / results[f'langgraph {d} c{tasks}'].rate:.2f}x vs {d}"
            for d in ("sync", "async")
        )
        lines.append(f"  ratio c{tasks}: signoff {ratios}")
    return "\n".join(lines)


async def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=300, help="cycles per system and round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--db", type=Path, default=None, help="SQLite file (default: temp)")
    args = parser.parse_args(argv)
    print(
        f"machine: {platform.machine()}, nproc {os.cpu_count()}, Python "
        f"{platform.python_version()}, SQLite {sqlite3.sqlite_version}, "
        f"{platform.system()} {platform.release()}"
    )
    ratios: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="signoff-vs-") as scratch:
        path = args.db or Path(scratch) / "both.db"
        for number in range(1, args.rounds + 1):
            first = "signoff" if number % 2 else "langgraph"
            disk, results = await one_round(path, args.runs, args.concurrency, first)
            print(report_round(number, disk, results, args.concurrency), flush=True)
            for tasks in (1, args.concurrency):
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
