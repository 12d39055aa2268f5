"""Model-turn benchmark: what signoff adds to each model call, on the real SDKs.

Usage::

    python bench/model_turn.py                     # 100 runs per case, both providers
    python bench/model_turn.py --runs 300 --providers openai

The fake provider of the test kit (``tests/support/fake_llm.py``) runs in its own process
on 127.0.0.1, so its work is not counted in this process's CPU time; its own CPU time is
read from ``/proc`` and reported beside. For each provider it measures:

* ``SDK alone``: the official SDK client (``AsyncOpenAI`` / ``AsyncAnthropic``) calling
  the fake directly, one call after another: the floor any caller pays.
* ``signoff, <store>``: runs of a one-tool agent on `OpenAIModel` / `AnthropicModel`,
  one after another; each run is two model turns (a tool call to an ``allow`` tool, then
  the answer), with everything the runtime does around them (transcript, tool schemas,
  dispatch and result commits, flight recorder, usage), on a SQLite file
  (``synchronous=full``, the default) and on the in-memory store.

Per model turn it prints wall time and this process's CPU time, the fake's CPU time per
request, and signoff's own share: the turn minus the SDK call alone.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "support"))

import anthropic  # noqa: E402
import openai  # noqa: E402
from fake_llm import API_KEY  # noqa: E402

from adapters.models import AnthropicModel, OpenAIModel  # noqa: E402
from runtime import Agent, MemoryStore, RunStatus, Runtime, Store, tool  # noqa: E402
from runtime.store.sql import SQLStore  # noqa: E402

FAKE = """
import asyncio, sys
sys.path.insert(0, {support!r})
from fake_llm import Call, FakeLLM, Turn

def answer(request):
    if request.tool_results():
        return Turn.say("Order A1 totals 249.00.")
    return Turn.ask(Call("lookup", {{"order_id": "A1"}}), text="Looking it up.")

async def main():
    fake = FakeLLM()
    fake.responder = answer
    await fake.start()
    print(fake.url, flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    await fake.stop()

asyncio.run(main())
"""


class FakeProcess:
    """The fake provider in a subprocess; `cpu` reads its CPU seconds from /proc."""

    def __init__(self) -> None:
        code = FAKE.format(support=str(ROOT / "tests" / "support"))
        self.process = subprocess.Popen(
            [sys.executable, "-c", code],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.process.stdout is not None
        self.url = self.process.stdout.readline().strip()
        if not self.url:
            raise SystemExit("the fake provider did not start")

    def cpu(self) -> float:
        fields = Path(f"/proc/{self.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
        ticks = os.sysconf("SC_CLK_TCK")
        return (int(fields[11]) + int(fields[12])) / ticks  # utime + stime

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        self.process.wait(timeout=10)
        if self.process.stdout is not None:
            self.process.stdout.close()


@dataclass
class Figure:
    label: str
    turns: int
    wall: float
    cpu: float
    fake_cpu: float

    def per_turn(self) -> tuple[float, float, float]:
        return (
            1000 * self.wall / self.turns,
            1000 * self.cpu / self.turns,
            1000 * self.fake_cpu / self.turns,
        )


async def measure(
    label: str, fake: FakeProcess, turns: int, body: Callable[[], Awaitable[None]]
) -> Figure:
    wall0, cpu0, fake0 = time.perf_counter(), time.process_time(), fake.cpu()
    await body()
    return Figure(
        label,
        turns,
        time.perf_counter() - wall0,
        time.process_time() - cpu0,
        fake.cpu() - fake0,
    )


TRANSCRIPT = [
    {"role": "user", "content": "How much was order A1?"},
]


async def sdk_alone(provider: str, fake: FakeProcess, calls: int) -> Figure:
    if provider == "openai":
        client: Any = openai.AsyncOpenAI(api_key=API_KEY, base_url=f"{fake.url}/v1")

        async def one() -> None:
            await client.chat.completions.create(
                model="gpt-test",
                messages=[{"role": "system", "content": "Look orders up."}, *TRANSCRIPT],
            )
    else:
        client = anthropic.AsyncAnthropic(api_key=API_KEY, base_url=fake.url)

        async def one() -> None:
            await client.messages.create(
                model="claude-test",
                max_tokens=1024,
                system="Look orders up.",
                messages=TRANSCRIPT,
            )

    try:
        for _ in range(5):
            await one()  # connection and imports warmed up

        async def body() -> None:
            for _ in range(calls):
                await one()

        return await measure("SDK alone", fake, calls, body)
    finally:
        await client.close()


def agent(model: Any) -> Agent:
    @tool(permission="allow", replay_policy="safe")
    async def lookup(order_id: str) -> dict[str, Any]:
        """Look an order up."""
        return {"order_id": order_id, "total": 249.0}

    return Agent("shop", "Look orders up.", model, tools=[lookup])


async def through_signoff(
    provider: str, fake: FakeProcess, runs: int, store: Store, label: str
) -> Figure:
    model: OpenAIModel | AnthropicModel
    if provider == "openai":
        model = OpenAIModel("gpt-test", api_key=API_KEY, base_url=f"{fake.url}/v1")
    else:
        model = AnthropicModel("claude-test", api_key=API_KEY, base_url=fake.url)
    runtime = Runtime(store, [agent(model)])
    try:
        for _ in range(3):
            await runtime.start("shop", "How much was order A1?", requester="U1")

        async def body() -> None:
            for _ in range(runs):
                done = await runtime.start("shop", "How much was order A1?", requester="U1")
                assert done.status is RunStatus.DONE, done

        return await measure(label, fake, 2 * runs, body)
    finally:
        await model.aclose()


async def main(args: argparse.Namespace) -> None:
    fake = FakeProcess()
    print(f"python {platform.python_version()} on {platform.machine()}, {os.cpu_count()} cpus")
    print(f"load average at start: {os.getloadavg()[0]:.2f}")
    print(f"openai {openai.__version__}, anthropic {anthropic.__version__}\n")
    try:
        header = (
            "| provider | case | wall ms/turn | CPU ms/turn | fake CPU ms/req "
            "| signoff's own wall ms | signoff's own CPU ms |"
        )
        print(header)
        print("|---|---|---:|---:|---:|---:|---:|")
        for provider in args.providers.split(","):
            base = await sdk_alone(provider, fake, 2 * args.runs)
            figures = [base]
            with tempfile.TemporaryDirectory() as tmp:
                sql = SQLStore.sqlite(Path(tmp) / "bench.db")
                await sql.migrate()
                try:
                    figures.append(
                        await through_signoff(provider, fake, args.runs, sql, "signoff, SQLite")
                    )
                finally:
                    await sql.close()
            figures.append(
                await through_signoff(provider, fake, args.runs, MemoryStore(), "signoff, memory")
            )
            base_wall, base_cpu, _ = base.per_turn()
            for figure in figures:
                wall, cpu, fake_cpu = figure.per_turn()
                own = (
                    ("-", "-")
                    if figure is base
                    else (f"{wall - base_wall:.2f}", f"{cpu - base_cpu:.2f}")
                )
                print(
                    f"| {provider} | {figure.label} | {wall:.2f} | {cpu:.2f} | {fake_cpu:.2f} "
                    f"| {own[0]} | {own[1]} |"
                )
    finally:
        fake.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=100, help="runs per case (two turns each)")
    parser.add_argument("--providers", default="openai,anthropic")
    asyncio.run(main(parser.parse_args()))
