"""Load benchmark of `signoff serve`: signed webhook starts, API decisions, idle memory.

Usage::

    python bench/serve_load.py                          # 10 s per phase, 16 connections
    python bench/serve_load.py --synchronous normal
    python bench/serve_load.py --seconds 5 --concurrency 32 --parked 2000
    python bench/serve_load.py --parked 0               # skip the memory comparison
    python bench/serve_load.py --only ready --restarts 5  # no load: start-up and memory only
    python bench/serve_load.py --parked 0 --profile /tmp/serve-prof   # where the CPU goes

`signoff serve` runs as a subprocess (``python -m bot serve``) on 127.0.0.1, port 0, with a
temporary SQLite file, the agents of `bench/serve_app.py` (one `ask` tool, a scripted
model, no network), one signed webhook (SIGNOFF_HOOKS), an API token (SIGNOFF_API_TOKENS)
and an operator token. The load comes from a second process (this script, spawned) with an
aiohttp client and `--concurrency` connections, each sending its next request as soon as
the previous one is answered, for `--seconds` per phase:

* ``webhook start``  ``POST /hooks/refunds``, signed, a unique Idempotency-Key each: the
                     202 answers per second and their latency. The server's workers park
                     the queued runs in the background; afterwards the generator polls
                     ``/metrics`` until none is queued or running (``drain``).
* ``GET run``        (untimed preparation, reported anyway) ``GET /api/runs/{id}`` of each
                     run parked by phase 1, to learn its ticket.
* ``decision``       ``POST /api/tickets/{id}/decision`` ``{"decision": "allow"}`` on those
                     tickets: the 200 answers per second and their latency; then the drain
                     until every decided run is ``done``.
* ``ready``          process start -> listening and -> the first ``/readyz`` 200, on the
                     empty database and on the one with `--parked` parked runs.
* ``memory``         VmRSS of the serve process, idle, just started on an empty database vs
                     just started on a database holding `--parked` parked runs (made
                     beforehand by this script with `runtime.Runtime` + `SQLStore` on the
                     same file, ``wait=True``, their notifications already delivered).

With ``--only ready`` the load phases are skipped: serve is started ``--restarts`` times on
an empty database and as often on one with ``--parked`` parked runs, and the start-up
times (median, min, max) and the idle VmRSS of each database's last start are printed.

With ``--library N`` (default 500; 0 skips) the generator process also runs the library's
own cycle (`bench/park_resume.py`'s, N runs one at a time) before the load phases and
after them, while serve idles, and the report ends with serve's CPU per full cycle (the
two phases' CPU per run added up) against the mean of those two: the ratio measured in
one run, the library on the same machine in the same minutes.

With ``--profile DIR`` the serve process runs under cProfile (`bench/profile_serve.py`; it
then costs about twice the CPU, so its figures are only for the shares): the report ends
with each phase's CPU by entry point and its store transactions per run.

Between phases the generator also waits for the outbox backlog (ticket and completion
notifications, delivered by the serve process's outbox loop) to reach zero, so one phase's
leftovers do not run into the next one's figures.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import re
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path
from typing import Any
from urllib import request as urlrequest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

HOOK = "refunds"
HOOK_SECRET = "bench-hook-secret-0123456789"
API_TOKEN = "bench-api-token-0123456789"
OPERATOR_TOKEN = "bench-operator-token-0123456789"
APP = "bench.serve_app:agents"
DRAIN_LIMIT_SECONDS = 180.0
DRAIN_POLL_SECONDS = 0.25
"""How often `/metrics` is read while waiting for a drain: each read costs the serve process
about a millisecond (it counts runs and open tickets), which at 10 reads a second showed
in the CPU per run."""
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


# -- the serve process ---------------------------------------------------------------
def proc_status(pid: int) -> dict[str, int]:
    """VmRSS, VmHWM ... of a process, in KiB."""
    values = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Vm") and line.endswith(" kB"):
            name, value = line.split(":", 1)
            values[name] = int(value.split()[0])
    return values


def proc_cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (all its threads)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


class Serve:
    """One `signoff serve` subprocess; stderr goes to a file."""

    def __init__(
        self, db: Path, synchronous: str, workers: int, log: Path, profile: Path | None = None
    ) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("SIGNOFF_")}
        for proxy in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY"):
            env.pop(proxy, None)
        env.update(serve_env(db, synchronous, workers))
        self.log = log
        self._stderr = log.open("w")
        began = time.perf_counter()
        command = [sys.executable, "-m", "bot", "serve"]
        if profile is not None:
            command = [sys.executable, str(ROOT / "bench" / "profile_serve.py"), str(profile)]
        self.process = subprocess.Popen(
            command,
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
        )
        self.pid = self.process.pid
        self.url = self._read_url()
        self.listening_seconds = time.perf_counter() - began
        """Process start -> the "signoff serving at" line (port bound)."""
        self.ready_seconds = self._wait_ready() - began
        """Process start -> the first ``/readyz`` 200 (database and schema checked)."""

    def _wait_ready(self) -> float:
        opener = urlrequest.build_opener(urlrequest.ProxyHandler({}))
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                with opener.open(f"{self.url}/readyz", timeout=10) as answer:
                    if answer.status == 200:
                        return time.perf_counter()
            except OSError:
                pass
            time.sleep(0.01)
        raise RuntimeError(f"signoff serve never became ready: {self.log.read_text()[-3000:]}")

    def _read_url(self) -> str:
        assert self.process.stdout is not None
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            line = self.process.stdout.readline()
            if not line:
                break
            if line.startswith("signoff serving at "):
                return line.split("signoff serving at ", 1)[1].strip()
        self.process.kill()
        self.process.wait(timeout=10)
        raise RuntimeError(f"signoff serve did not start: {self.log.read_text()[-3000:]}")

    def stop(self) -> int:
        self.process.send_signal(signal.SIGTERM)
        try:
            code = self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            code = self.process.wait(timeout=10)
        if self.process.stdout is not None:
            self.process.stdout.close()
        self._stderr.close()
        return code

    def log_problems(self) -> list[str]:
        """Lines of the server's log at ERROR or above, and tracebacks."""
        lines = self.log.read_text(errors="replace").splitlines()
        return [
            line
            for line in lines
            if '"level": "ERROR"' in line
            or '"level": "CRITICAL"' in line
            or "Traceback" in line
            or re.search(r"\bERROR\b", line)
        ]


