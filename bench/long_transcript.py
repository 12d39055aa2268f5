"""Long transcripts: what one step of a run costs as its transcript grows.

Usage::

    python bench/long_transcript.py                          # 10, 50, 200 tool calls of 2 KB
    python bench/long_transcript.py --turns 10,100,400 --result-bytes 20000

Each run is an agent whose scripted model (no network) calls an ``allow`` tool again and
again, each result `--result-bytes` long, until it has made `--turns` calls, then
answers. Every step is committed as in production (dispatch intent, raw result, model
call marks, events) on a SQLite file (WAL, ``synchronous=FULL``). Per length it prints
the CPU time of the process per tool call (one call and one model turn), the wall time
per call and per run, and ``growth``: the CPU per call against the
shortest length's. A store that rewrites the whole transcript at each step costs more
per call the longer the run (quadratic in all); one that appends stays flat.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import sqlite3
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from runtime import (
    Agent,
    RunStatus,
    Runtime,
    ScriptedModel,
    final_reply,
    tool,
    tool_call_reply,
)
from runtime.store.sql import SQLStore


def build_agent(turns: int, result_bytes: int) -> Agent:
    """An agent that calls `fetch` `turns` times, then answers."""

    @tool(permission="allow")
    async def fetch(page: int) -> str:
        """Fetch one page."""
        return f"page {page}: " + "x" * result_bytes

    def reply(request: Any) -> dict[str, Any]:
        done = sum(1 for m in request.messages if m.get("role") == "tool")
        if done >= turns:
            return final_reply("Read them all.")
        return tool_call_reply(("fetch", {"page": done}))

    return Agent("reader", "Read pages.", ScriptedModel(reply), [fetch], max_turns=turns + 2)


async def measure(turns: int, result_bytes: int, runs: int, directory: Path) -> dict[str, float]:
    """Run `runs` runs of `turns` calls on a fresh database: costs per call."""
    path = directory / f"long-{turns}.db"
    store = SQLStore.sqlite(path, synchronous="full")
    await store.migrate()
    runtime = Runtime(store, [build_agent(turns, result_bytes)])
    try:
        warm = await runtime.start("reader", "warm up", requester="U1")
        if warm.status is not RunStatus.DONE:
            raise RuntimeError(f"run did not finish: {warm.status} {warm.error}")
        began, cpu = time.perf_counter(), time.process_time()
        for n in range(runs):
            result = await runtime.start("reader", f"read {n}", requester="U1")
            if result.status is not RunStatus.DONE:
                raise RuntimeError(f"run did not finish: {result.status} {result.error}")
        wall, cpu = time.perf_counter() - began, time.process_time() - cpu
    finally:
        await store.close()
    calls = runs * turns
    return {
        "cpu_us_per_call": cpu / calls * 1e6,
        "wall_us_per_call": wall / calls * 1e6,
        "ms_per_run": wall / runs * 1000,
    }


async def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", default="10,50,200", help="tool calls per run, per length")
    parser.add_argument("--result-bytes", type=int, default=2000)
    parser.add_argument("--calls", type=int, default=2000, help="tool calls per length")
    args = parser.parse_args(argv)
    lengths = [int(t) for t in args.turns.split(",")]
    print(
        f"machine: {platform.machine()}, nproc {os.cpu_count()}, Python "
        f"{platform.python_version()}, SQLite {sqlite3.sqlite_version}; "
        f"results of {args.result_bytes} bytes, synchronous=FULL"
    )
    print("| calls per run | runs | cpu µs per call | wall µs per call | ms per run | growth |")
    print("|---:|---:|---:|---:|---:|---:|")
    first: float | None = None
    with tempfile.TemporaryDirectory(prefix="signoff-long-") as scratch:
        for turns in lengths:
            runs = max(1, args.calls // turns)
            figures = await measure(turns, args.result_bytes, runs, Path(scratch))
            per_call = figures["cpu_us_per_call"]
            first = first or per_call
            print(
                f"| {turns} | {runs} | {per_call:.0f} | {figures['wall_us_per_call']:.0f} | "
                f"{figures['ms_per_run']:.1f} | {per_call / first:.2f}x |",
                flush=True,
            )


if __name__ == "__main__":
    asyncio.run(main())
