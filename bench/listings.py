"""Listings at scale: `GET /api/tickets` and `/api/runs` by a token that may decide nothing,
with many open tickets, and what `/healthz` waits meanwhile.

Usage::

    python bench/listings.py                          # 1,500 open tickets, 50 readers
    python bench/listings.py --tickets 5000 --readers 100 --requests 20
    python bench/listings.py --source /tmp/signoff-before   # another checkout's code

A SQLite file is seeded with `--tickets` open tickets (ten per run, approvers ``U-approver``
only) by the code under test, then `signoff serve` (``python -m bot serve`` of `--source`,
on 127.0.0.1, port 0) serves it. For each listing, `--readers` connections each send
`--requests` requests one after the other with the token of ``U-reader``, who may decide
none of the tickets; meanwhile one more connection asks ``/healthz`` every 10 ms. The report
gives the listing's answers per second and latency, and ``/healthz``'s latency: what a
request that needs no database waited for the event loop while the listings ran.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
READER_TOKEN = "bench-reader-token-0123456789"
OPERATOR_TOKEN = "bench-operator-token-0123456789"
PER_RUN = 10
SEED = [sys.executable, str(Path(__file__).resolve()), "--seed"]


def seed(db: Path, tickets: int) -> None:
    """Fill `db` with open tickets (run in a subprocess, with the code under test)."""
    from datetime import UTC, datetime, timedelta

    from runtime import RunStatus
    from runtime.domain.states import CallState
    from runtime.domain.tickets import ResumeTicket, ToolPermission
    from runtime.store.records import CallRecord, RunRecord
    from runtime.store.sql import SQLStore

    t0 = datetime(2026, 1, 1, tzinfo=UTC)

    async def fill() -> None:
        store = SQLStore.sqlite(db, synchronous="normal")
        await store.migrate()
        try:
            for first in range(0, tickets, PER_RUN):
                run_id = f"run_{first // PER_RUN:05d}"
                async with store.transaction() as tx:
                    await tx.insert_run(
                        RunRecord(
                            run_id=run_id,
                            thread_id=f"th_{run_id}",
                            agent="refunds",
                            agent_version="v1",
                            status=RunStatus.AWAITING,
                            input="refund",
                            requester="U-requester",
                            created_at=t0 + timedelta(seconds=first),
                            updated_at=t0,
                            origin={"platform": "console"},
                            messages=[],
                        )
                    )
                    for n in range(first, min(first + PER_RUN, tickets)):
                        call_id = f"call_{n:05d}"
                        await tx.insert_call(
                            CallRecord(
                                call_id=call_id,
                                run_id=run_id,
                                batch=1,
                                seq=n - first,
                                model_call_id=f"m{n}",
                                tool="refund",
                                args={"order": n},
                                state=CallState.AWAITING_DECISION,
                                replay_policy="manual",
                                execution_key=f"key_{call_id}",
                                created_at=t0,
                                updated_at=t0,
                            )
                        )
                        await tx.insert_ticket(
                            ResumeTicket(
                                ticket_id=f"tk_{n:05d}",
                                correlation=f"corr_{n}",
                                run_id=run_id,
                                thread_id=f"th_{run_id}",
                                agent="refunds",
                                agent_version="v1",
                                catalog_fingerprint="fp",
                                target=ToolPermission(
                                    call_id=call_id, tool="refund", args={"order": n}
                                ),
                                requester="U-requester",
                                approvers=("U-approver",),
                                created_at=t0 + timedelta(seconds=n),
                            )
                        )
        finally:
            await store.close()

    asyncio.run(fill())


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


async def measure(url: str, path: str, readers: int, requests: int) -> dict[str, float]:
    """`readers` x `requests` GETs of `path`, and /healthz probed meanwhile."""
    import aiohttp

    headers = {"Authorization": f"Bearer {READER_TOKEN}"}
    listing: list[float] = []
    probes: list[float] = []
    done = asyncio.Event()
    connector = aiohttp.TCPConnector(limit=readers + 1)
    async with aiohttp.ClientSession(connector=connector) as http:

        async def read() -> None:
            for _ in range(requests):
                began = time.perf_counter()
                async with http.get(url + path, headers=headers) as answer:
                    await answer.read()
                    assert answer.status == 200, answer.status
                listing.append(time.perf_counter() - began)

        async def probe() -> None:
            while not done.is_set():
                began = time.perf_counter()
                async with http.get(url + "/healthz") as answer:
                    await answer.read()
                probes.append(time.perf_counter() - began)
                await asyncio.sleep(0.01)

        prober = asyncio.create_task(probe())
        began = time.perf_counter()
        await asyncio.gather(*(read() for _ in range(readers)))
        elapsed = time.perf_counter() - began
        done.set()
        await prober
    return {
        "per_second": len(listing) / elapsed,
        "p50_ms": statistics.median(listing) * 1000,
        "p99_ms": percentile(listing, 0.99) * 1000,
        "health_p50_ms": statistics.median(probes) * 1000,
        "health_p99_ms": percentile(probes, 0.99) * 1000,
        "health_max_ms": max(probes) * 1000,
        "probes": len(probes),
    }


def serve(source: Path, db: Path, log: Path) -> tuple[subprocess.Popen[str], str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SIGNOFF_")}
    for proxy in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY"):
        env.pop(proxy, None)
    env.update(
        {
            "PYTHONPATH": str(source),
            "SIGNOFF_DATABASE_URL": f"sqlite+aiosqlite:///{db}",
            "SIGNOFF_APP": "bench.serve_app:agents",
            "SIGNOFF_PORT": "0",
            "SIGNOFF_OPERATOR_TOKEN": OPERATOR_TOKEN,
            "SIGNOFF_API_TOKENS": json.dumps(
                [{"token": READER_TOKEN, "actor": "U-reader", "name": "reader"}]
            ),
        }
    )
    process = subprocess.Popen(
        [sys.executable, "-m", "bot", "serve"],
        cwd=source,
        env=env,
        stdout=subprocess.PIPE,
        stderr=log.open("w"),
        text=True,
    )
    assert process.stdout is not None
    for line in process.stdout:
        if line.startswith("signoff serving at "):
            return process, line.split("signoff serving at ", 1)[1].strip()
    process.wait(timeout=10)
    raise RuntimeError(f"signoff serve did not start: {log.read_text()[-3000:]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tickets", type=int, default=1500)
    parser.add_argument("--readers", type=int, default=50)
    parser.add_argument("--requests", type=int, default=10, help="per reader")
    parser.add_argument("--source", type=Path, default=ROOT, help="the checkout to run")
    parser.add_argument("--seed", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.seed is not None:
        seed(args.seed, args.tickets)
        return
    source = args.source.resolve()
    with tempfile.TemporaryDirectory(prefix="signoff-listings-") as tmp:
        db, log = Path(tmp) / "listings.db", Path(tmp) / "serve.log"
        subprocess.run(
            [*SEED, str(db), "--tickets", str(args.tickets)],
            cwd=source,
            env={**os.environ, "PYTHONPATH": str(source)},
            check=True,
        )
        process, url = serve(source, db, log)
        try:
            print(
                f"{args.tickets} open tickets, {args.readers} readers x {args.requests} "
                f"requests, source {source}"
            )
            for path in ("/api/tickets", "/api/runs"):
                figures = asyncio.run(measure(url, path, args.readers, args.requests))
                print(
                    f"{path:13} {figures['per_second']:7.1f}/s  p50 {figures['p50_ms']:7.1f} ms"
                    f"  p99 {figures['p99_ms']:7.1f} ms  | /healthz p50 "
                    f"{figures['health_p50_ms']:6.1f} ms  p99 {figures['health_p99_ms']:7.1f} ms"
                    f"  max {figures['health_max_ms']:7.1f} ms ({figures['probes']:.0f} probes)"
                )
        finally:
            process.terminate()
            process.wait(timeout=60)
            if process.stdout is not None:
                process.stdout.close()


if __name__ == "__main__":
    main()