def serve_env(db: Path, synchronous: str, workers: int) -> dict[str, str]:
    return {
        "PYTHONPATH": str(ROOT),
        "SIGNOFF_DATABASE_URL": f"sqlite+aiosqlite:///{db}",
        "SIGNOFF_SQLITE_SYNCHRONOUS": synchronous,
        "SIGNOFF_APP": APP,
        "SIGNOFF_PORT": "0",
        "SIGNOFF_WORKERS": str(workers),
        # Measure how fast requests are accepted, not the back-pressure limit.
        "SIGNOFF_MAX_QUEUED_RUNS": "0",
        "SIGNOFF_OPERATOR_TOKEN": OPERATOR_TOKEN,
        "SIGNOFF_API_TOKENS": json.dumps(
            [{"token": API_TOKEN, "actor": "U-bench", "operator": True, "name": "bench"}]
        ),
        "SIGNOFF_HOOKS": json.dumps(
            {
                HOOK: {
                    "secret": HOOK_SECRET,
                    "agent": "refunds",
                    "input_template": "Refund order {body[order]} for {body[amount]}",
                    "requester": "U-shop",
                }
            }
        ),
    }


def probe(url: str) -> dict[str, float]:
    """The run counts and outbox figures of ``/metrics`` (one plain request)."""
    opener = urlrequest.build_opener(urlrequest.ProxyHandler({}))
    with opener.open(f"{url}/metrics", timeout=30) as answer:
        return parse_metrics(answer.read().decode())


def idle_rss(serve: Serve, settle: float) -> dict[str, int]:
    """Wait until the process has used no CPU for a while (max 30 s), then read its memory."""
    deadline = time.monotonic() + 30
    quiet_since = time.monotonic()
    cpu = proc_cpu_seconds(serve.pid)
    while time.monotonic() < deadline:
        time.sleep(0.5)
        now_cpu = proc_cpu_seconds(serve.pid)
        if now_cpu - cpu > 0.02:  # its loops wake a few times a second; that is idle
            quiet_since = time.monotonic()
        cpu = now_cpu
        if time.monotonic() - quiet_since >= settle:
            break
    return proc_status(serve.pid)


# -- the load generator (runs in a second process) -------------------------------------
def percentile(sorted_values: Sequence[float], fraction: float) -> float:
    if not sorted_values:
        return float("nan")
    index = min(len(sorted_values) - 1, max(0, round(fraction * len(sorted_values)) - 1))
    return sorted_values[index]


def parse_metrics(text: str) -> dict[str, float]:
    """``signoff_runs{status=...}`` and ``signoff_outbox_*`` from Prometheus text."""
    found: dict[str, float] = {}
    for line in text.splitlines():
        match = re.match(r'signoff_runs\{status="(\w+)"\} (\S+)', line)
        if match:
            found[match.group(1)] = float(match.group(2))
        elif line.startswith(("signoff_outbox_backlog ", "signoff_outbox_failed ")):
            name, value = line.split()
            found[name.removeprefix("signoff_")] = float(value)
    return found


