"""The approval cycle with tracing off and on, side by side in one run.

Usage::

    python bench/tracing.py                       # 3 rounds of 300 cycles, SQLite file
    python bench/tracing.py --cycles 1000 --rounds 5 --store memory

One cycle: `Runtime.start` (a scripted model proposes a call of an `ask` tool, the run
parks), `Runtime.approve(..., resume=True)` (the decision, the tool, a second model call,
done). Each round runs every variant once, in a rotating order, each on a fresh store:

* ``off``          the default `NO_TRACER`: no OpenTelemetry at all;
* ``on, memory``   the OpenTelemetry SDK with a batch span processor exporting to memory
                   (what the SDK itself costs: spans made, ended, queued, exported);
* ``on, otlp``     the same exporting over OTLP/HTTP to a collector on loopback, a separate
                   process that reads each request and answers 200 (what the exporter's
                   encoding and sending add; it runs on the SDK's own thread).

It prints, per variant, the median cycles/s and CPU milliseconds per cycle (every thread
of the process, the exporter's included), the median of each round's ratio to ``off``
(with their range), and the spans exported per cycle. CPU time moves less than wall
time on a machine that is busy with other work.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from adapters.telemetry.otel import Telemetry, start_telemetry
from runtime import (
    Agent,
    MemoryStore,
    RunStatus,
    Runtime,
    ScriptedModel,
    Store,
    final_reply,
    tool_call_reply,
)
from runtime.edges import NO_TRACER, Tracer
from runtime.store.sql import SQLStore

COLLECTOR = """
import sys
from aiohttp import web

count = 0

async def receive(request):
    global count
    await request.read()
    count += 1
    return web.Response(body=b"", content_type="application/x-protobuf")

app = web.Application(client_max_size=64 * 1024 * 1024)
app.router.add_post("/v1/traces", receive)

async def started(app):
    print("ready", flush=True)

async def stopped(app):
    print(count, flush=True)

app.on_startup.append(started)
app.on_cleanup.append(stopped)
web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), print=None)
"""


def agent() -> Agent:
    model = ScriptedModel(
        [tool_call_reply(("refund", {"order": "A1", "amount": 250})), final_reply("Done.")]
    )
    refunds = Agent("refunds", "Refund carefully.", model)

    @refunds.tool(permission="ask")
    async def refund(order: str, amount: float) -> str:
        return f"refunded {amount} on {order}"

    return refunds


async def open_store(kind: str, folder: Path, name: str) -> Store:
    if kind == "memory":
        return MemoryStore()
    store = SQLStore.sqlite(folder / f"{name}.db")
    await store.migrate()
    return store


async def cycles(
    tracer: Tracer, store: Store, count: int, flush: Callable[[], object] = lambda: None
) -> tuple[float, float]:
    """Cycles per second of `count` approval cycles, and the process's CPU milliseconds
    per cycle (every thread's: the exporter's too, its last batch flushed in the time)."""
    runtime = Runtime(store, [agent()], tracer=tracer)
    started, cpu = time.perf_counter(), time.process_time()
    for _ in range(count):
        parked = await runtime.start("refunds", "refund A1", requester="U1")
        done = await runtime.approve(parked.pending[0], actor="U1", resume=True)
        assert done.status is RunStatus.DONE
    flush()
    seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
    await runtime.aclose()
    return count / seconds, cpu * 1000 / count


def free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cycles", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--store", choices=["sqlite", "memory"], default="sqlite")
    args = parser.parse_args()

    port = free_port()
    collector = subprocess.Popen(
        [sys.executable, "-c", COLLECTOR, str(port)], stdout=subprocess.PIPE, text=True
    )
    assert collector.stdout is not None and collector.stdout.readline().strip() == "ready"
    memory = InMemorySpanExporter()
    on_memory = start_telemetry(
        {}, processors=[BatchSpanProcessor(memory, max_queue_size=65536)], set_global=False
    )
    on_otlp = start_telemetry(
        {"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{port}"}, set_global=False
    )
    variants: dict[str, Callable[[], Tracer]] = {
        "off": lambda: NO_TRACER,
        "on, memory": lambda: on_memory.tracer,
        "on, otlp": lambda: on_otlp.tracer,
    }
    flush: dict[str, Telemetry] = {"on, memory": on_memory, "on, otlp": on_otlp}
    figures: dict[str, list[float]] = {name: [] for name in variants}
    cpu_ms: dict[str, list[float]] = {name: [] for name in variants}
    print(
        f"python {platform.python_version()} on {platform.machine()}, {os.cpu_count()} CPUs; "
        f"{args.cycles} cycles a round, {args.store} store"
    )
    names = list(variants)
    try:
        with tempfile.TemporaryDirectory() as folder:
            # Warm-up, not counted: imports, caches, the exporters' first connections.
            for name in names:
                warm = variants[name]()
                asyncio.run(cycles(warm, MemoryStore(), 30))
            on_memory.provider.force_flush()
            memory.clear()
            for round_ in range(args.rounds):
                order = names[round_ % len(names) :] + names[: round_ % len(names)]
                line = []
                for name in order:

                    async def one(name: str = name, index: int = round_) -> float:
                        store = await open_store(
                            args.store, Path(folder), f"{name.replace(', ', '-')}-{index}"
                        )
                        try:
                            telemetry = flush.get(name)
                            done = telemetry.provider.force_flush if telemetry else lambda: None
                            return await cycles(variants[name](), store, args.cycles, done)
                        finally:
                            await store.close()

                    rate, cpu = asyncio.run(one())
                    figures[name].append(rate)
                    cpu_ms[name].append(cpu)
                    line.append(f"{name}: {rate:6.1f}/s {cpu:5.2f} ms CPU")
                print(f"round {round_ + 1}: " + "   ".join(line))
    finally:
        on_memory.shutdown()
        on_otlp.shutdown()
        collector.terminate()
        received, _ = collector.communicate(timeout=10)
    spans = len(memory.get_finished_spans()) / (args.cycles * args.rounds)
    print()
    head = f"{'variant':<12} {'cycles/s':>9} {'vs off':>7} {'range':>10}"
    print(head + f" {'CPU ms/cycle':>13} {'vs off':>7} {'range':>10}")
    for name in variants:
        # The machine's speed drifts between rounds: each round's ratio is taken within it.
        walls = [r / b for r, b in zip(figures[name], figures["off"], strict=True)]
        cpus = [c / b for c, b in zip(cpu_ms[name], cpu_ms["off"], strict=True)]
        print(
            f"{name:<12} {statistics.median(figures[name]):9.1f} {statistics.median(walls):7.2f}"
            f" {min(walls):4.2f}-{max(walls):4.2f} {statistics.median(cpu_ms[name]):13.2f}"
            f" {statistics.median(cpus):7.2f} {min(cpus):4.2f}-{max(cpus):4.2f}"
        )
    answered = received.strip()
    print(f"\nspans per cycle: {spans:.1f}; OTLP requests the collector answered: {answered}")


if __name__ == "__main__":
    main()
