"""Runs driven by a `Worker`, as `signoff serve` drives them: handed over vs found queued.

Usage::

    python bench/handoff.py                      # 300 cycles per round, 3 rounds each way
    python bench/handoff.py --runs 500 --rounds 5 --synchronous normal

One process holds `signoff serve`'s process (`bot.bootstrap.build_service`) on a SQLite
file store (WAL, ``synchronous=full`` unless told otherwise), with `bench/park_resume.py`'s
agent (one ``ask`` tool, a scripted model, no network); only its worker (4 places) runs.
One cycle, one run at a time (a server that is not saturated):

1. ``Runtime.start(wait=False)``, as a webhook, the API or a chat command starts a run;
2. wait until the run parked (its model call committed);
3. ``Runtime.approve(resume=False)``, as the API and a chat click's decision are applied;
4. wait until the run is done.

Two ways, alternately in rounds, each on a fresh database:

* ``handed``: the worker takes the runs (`Runtime.hand_off_to`, what a serving worker
  does): the start's commit and the decision's commit claim the run for it;
* ``queued``: nobody takes them (``runtime.hand_off_to(None)`` once the loop runs): each
  ready run is stored ``queued``, the woken loop looks for ready runs and claims each in
  a transaction of its own, as before the hand-off.

Per round: CPU ms per cycle (the process, all threads), wall ms per cycle, store commits
and transactions per cycle; then the median of each way and queued / handed.
"""

from __future__ import annotations

import argparse
import asyncio
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from park_resume import build_agent, sqlite_store  # noqa: E402

from bot.bootstrap import Parts, build_service  # noqa: E402
from bot.settings import load_settings  # noqa: E402
from runtime import Runtime  # noqa: E402
from runtime.worker import Worker  # noqa: E402


@dataclass(frozen=True)
class Round:
    way: str
    cpu_ms: float
    wall_ms: float
    commits: float
    transactions: float


class Turns:
    """Per run, an event set by each committed model call (turn 1 parks, turn 2 ends)."""

    def __init__(self) -> None:
        self.waiting: dict[str, asyncio.Event] = {}

    def checkpoint(self, point: str, info: dict[str, Any]) -> None:
        if point == "model_call_committed":
            event = self.waiting.get(str(info["run_id"]))
            if event is not None:
                event.set()

    async def next_turn(self, run_id: str) -> None:
        event = self.waiting.setdefault(run_id, asyncio.Event())
        async with asyncio.timeout(30):
            await event.wait()
        event.clear()


async def one_round(way: str, runs: int, synchronous: str) -> Round:
    with tempfile.TemporaryDirectory() as tmp:
        store = sqlite_store(Path(tmp) / "bench.db", synchronous)
        await store.migrate()
        turns = Turns()
        settings = load_settings(
            overrides={
                "database_url": f"sqlite+aiosqlite:///{Path(tmp) / 'bench.db'}",
                "workers": 4,
                "poll_seconds": 0.5,
            }
        )
        service = await build_service(
            settings,
            agents=[build_agent()],
            store=store,
            checkpoint=turns.checkpoint,
            parts=Parts(listen=False, outbox=False, deadlines=False, wake_ups=False, discord=False),
        )
        runtime, worker = service.runtime, service.worker
        await service.start()
        await asyncio.sleep(0)  # the loop has begun (and offered to take runs)
        if way == "queued":
            runtime.hand_off_to(None)
        transactions = 0
        opened = store.transaction

        def counted() -> Any:
            nonlocal transactions
            transactions += 1
            return opened()

        store.transaction = counted  # type: ignore[method-assign]
        try:
            await cycle(runtime, worker, turns)  # warm: statements compiled, caches filled
            transactions, commits0 = 0, store.commits
            cpu0, wall0 = time.process_time(), time.perf_counter()
            for _ in range(runs):
                await cycle(runtime, worker, turns)
            cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
            commits = store.commits - commits0
        finally:
            await service.stop(grace_seconds=5)
            await store.close()
    return Round(way, 1000 * cpu / runs, 1000 * wall / runs, commits / runs, transactions / runs)


async def cycle(runtime: Runtime, worker: Worker, turns: Turns) -> None:
    started = await runtime.start("bench", "refund A1", requester="U1", wait=False)
    worker.wake_runs()  # as the edges do after a start
    await turns.next_turn(started.run_id)
    parked = await runtime.get(started.run_id)
    await runtime.approve(parked.pending[0], resume=False)
    worker.wake_runs()
    await turns.next_turn(started.run_id)


def report(rounds: list[Round], runs: int, synchronous: str) -> str:
    lines = [
        f"python {platform.python_version()}, {len(__import__('os').sched_getaffinity(0))} "
        f"cpus, synchronous={synchronous}, {runs} cycles per round",
        "| round | way | CPU ms/cycle | wall ms/cycle | commits/cycle | transactions/cycle |",
        "|---:|---|---:|---:|---:|---:|",
    ]
    for number, r in enumerate(rounds, 1):
        lines.append(
            f"| {number} | {r.way} | {r.cpu_ms:.2f} | {r.wall_ms:.2f} | {r.commits:.1f} "
            f"| {r.transactions:.1f} |"
        )
    medians = {}
    for way in ("handed", "queued"):
        mine = [r for r in rounds if r.way == way]
        medians[way] = (
            statistics.median(r.cpu_ms for r in mine),
            statistics.median(r.wall_ms for r in mine),
        )
        lines.append(
            f"median {way}: CPU {medians[way][0]:.2f} ms/cycle, wall {medians[way][1]:.2f} ms"
        )
    lines.append(
        f"queued / handed: CPU {medians['queued'][0] / medians['handed'][0]:.2f}x, "
        f"wall {medians['queued'][1] / medians['handed'][1]:.2f}x"
    )
    return "\n".join(lines)


async def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=300, help="cycles per round")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of each way")
    parser.add_argument("--synchronous", choices=["full", "normal"], default="full")
    args = parser.parse_args(argv)
    rounds = []
    for _ in range(args.rounds):
        for way in ("handed", "queued"):
            rounds.append(await one_round(way, args.runs, args.synchronous))
    print(report(rounds, args.runs, args.synchronous))


if __name__ == "__main__":
    asyncio.run(main())