class Monitor:
    """Reads ``/metrics`` and keeps the peaks of the queued runs and the outbox backlog."""

    def __init__(self, session: Any, url: str) -> None:
        self.session = session
        self.url = url
        self.peaks: Counter[str] = Counter()

    async def read(self) -> dict[str, float]:
        async with self.session.get(f"{self.url}/metrics") as answer:
            figures = parse_metrics(await answer.text())
        for name in ("queued", "outbox_backlog"):
            self.peaks[name] = max(self.peaks[name], int(figures.get(name, 0)))
        return figures

    async def sample(self, stop: asyncio.Event, seconds: float = 1.0) -> None:
        """Read every `seconds` until `stop` (while the timed requests run)."""
        while not stop.is_set():
            await self.read()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=seconds)

    async def wait_until(
        self, done: Callable[[dict[str, float]], bool]
    ) -> tuple[float, dict[str, float], bool]:
        """Poll until `done`; (seconds waited, last figures, reached)."""
        began = time.perf_counter()
        while True:
            figures = await self.read()
            if done(figures):
                return time.perf_counter() - began, figures, True
            if time.perf_counter() - began > DRAIN_LIMIT_SECONDS:
                return time.perf_counter() - began, figures, False
            await asyncio.sleep(DRAIN_POLL_SECONDS)

    async def during(self, body: Awaitable[dict[str, Any]]) -> dict[str, Any]:
        stop = asyncio.Event()
        sampler = asyncio.create_task(self.sample(stop))
        try:
            return await body
        finally:
            stop.set()
            await sampler


def busy(figures: dict[str, float]) -> float:
    return figures.get("queued", 0) + figures.get("running", 0)


async def closed_loop(
    concurrency: int,
    seconds: float,
    work: Callable[[int], Awaitable[tuple[int | str, float, Any]]],
    supply: int | None = None,
) -> dict[str, Any]:
    """`concurrency` loops calling `work(i)` until `seconds` pass (or `supply` runs out)."""
    latencies: list[float] = []
    statuses: Counter[str] = Counter()
    samples: list[str] = []
    payloads: list[Any] = []
    counter = iter(range(supply if supply is not None else 1 << 62))
    began = time.perf_counter()
    deadline = began + seconds

    async def loop() -> None:
        for index in counter:
            if time.perf_counter() >= deadline:
                return
            try:
                status, latency, payload = await work(index)
            except Exception as exc:
                status, latency, payload = type(exc).__name__, 0.0, None
                if len(samples) < 5:
                    samples.append(repr(exc))
            statuses[str(status)] += 1
            if isinstance(status, int) and 200 <= status < 300:
                latencies.append(latency)
                payloads.append(payload)
            elif len(samples) < 5:
                samples.append(f"{status}: {str(payload)[:300]}")

    await asyncio.gather(*(loop() for _ in range(concurrency)))
    elapsed = time.perf_counter() - began
    latencies.sort()
    return {
        "seconds": elapsed,
        "ok": len(latencies),
        "requests": sum(statuses.values()),
        "statuses": dict(statuses),
        "samples": samples,
        "p50": percentile(latencies, 0.50),
        "p99": percentile(latencies, 0.99),
        "max": latencies[-1] if latencies else float("nan"),
        "payloads": payloads,
    }


async def timed_request(
    session: Any, method: str, url: str, **kwargs: Any
) -> tuple[int, float, Any]:
    began = time.perf_counter()
    async with session.request(method, url, **kwargs) as answer:
        body = await answer.read()
    latency = time.perf_counter() - began
    try:
        payload = json.loads(body) if body else None
    except ValueError:
        payload = body[:300]
    return answer.status, latency, payload


def cut_profile(pid: int, profiled: bool) -> None:
    """With ``--profile``: the serve process writes what it profiled so far (SIGUSR1)."""
    if profiled:
        os.kill(pid, signal.SIGUSR1)


