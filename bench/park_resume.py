"""Park/resume benchmark: N runs park on an `ask` tool, then each is approved and finished.

Usage::

    python bench/park_resume.py --runs 1000                        # SQLite, synchronous=full
    python bench/park_resume.py --runs 1000 --synchronous normal
    python bench/park_resume.py --runs 1000 --compare              # full vs normal vs memory
    python bench/park_resume.py --runs 1000 --profile /tmp/bench   # CPU profile of each phase
    python bench/park_resume.py --runs 200 --trace-sql             # SQL statements per run

For each store it measures four phases on a fresh database:

* ``park``           N runs started one after another; each calls the model once and parks
                     on its `ask` tool (run row, call, ticket, events, outbox committed).
* ``decide+finish``  each parked run approved with ``resume=True``, one after another:
                     the decision commit, the claim, dispatch intent, tool, result commit,
                     the second model call and the final commit.
* ``park (cN)`` and ``decide+finish (cN)``: the same with N runs spread over `--concurrency`
                     asyncio tasks sharing one runtime and one store.

It prints runs/s and the database commits per run (``store.commits``) of each phase.
With ``--trace-sql`` it also counts the SQL statements each phase sends per run, by kind
(``BEGIN``, ``SELECT runs`` ...), and the time spent inside the driver's execute calls.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import os
import platform
import pstats
import re
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sqlalchemy import event

from runtime import (
    Agent,
    MemoryStore,
    RunResult,
    RunStatus,
    Runtime,
    ScriptedModel,
    Store,
    final_reply,
    tool,
    tool_call_reply,
)
from runtime.store.sql import SQLStore


class SQLTrace:
    """Counts the statements a store executes, by kind, their time, and thread hops.

    On SQLite the store's transactions run on its writer (`SQLStore.writer`), which
    reports every statement and every hand-over to its worker thread; elsewhere the
    engine's cursor events are counted.
    """

    def __init__(self, store: Store) -> None:
        self.counts: Counter[str] = Counter()
        self.seconds: Counter[str] = Counter()
        self._started: list[float] = []
        writer = getattr(store, "writer", None)
        engine = getattr(store, "engine", None)
        self.enabled = writer is not None or engine is not None
        if writer is not None:
            writer.on_statement = self._statement
            self._count_thread_hops(writer)
        elif engine is not None:
            event.listen(engine.sync_engine, "before_cursor_execute", self._before)
            event.listen(engine.sync_engine, "after_cursor_execute", self._after)

    def _statement(self, statement: str, seconds: float) -> None:
        kind = self.kind(statement)
        self.counts[kind] += 1
        self.seconds[kind] += seconds

    def _count_thread_hops(self, writer: Any) -> None:
        """Count the writer's hand-overs to its worker thread (commits, waits for locks)."""
        original = writer._submit
        counts = self.counts

        def hop(fn: Any, *args: Any) -> Any:
            counts[f"hop {getattr(fn, '__name__', 'call')}"] += 1
            return original(fn, *args)

        writer._submit = hop

    def _before(self, conn: Any, cursor: Any, statement: str, *rest: Any) -> None:
        self._started.append(time.perf_counter())

    def _after(self, conn: Any, cursor: Any, statement: str, *rest: Any) -> None:
        self._statement(statement, time.perf_counter() - self._started.pop())

    @staticmethod
    def kind(statement: str) -> str:
        words = statement.split()
        verb = words[0].upper() if words else "?"
        upper = [w.upper() for w in words]
        table = "?"
        for marker in ("FROM", "INTO", "UPDATE"):
            if marker in upper:
                index = upper.index(marker) + 1
                if index < len(words):
                    table = words[index].strip('"')
                break
        return verb if verb in ("BEGIN", "COMMIT", "ROLLBACK", "PRAGMA") else f"{verb} {table}"

    def _before(self, conn: Any, cursor: Any, statement: str, *rest: Any) -> None:
        self._started.append(time.perf_counter())

    def _after(self, conn: Any, cursor: Any, statement: str, *rest: Any) -> None:
        kind = self.kind(statement)
        self.counts[kind] += 1
        if self._started:
            self.seconds[kind] += time.perf_counter() - self._started.pop()

    def snapshot(self) -> tuple[Counter[str], Counter[str]]:
        return Counter(self.counts), Counter(self.seconds)


@dataclass
class Phase:
    name: str
    runs: int
    seconds: float
    commits: int
    cpu_seconds: float = 0.0
    statements: Counter[str] = field(default_factory=Counter)
    statement_seconds: Counter[str] = field(default_factory=Counter)

    @property
    def rate(self) -> float:
        return self.runs / self.seconds if self.seconds else float("inf")

    @property
    def commits_per_run(self) -> float:
        return self.commits / self.runs