async def hooks_phase(
    url: str, pid: int, seconds: float, concurrency: int, profiled: bool
) -> dict[str, Any]:
    import aiohttp

    from adapters.webhook.signing import signed_headers

    run = uuid.uuid4().hex[:8]
    async with aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=concurrency + 1),  # + the monitor
        timeout=aiohttp.ClientTimeout(total=60),
    ) as session:
        monitor = Monitor(session, url)
        before = await monitor.read()

        async def start(index: int) -> tuple[int, float, Any]:
            body = json.dumps({"order": f"O-{run}-{index}", "amount": 25}).encode()
            headers = {
                **signed_headers(HOOK_SECRET, body, time.time()),
                "Idempotency-Key": f"bench-{run}-{index}",
                "Content-Type": "application/json",
            }
            return await timed_request(
                session, "POST", f"{url}/hooks/{HOOK}", data=body, headers=headers
            )

        cut_profile(pid, profiled)
        cpu0, gen0 = proc_cpu_seconds(pid), time.process_time()
        result = await monitor.during(closed_loop(concurrency, seconds, start))
        cpu1, gen1 = proc_cpu_seconds(pid), time.process_time()
        started = result.pop("payloads")
        result["run_ids"] = [p["run_id"] for p in started if isinstance(p, dict)]
        wanted = before.get("awaiting", 0) + len(result["run_ids"])
        drain, figures, drained = await monitor.wait_until(
            lambda f: busy(f) == 0 and f.get("awaiting", 0) >= wanted
        )
        cpu2 = proc_cpu_seconds(pid)
        cut_profile(pid, profiled)
        outbox, after, _ = await monitor.wait_until(lambda f: f["outbox_backlog"] == 0)
    result.update(
        serve_cpu=cpu1 - cpu0,
        serve_cpu_to_parked=cpu2 - cpu0,
        generator_cpu=gen1 - gen0,
        drain=drain,
        drained=drained,
        figures=figures,
        outbox_drain=outbox,
        after=after,
        peaks=dict(monitor.peaks),
    )
    return result


async def decisions_phase(
    url: str, pid: int, seconds: float, concurrency: int, run_ids: list[str], profiled: bool
) -> dict[str, Any]:
    import aiohttp

    auth = {"Authorization": f"Bearer {API_TOKEN}"}
    async with aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=concurrency + 1),  # + the monitor
        timeout=aiohttp.ClientTimeout(total=60),
        headers=auth,
    ) as session:

        async def show(index: int) -> tuple[int, float, Any]:
            return await timed_request(session, "GET", f"{url}/api/runs/{run_ids[index]}")

        lookup = await closed_loop(concurrency, 3600, show, supply=len(run_ids))
        tickets = [
            p["pending"][0]["ticket_id"]
            for p in lookup.pop("payloads")
            if p.get("status") == "awaiting" and p.get("pending")
        ]
        monitor = Monitor(session, url)
        before = await monitor.read()

        async def decide(index: int) -> tuple[int, float, Any]:
            return await timed_request(
                session,
                "POST",
                f"{url}/api/tickets/{tickets[index]}/decision",
                json={"decision": "allow"},
            )

        cut_profile(pid, profiled)
        cpu0, gen0 = proc_cpu_seconds(pid), time.process_time()
        result = await monitor.during(
            closed_loop(concurrency, seconds, decide, supply=len(tickets))
        )
        cpu1, gen1 = proc_cpu_seconds(pid), time.process_time()
        decided = result.pop("payloads")
        wanted = before.get("done", 0) + len(decided)
        drain, figures, drained = await monitor.wait_until(
            lambda f: busy(f) == 0 and f.get("done", 0) >= wanted
        )
        cpu2 = proc_cpu_seconds(pid)
        cut_profile(pid, profiled)
        outbox, after, _ = await monitor.wait_until(lambda f: f["outbox_backlog"] == 0)
    result.update(
        lookup=lookup,
        tickets=len(tickets),
        exhausted=result["requests"] >= len(tickets),
        serve_cpu=cpu1 - cpu0,
        serve_cpu_to_done=cpu2 - cpu0,
        generator_cpu=gen1 - gen0,
        drain=drain,
        drained=drained,
        figures=figures,
        outbox_drain=outbox,
        after=after,
        peaks=dict(monitor.peaks),
    )
    return result


def generate(phase: str, **params: Any) -> dict[str, Any]:
    """Entry point of the load-generator process."""
    if phase == "hooks":
        return asyncio.run(hooks_phase(**params))
    return asyncio.run(decisions_phase(**params))


def library_cycle(runs: int, synchronous: str) -> float:
    """Entry point of the generator process between the load phases: the library's CPU
    milliseconds per full cycle, one run at a time (`bench/park_resume.py`'s cycle:
    park on an ``ask`` tool, then approve and finish, on a SQLite file)."""
    from park_resume import bench_store, sqlite_store

    async def measure() -> float:
        with tempfile.TemporaryDirectory(prefix="signoff-library-bench-") as scratch:
            store = sqlite_store(Path(scratch) / "library.db", synchronous)
            park, finish = (await bench_store(store, "library", runs, 1, None))[:2]
        return 1000 * (park.cpu_seconds + finish.cpu_seconds) / runs

    return asyncio.run(measure())


# -- parked runs made beforehand ------------------------------------------------------
async def prepopulate(db: Path, count: int, concurrency: int) -> float:
    """`count` runs parked on their `ask` tool, as the webhook would start them."""
    import hashlib

    from bench.serve_app import agents
    from runtime import RunStatus, Runtime
    from runtime.services.delivery import NullNotifier, deliver_due
    from runtime.store.sql import SQLStore

    store = SQLStore.from_url(
        f"sqlite+aiosqlite:///{db}", busy_timeout_ms=5000, synchronous="normal"
    )
    await store.migrate()
    runtime = Runtime(store, agents())
    began = time.perf_counter()
    numbers = iter(range(count))

    async def park() -> None:
        for index in numbers:
            body = json.dumps({"order": f"P-{index}", "amount": 25}).encode()
            result = await runtime.start(
                "refunds",
                f"Refund order P-{index} for 25",
                requester="U-shop",
                origin={"platform": "console", "hook": HOOK},
                idempotency=(f"hook:{HOOK}", f"pre-{index}", hashlib.sha256(body).hexdigest()),
                wait=True,
            )
            if result.status is not RunStatus.AWAITING:
                raise RuntimeError(f"run {result.run_id} did not park: {result.status}")
            if index and index % 2000 == 0:
                print(f"  parked {index} runs", file=sys.stderr, flush=True)

    await asyncio.gather(*(park() for _ in range(concurrency)))
    while await deliver_due(store, runtime.clock, NullNotifier(), limit=500):
        pass
    async with store.transaction() as tx:
        counts = await tx.count_runs()
    await store.close()
    if counts != {"awaiting": count}:
        raise RuntimeError(f"unexpected run states after pre-populating: {counts}")
    return time.perf_counter() - began


# -- report ---------------------------------------------------------------------------
def mib(kib: int) -> str:
    return f"{kib / 1024:.1f} MiB"


def row(name: str, r: dict[str, Any], serve_cpu: float | None) -> str:
    errors = r["requests"] - r["ok"]
    cpu = f"{1000 * serve_cpu / r['ok']:.2f}" if serve_cpu is not None and r["ok"] else "-"
    return (
        f"{name:<30} {r['requests']:>8} {errors:>6} {r['ok'] / r['seconds']:>8.1f} "
        f"{1000 * r['p50']:>8.1f} {1000 * r['p99']:>8.1f} {1000 * r['max']:>8.1f} {cpu:>10}"
    )