def build_agent() -> Agent:
    @tool(permission="ask")
    async def refund(order: str, amount: float) -> str:
        """Refund an order."""
        return f"refunded {amount} on {order}"

    model = ScriptedModel(
        [tool_call_reply(("refund", {"order": "A1", "amount": 250})), final_reply("Refunded.")]
    )
    return Agent("bench", "Refund what you are asked to.", model, [refund])


async def timed(
    name: str,
    store: Store,
    count: int,
    body: Callable[[], Awaitable[None]],
    profile: Path | None,
    label: str,
    trace: SQLTrace | None,
) -> Phase:
    commits = store.commits
    counts_before, seconds_before = trace.snapshot() if trace else (Counter(), Counter())
    profiler = cProfile.Profile(time.process_time) if profile is not None else None
    if profiler is not None:
        profiler.enable()
    began = time.perf_counter()
    cpu_began = time.process_time()
    await body()
    elapsed = time.perf_counter() - began
    cpu = time.process_time() - cpu_began
    if profiler is not None and profile is not None:
        profiler.disable()
        slug = re.sub(r"[^a-z0-9]+", "_", f"{label}-{name}".lower()).strip("_")
        profiler.dump_stats(str(profile / f"{slug}.prof"))
    phase = Phase(name, count, elapsed, store.commits - commits, cpu)
    if trace is not None:
        counts, seconds = trace.snapshot()
        phase.statements = counts - counts_before
        phase.statement_seconds = seconds - seconds_before
    return phase


_LAYERS = (
    ("sqlite3: COMMIT (the fsync)", lambda file, fn: "commit" in fn and "sqlite3" in fn),
    ("sqlite3: statements", lambda file, fn: "sqlite3" in fn),
    ("store: runtime/store/sql/sqlite_*.py", lambda file, fn: "/runtime/store/sql/sqlite_" in file),
    ("store: runtime/store/sql/", lambda file, fn: "/runtime/store/" in file),
    ("runtime (the core)", lambda file, fn: "/runtime/" in file),
    ("json", lambda file, fn: "json" in file or "json" in fn),
    ("SQLAlchemy (column type conversions)", lambda file, fn: "sqlalchemy" in file),
    ("pydantic (tool arguments)", lambda file, fn: "pydantic" in file or "pydantic" in fn),
    (
        "asyncio and thread hand-overs",
        lambda file, fn: (
            "asyncio" in file
            or "selectors" in file
            or "threading" in file
            or "SimpleQueue" in fn
            or "_contextvars" in fn
        ),
    ),
    ("the benchmark itself", lambda file, fn: "/bench/" in file),
    ("builtins (isinstance, dict, str ...)", lambda file, fn: file == "~"),
    (
        "Python's library (contextlib, enum, dataclasses ...)",
        lambda file, fn: "/lib/python3" in file and "site-packages" not in file,
    ),
)


def layers(path: Path) -> list[tuple[str, float]]:
    """A profile's own time by layer, in shares of the whole (largest first)."""
    stats = pstats.Stats(str(path))
    shares: Counter[str] = Counter()
    raw: dict[Any, Any] = stats.stats  # type: ignore[attr-defined]
    for (file, _line, fn), (_cc, _nc, own, _cum, _callers) in raw.items():
        name = next((name for name, match in _LAYERS if match(file, fn)), "other")
        shares[name] += own
    total = sum(shares.values()) or 1.0
    return [(name, own / total) for name, own in shares.most_common()]


async def in_tasks(
    items: Sequence[Any], concurrency: int, work: Callable[[Any], Awaitable[Any]]
) -> list[Any]:
    """Run `work` over `items` with `concurrency` worker tasks; results in item order."""
    results: list[Any] = [None] * len(items)
    queue = iter(enumerate(items))

    async def worker() -> None:
        for index, item in queue:
            results[index] = await work(item)

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return results


async def bench_store(
    store: Store,
    label: str,
    runs: int,
    concurrency: int,
    profile: Path | None,
    trace_sql: bool = False,
) -> list[Phase]:
    await store.migrate()
    trace = SQLTrace(store) if trace_sql else None
    if trace is not None and not trace.enabled:
        trace = None
    agent = build_agent()
    runtime = Runtime(store, [agent])
    phases: list[Phase] = []

    async def park_one(i: int) -> RunResult:
        result = await runtime.start("bench", f"refund order {i}", requester="U1")
        if result.status is not RunStatus.AWAITING:
            raise RuntimeError(f"run {result.run_id} did not park: {result.status}")
        return result

    async def finish_one(parked: RunResult) -> None:
        done = await runtime.approve(parked.pending[0], resume=True)
        if done.status is not RunStatus.DONE:
            raise RuntimeError(f"run {done.run_id} did not finish: {done.status} {done.error}")

    for tasks in (1, concurrency):
        suffix = "" if tasks == 1 else f" (c{tasks})"
        parked: list[RunResult] = []

        async def park_all(tasks: int = tasks, parked: list[RunResult] = parked) -> None:
            parked.extend(await in_tasks(range(runs), tasks, park_one))

        async def finish_all(tasks: int = tasks, parked: list[RunResult] = parked) -> None:
            await in_tasks(parked, tasks, finish_one)

        phases.append(await timed("park" + suffix, store, runs, park_all, profile, label, trace))
        phases.append(
            await timed("decide+finish" + suffix, store, runs, finish_all, profile, label, trace)
        )
    async with store.transaction() as tx:
        counts = await tx.count_runs()
    if counts != {"done": 2 * runs}:
        raise RuntimeError(f"unexpected run states at the end: {counts}")
    await store.close()
    return phases