def report(args: argparse.Namespace, results: dict[str, Any]) -> str:
    hooks, decisions = results["hooks"], results["decisions"]
    lines = [
        f"signoff serve load: {args.seconds:g} s per phase, {args.concurrency} connections, "
        f"SQLite synchronous={args.synchronous}, SIGNOFF_WORKERS={args.workers}",
        f"machine: {platform.machine()}, nproc {os.cpu_count()}, "
        f"Python {platform.python_version()}, {platform.system()} {platform.release()}, "
        f"{time.strftime('%Y-%m-%d %H:%M %Z')}",
        "",
        f"{'requests':<30} {'sent':>8} {'errors':>6} {'ok/s':>8} {'p50 ms':>8} {'p99 ms':>8} "
        f"{'max ms':>8} {'cpu ms/ok':>10}",
        row("POST /hooks/refunds -> 202", hooks, hooks["serve_cpu"]),
        row("GET /api/runs/{id} (prep)", decisions["lookup"], None),
        row("POST .../decision -> 200", decisions, decisions["serve_cpu"]),
        "",
        f"{'end to end':<30} {'runs':>8} {'load s':>8} {'drain s':>8} {'runs/s':>8} "
        f"{'cpu ms/run':>10}",
    ]
    for name, r, count, cpu in (
        ("started -> parked", hooks, hooks["ok"], hooks["serve_cpu_to_parked"]),
        ("decided -> done", decisions, decisions["ok"], decisions["serve_cpu_to_done"]),
    ):
        total = r["seconds"] + r["drain"]
        flag = "" if r["drained"] else "  NOT DRAINED"
        lines.append(
            f"{name:<30} {count:>8} {r['seconds']:>8.1f} {r['drain']:>8.1f} "
            f"{count / total:>8.1f} {1000 * cpu / max(count, 1):>10.2f}{flag}"
        )
    lines += [
        "",
        "cpu ms/ok: CPU time of the serve process (all threads, its workers included) during",
        "the timed requests, per answered request; cpu ms/run: the same from the first request",
        "until the last run had parked (phase 1) or ended (phase 2).",
        "serve process CPU during the timed requests: "
        f"{100 * hooks['serve_cpu'] / hooks['seconds']:.0f}% of one core (phase 1), "
        f"{100 * decisions['serve_cpu'] / decisions['seconds']:.0f}% (phase 2).",
        f"peak queued runs: {hooks['peaks']['queued']} (phase 1), "
        f"{decisions['peaks']['queued']} (phase 2); peak outbox backlog: "
        f"{hooks['peaks']['outbox_backlog']}, {decisions['peaks']['outbox_backlog']}.",
        f"outbox backlog drained {hooks['outbox_drain']:.1f} s after phase 1 was parked and "
        f"{decisions['outbox_drain']:.1f} s after phase 2 was done.",
        f"decision phase: {decisions['tickets']} tickets available, "
        f"{'all used up before the time was over' if decisions['exhausted'] else 'not used up'}.",
        f"generator CPU: {1000 * hooks['generator_cpu'] / max(hooks['ok'], 1):.2f} ms per hook, "
        f"{1000 * decisions['generator_cpu'] / max(decisions['ok'], 1):.2f} ms per decision.",
    ]
    for name, r in (("hooks", hooks), ("lookups", decisions["lookup"]), ("decisions", decisions)):
        if r["requests"] != r["ok"]:
            lines.append(f"{name}: statuses {r['statuses']}; e.g. {r['samples']}")
    lines.append(f"runs at the end of the load phases: {results['final']}")
    library = results.get("library") or []
    if library:
        serve = sum(
            1000 * cpu / max(count, 1)
            for count, cpu in (
                (hooks["ok"], hooks["serve_cpu_to_parked"]),
                (decisions["ok"], decisions["serve_cpu_to_done"]),
            )
        )
        measured = " ms, after: ".join(f"{x:.2f}" for x in library)
        lines += [
            "",
            f"serve CPU per full cycle (started -> parked + decided -> done): {serve:.2f} ms",
            f"library CPU per full cycle, one at a time (park_resume.py, {args.library} runs), "
            f"before: {measured} ms",
            f"serve / library: {serve / (sum(library) / len(library)):.2f}x",
        ]
    memory = results.get("memory")
    if memory:
        empty, parked, loaded = memory["empty"], memory["parked"], memory["after_load"]
        diff = parked["VmRSS"] - empty["VmRSS"]
        lines += [
            "",
            f"{'serve process, idle':<44} {'VmRSS':>10} {'VmHWM':>10}",
            f"{'just started, 0 parked runs':<44} {mib(empty['VmRSS']):>10} "
            f"{mib(empty['VmHWM']):>10}",
            f"{f'just started, {args.parked} parked runs':<44} {mib(parked['VmRSS']):>10} "
            f"{mib(parked['VmHWM']):>10}",
            f"{'difference':<44} {mib(diff):>10}   = {diff * 1024 / args.parked:.0f} bytes "
            "per parked run",
            f"{'after the load phases (same process as row 1)':<44} "
            f"{mib(loaded['VmRSS']):>10} {mib(loaded['VmHWM']):>10}",
            f"({args.parked} parked runs made in {memory['prepopulate']:.1f} s with "
            f"Runtime.start(wait=True), {args.concurrency} tasks, synchronous=normal)",
        ]
    lines.append("")
    for key in ("ready_empty", "ready_parked"):
        if key in results:
            listening, ready = results[key]
            count = args.parked if key == "ready_parked" else 0
            lines.append(
                f"start -> listening / -> /readyz 200, {count} parked runs: "
                f"{listening:.2f} s / {ready:.2f} s"
            )
    problems = results["log_problems"]
    lines.append("")
    lines.append(f"server problems (ERROR log lines, tracebacks, bad exit): {len(problems)}")
    lines += [f"  {line[:300]}" for line in problems[:5]]
    return "\n".join(lines)


# -- start-up only (--only ready) -----------------------------------------------------
def bytecode_note() -> str:
    """Whether the project's own modules start from bytecode or are compiled each time."""
    import importlib.util

    source = ROOT / "bot" / "cli" / "__init__.py"
    cached = Path(importlib.util.cache_from_source(str(source))).exists()
    if cached:
        return "the project's modules have bytecode (__pycache__)"
    flag = " (PYTHONDONTWRITEBYTECODE is set)" if os.environ.get("PYTHONDONTWRITEBYTECODE") else ""
    return f"the project's modules have no bytecode: compiled at every start{flag}"


def restarts(db: Path, count: int, args: argparse.Namespace, log: Path) -> dict[str, Any]:
    """Start serve on `db` `count` times; the last start's idle memory and runs."""
    times, problems = [], []
    for attempt in range(count):
        serve = Serve(db, args.synchronous, args.workers, log)
        try:
            times.append(
                (serve.listening_seconds, serve.ready_seconds, proc_cpu_seconds(serve.pid))
            )
            if attempt == count - 1:
                seen = probe(serve.url)
                memory = idle_rss(serve, args.settle)
        finally:
            code = serve.stop()
            problems += serve.log_problems()
        if code != 0:
            problems.append(f"serve exited with {code} on SIGTERM")
    return {"times": times, "memory": memory, "seen": seen, "problems": problems}


def startup_only(args: argparse.Namespace) -> None:
    """``--only ready``: start-up times and idle memory, empty vs `--parked` runs."""
    import statistics

    began = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="signoff-serve-bench-") as scratch:
        tmp = Path(scratch)
        new = restarts(tmp / "empty.db", 1, args, tmp / "new.log")
        empty = restarts(tmp / "empty.db", args.restarts, args, tmp / "empty.log")
        print(f"pre-populating {args.parked} parked runs", file=sys.stderr, flush=True)
        seconds = asyncio.run(prepopulate(tmp / "parked.db", args.parked, args.concurrency))
        parked = restarts(tmp / "parked.db", args.restarts, args, tmp / "parked.log")
    problems = new["problems"] + empty["problems"] + parked["problems"]
    if parked["seen"].get("awaiting") != args.parked or parked["seen"].get("outbox_backlog"):
        problems.append(f"the pre-populated database looked wrong to serve: {parked['seen']}")
    lines = [
        f"signoff serve start-up: {args.restarts} starts per database, SQLite "
        f"synchronous={args.synchronous}, SIGNOFF_WORKERS={args.workers}",
        f"machine: {platform.machine()}, nproc {os.cpu_count()}, "
        f"Python {platform.python_version()}, {platform.system()} {platform.release()}, "
        f"{time.strftime('%Y-%m-%d %H:%M %Z')}; {bytecode_note()}",
        "",
        f"{'database':<20} {'-> listening s':>18} {'-> /readyz 200 s':>18} "
        f"{'CPU s to ready':>18} {'VmRSS idle':>11}",
    ]
    rows = (("new file (migrates)", new), ("0 runs", empty), (f"{args.parked} parked runs", parked))
    for name, result in rows:
        figures = []
        for which in (0, 1, 2):
            values = sorted(t[which] for t in result["times"])
            figures.append(f"{statistics.median(values):.2f} ({values[0]:.2f}-{values[-1]:.2f})")
        lines.append(
            f"{name:<20} {figures[0]:>18} {figures[1]:>18} {figures[2]:>18} "
            f"{mib(result['memory']['VmRSS']):>11}"
        )
    diff = parked["memory"]["VmRSS"] - empty["memory"]["VmRSS"]
    lines += [
        f"median (min-max) of {args.restarts} starts (1 on the new file); CPU: user + system",
        "time of the serve process from its start to the first /readyz 200 (the part of the",
        "start-up that other processes' load does not stretch).",
        f"VmRSS difference: {mib(diff)} = {diff * 1024 / max(args.parked, 1):.0f} bytes per "
        f"parked run ({args.parked} made in {seconds:.1f} s beforehand)",
        "",
        f"server problems (ERROR log lines, tracebacks, bad exit): {len(problems)}",
        *(f"  {line[:300]}" for line in problems[:5]),
    ]
    print("\n".join(lines))
    print(
        f"total {time.perf_counter() - began:.0f} s; load average after the run: "
        f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}"
    )