def sqlite_store(path: Path, synchronous: str) -> SQLStore:
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    return SQLStore.from_url(
        f"sqlite+aiosqlite:///{path.resolve()}", busy_timeout_ms=750, synchronous=synchronous
    )


def report(results: dict[str, list[Phase]], runs: int, concurrency: int) -> str:
    lines = [
        f"park/resume benchmark: {runs} runs, concurrency {concurrency}",
        f"machine: {platform.machine()}, nproc {os.cpu_count()}, "
        f"Python {platform.python_version()}, {platform.system()} {platform.release()}",
        "",
        f"{'store':<18} {'phase':<22} {'runs/s':>9} {'ms/run':>8} {'cpu ms/run':>11} "
        f"{'commits/run':>12}",
    ]
    for label, phases in results.items():
        for phase in phases:
            lines.append(
                f"{label:<18} {phase.name:<22} {phase.rate:>9.1f} "
                f"{1000 * phase.seconds / phase.runs:>8.2f} "
                f"{1000 * phase.cpu_seconds / phase.runs:>11.2f} {phase.commits_per_run:>12.2f}"
            )
        sequential = phases[:2]
        cycle = sum(p.seconds for p in sequential)
        cpu = sum(p.cpu_seconds for p in sequential)
        lines.append(
            f"{label:<18} {'full cycle':<22} {runs / cycle:>9.1f} {1000 * cycle / runs:>8.2f} "
            f"{1000 * cpu / runs:>11.2f} {sum(p.commits_per_run for p in sequential):>12.2f}"
        )
    for label, phases in results.items():
        for phase in phases[:2]:
            if not phase.statements:
                continue
            sql = {k: n for k, n in phase.statements.items() if not k.startswith("hop ")}
            hops = {k: n for k, n in phase.statements.items() if k.startswith("hop ")}
            inside = sum(v for k, v in phase.statement_seconds.items() if k in sql)
            waited = sum(v for k, v in phase.statement_seconds.items() if k in hops)
            lines += [
                "",
                f"{label} / {phase.name}: {sum(sql.values()) / phase.runs:.1f} statements "
                f"and {sum(hops.values()) / phase.runs:.1f} aiosqlite thread hops per run; "
                f"{1000 * inside / phase.runs:.2f} ms/run inside cursor.execute, "
                f"{1000 * waited / phase.runs:.2f} ms/run awaiting hops, "
                f"of {1000 * phase.seconds / phase.runs:.2f} ms/run",
            ]
            for kind, n in phase.statements.most_common():
                lines.append(
                    f"    {kind:<28} {n / phase.runs:>6.2f}/run "
                    f"{1000 * phase.statement_seconds[kind] / phase.runs:>7.2f} ms/run"
                )
    return "\n".join(lines)


async def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--synchronous", choices=["full", "normal"], default="full")
    parser.add_argument("--db", type=Path, default=None, help="SQLite file (default: temp dir)")
    parser.add_argument("--compare", action="store_true", help="full vs normal vs memory")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--profile", type=Path, default=None, help="write cProfile stats here")
    parser.add_argument("--trace-sql", action="store_true", help="count statements per run")
    args = parser.parse_args(argv)

    if args.profile is not None:
        args.profile.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="signoff-bench-") as scratch:
        db = args.db or Path(scratch) / "bench.db"
        modes = ["full", "normal"] if args.compare else [args.synchronous]
        results: dict[str, list[Phase]] = {}
        for mode in modes:
            label = f"sqlite {mode}"
            results[label] = await bench_store(
                sqlite_store(db, mode),
                f"sqlite-{mode}",
                args.runs,
                args.concurrency,
                args.profile,
                args.trace_sql,
            )
        if args.compare:
            results["memory"] = await bench_store(
                MemoryStore(), "memory", args.runs, args.concurrency, args.profile
            )
    print(report(results, args.runs, args.concurrency))
    print(f"load average after the run: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    if args.profile is not None:
        for stats in sorted(args.profile.glob("*.prof")):
            print(f"\n== {stats.name}: CPU time by layer")
            for name, share in layers(stats):
                print(f"    {100 * share:5.1f}%  {name}")
            print(f"== {stats.name}: top by own CPU time")
            pstats.Stats(str(stats)).sort_stats("tottime").print_stats(12)


if __name__ == "__main__":
    asyncio.run(main())