def print_profiles(folder: Path, results: dict[str, Any]) -> None:
    """With ``--profile``: where each phase's CPU went, and its transactions per run."""
    from bench.profile_serve import shares

    for number, name, runs in (
        (2, "phase 1, started -> parked", results["hooks"]["ok"]),
        (4, "phase 2, decided -> done", results["decisions"]["ok"]),
    ):
        print(f"\n== {name}: serve process CPU (main thread, cProfile) by entry point")
        for what, share in shares(folder / f"{number}.prof"):
            print(f"    {100 * share:5.1f}%  {what}")
        print(f"== {name}: store transactions per run, by opener")
        for line in (folder / f"{number}.tx.txt").read_text().splitlines():
            count, where = line.split(maxsplit=1)
            print(f"    {int(count) / max(runs, 1):6.2f}  {where}")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=10.0, help="per timed phase")
    parser.add_argument("--concurrency", type=int, default=16, help="client connections")
    parser.add_argument("--parked", type=int, default=10_000, help="0 skips the memory test")
    parser.add_argument("--synchronous", choices=["full", "normal"], default="full")
    parser.add_argument("--workers", type=int, default=4, help="SIGNOFF_WORKERS")
    parser.add_argument(
        "--profile",
        type=Path,
        default=None,
        help="run the serve process under cProfile; write DIR/2.prof (phase 1) and 4.prof "
        "(phase 2)",
    )
    parser.add_argument("--settle", type=float, default=2.0, help="idle seconds before RSS")
    parser.add_argument(
        "--library",
        type=int,
        default=500,
        help="runs of the library's own cycle before and after the load phases, for the "
        "serve/library CPU ratio (0 skips)",
    )
    parser.add_argument(
        "--only", choices=["ready"], help="ready: only start-up times and idle memory, no load"
    )
    parser.add_argument(
        "--restarts", type=int, default=3, help="with --only ready: starts per database"
    )
    args = parser.parse_args(argv)
    if args.only == "ready":
        if args.parked <= 0 or args.restarts <= 0:
            parser.error("--only ready needs --parked and --restarts above 0")
        startup_only(args)
        return

    results: dict[str, Any] = {}
    problems: list[str] = []
    began = time.perf_counter()
    with (
        tempfile.TemporaryDirectory(prefix="signoff-serve-bench-") as scratch,
        ProcessPoolExecutor(max_workers=1, mp_context=get_context("spawn")) as generator,
    ):
        tmp = Path(scratch)
        serve = Serve(
            tmp / "load.db", args.synchronous, args.workers, tmp / "load.log", args.profile
        )
        try:
            generator.submit(time.sleep, 0).result()  # start the generator process now
            probe(serve.url)
            results["ready_empty"] = (serve.listening_seconds, serve.ready_seconds)
            empty = idle_rss(serve, args.settle)
            print(f"serving at {serve.url} (pid {serve.pid})", file=sys.stderr, flush=True)
            library: list[float] = []
            if args.library > 0:
                library.append(
                    generator.submit(library_cycle, args.library, args.synchronous).result()
                )
            hooks = generator.submit(
                generate,
                "hooks",
                url=serve.url,
                pid=serve.pid,
                seconds=args.seconds,
                concurrency=args.concurrency,
                profiled=args.profile is not None,
            ).result()
            print(f"phase 1: {hooks['ok']} runs started", file=sys.stderr, flush=True)
            decisions = generator.submit(
                generate,
                "decisions",
                url=serve.url,
                pid=serve.pid,
                seconds=args.seconds,
                concurrency=args.concurrency,
                run_ids=hooks.pop("run_ids"),
                profiled=args.profile is not None,
            ).result()
            print(f"phase 2: {decisions['ok']} decisions", file=sys.stderr, flush=True)
            if args.library > 0:
                library.append(
                    generator.submit(library_cycle, args.library, args.synchronous).result()
                )
            results.update(
                hooks=hooks, decisions=decisions, final=decisions["after"], library=library
            )
            after_load = idle_rss(serve, args.settle)
        finally:
            code = serve.stop()
            problems += serve.log_problems()
        if code != 0:
            problems.append(f"serve exited with {code} on SIGTERM")
        if args.parked > 0:
            db = tmp / "parked.db"
            print(f"pre-populating {args.parked} parked runs", file=sys.stderr, flush=True)
            seconds = asyncio.run(prepopulate(db, args.parked, args.concurrency))
            serve = Serve(db, args.synchronous, args.workers, tmp / "parked.log")
            results["ready_parked"] = (serve.listening_seconds, serve.ready_seconds)
            try:
                seen = probe(serve.url)
                parked = idle_rss(serve, args.settle)
            finally:
                code = serve.stop()
                problems += serve.log_problems()
            if code != 0:
                problems.append(f"serve exited with {code} on SIGTERM")
            if seen.get("awaiting") != args.parked or seen.get("outbox_backlog"):
                problems.append(f"the pre-populated database looked wrong to serve: {seen}")
            results["memory"] = {
                "empty": empty,
                "parked": parked,
                "after_load": after_load,
                "prepopulate": seconds,
            }
    results["log_problems"] = problems
    print(report(args, results))
    if args.profile is not None:
        print_profiles(args.profile, results)
    print(
        f"total {time.perf_counter() - began:.0f} s; load average after the run: "
        f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}"
    )


if __name__ == "__main__":
    main()
