"""The MCP gateway's overhead per allowed call: the `mcp` SDK's client calling one upstream
tool directly, and through `signoff serve`'s ``/mcp/<agent>`` and `signoff mcp <agent>`.

Usage::

    python bench/gateway.py                          # 4 rounds of 200 calls per side
    python bench/gateway.py --calls 500 --rounds 5 --synchronous normal
    python bench/gateway.py --rounds 1 --profile /tmp/gateway-profile
    python bench/gateway.py --database postgresql+asyncpg://user:pw@127.0.0.1/bench

The upstream is `bench/gateway_upstream.py`: an MCP server (the SDK's ``MCPServer``) with
one tool, ``echo``, that answers with its text. It serves Streamable HTTP on 127.0.0.1 in a
process of its own for the whole run. An agents file (``SIGNOFF_AGENTS``) declares it as
the HTTP server ``upstream`` of the agent ``bench``, whose rule allows ``upstream.echo``.
`signoff serve` (``python -m bot serve``, 127.0.0.1, port 0) runs on the database
(`--database`, a SQLAlchemy URL; default a fresh SQLite file in a temporary directory,
committing with `--synchronous`, default ``full`` as `signoff serve`'s) with an API token
(``SIGNOFF_API_TOKENS``, identity ``svc:bench``), for the whole run. PostgreSQL also
needs ``SIGNOFF_COOKIE_SECRET`` and ``SIGNOFF_OPERATOR_TOKEN``: the bench sets both.

Four sides, each an SDK ``Client`` making `--calls` calls one at a time, each call with
its own text (the gateway matches a call with the same arguments in the same session to
the first one's outcome, so a repeated text would be a replay):

* ``direct http``: the client on the upstream's Streamable HTTP endpoint;
* ``direct stdio``: the client starting the upstream over stdio (a process of its own);
* ``gateway http``: the client on ``/mcp/bench`` of `signoff serve`, with the bearer token
  and a ``Signoff-Session`` header; signoff calls the upstream over HTTP;
* ``gateway stdio``: the client starting ``signoff mcp bench --as svc:bench
  --no-operator`` on the same database; it calls the upstream over HTTP.

Each round connects each side, makes `--warmup` untimed calls, then times `--calls`
calls; the order of the sides turns by one each round (in 4 rounds each side goes first
once). Each round starts by measuring the disk: plain `sqlite3` commits per second
(WAL, FULL, one small insert each) for half a second. Per side and round: latency per
call (median, p95, mean), calls per second and the CPU the server's process used per
call (the upstream's for the direct sides, signoff's for the gateway sides, read from
``/proc``). Ratios are taken within a round against ``direct http``, whose upstream hop
every gateway call makes too.

With `--profile DIR`, `signoff serve` runs under `bench/profile_serve.py` (cProfile,
CPU time, its main thread) and the profile is cut around each round's timed calls of
``gateway http`` (``DIR/2.prof``, ``4.prof`` ...); their CPU is then printed by layer.
The latencies and CPU of that run are the profiled process's, several times slower.

Then `--transactions N` calls (default 20; 0 skips it) through each gateway again, with
a `signoff serve` and a `signoff mcp` started by this script (``counted`` below) that
count the store's transactions by the function that opened them (as
`bench/profile_serve.py` counts them), between two snapshots taken around the calls.
Reads include the serving process's own looks for work (worker, outbox, deadlines).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "bench"
UPSTREAM = BENCH / "gateway_upstream.py"
SCRIPT = BENCH / "gateway.py"
AGENT = "bench"
ACTOR = "svc:bench"
TOKEN = "bench-gateway-token-0123456789"
START_TIMEOUT = 120.0  # seconds for a process to say it is ready
CALL_TIMEOUT = 60.0  # seconds one call may take before the bench gives up
TICKS = os.sysconf("SC_CLK_TCK")
AGENTS_FILE = """\
[servers.upstream]
url = "{url}"

[agents.{agent}]
description = "Calls one MCP tool"
instructions = "Echo what you are asked to."
model = "examples.mcp:infra_model"
servers = ["upstream"]

[agents.{agent}.rules."upstream.echo"]
permission = "allow"
"""
SIDES = ("direct http", "direct stdio", "gateway http", "gateway stdio")
BASE = "direct http"


# -- processes -----------------------------------------------------------------------------


def proc_cpu(pid: int) -> float:
    """A process's own user + system CPU seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime, stime (fields 14 and 15)


def children(marker: str) -> list[int]:
    """This process's children whose command line contains `marker`."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == os.getpid() and marker in command:
            found.append(int(entry.name))
    return found


def disk_rate(directory: Path, seconds: float = 0.5) -> float:
    """Plain `sqlite3` commits per second in `directory` (WAL, FULL; one small insert each)."""
    path = directory / "raw.db"
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=FULL")
        conn.execute("CREATE TABLE IF NOT EXISTS raw (id INTEGER PRIMARY KEY, v TEXT)")
        done, began = 0, time.perf_counter()
        while (elapsed := time.perf_counter() - began) < seconds:
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("INSERT INTO raw (v) VALUES (?)", ("x" * 100,))
            conn.execute("COMMIT")
            done += 1
        return done / elapsed
    finally:
        conn.close()


def tail(path: Path) -> str:
    return path.read_text()[-3000:]


def read_snapshot(path: Path) -> dict[str, Any] | None:
    try:
        found: dict[str, Any] = json.loads(path.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None
    return found


def environment(database: str, agents: Path, synchronous: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SIGNOFF_")}
    for proxy in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY"):
        env.pop(proxy, None)
    env.update(
        SIGNOFF_DATABASE_URL=database,
        SIGNOFF_AGENTS=str(agents),
        SIGNOFF_BIND_HOST="127.0.0.1",
        SIGNOFF_PORT="0",
        SIGNOFF_API_TOKENS=json.dumps([{"token": TOKEN, "actor": ACTOR}]),
        SIGNOFF_LOG_LEVEL="WARNING",
        SIGNOFF_SQLITE_SYNCHRONOUS=synchronous,
        # required off SQLite (every replica must share them); the bench uses neither
        SIGNOFF_COOKIE_SECRET="bench-cookie-secret-0123456789abcdef",
        SIGNOFF_OPERATOR_TOKEN="bench-operator-token-0123456789",
    )
    return env


@dataclass
class Process:
    """A subprocess that prints a line once it is ready; its stderr goes to a log file."""

    process: asyncio.subprocess.Process
    log: Path
    drain: asyncio.Task[None] | None = None

    @classmethod
    async def start(
        cls, argv: list[str], env: dict[str, str], log: Path, ready: Callable[[str], bool]
    ) -> tuple[Process, str]:
        """Start `argv`; return it and its first stdout line for which `ready` holds."""
        with log.open("w") as err:
            process = await asyncio.create_subprocess_exec(
                *argv,
                cwd=ROOT,
                env=env,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=err,
            )
        started = cls(process, log)
        assert process.stdout is not None
        try:
            async with asyncio.timeout(START_TIMEOUT):
                while line := (await process.stdout.readline()).decode():
                    if ready(line):
                        started.drain = asyncio.create_task(started._drain())
                        return started, line.strip()
        except BaseException:
            await started.stop()
            raise
        await started.stop()
        raise RuntimeError(f"{argv[1:]} did not start: {tail(log)}")

    async def _drain(self) -> None:
        assert self.process.stdout is not None
        while await self.process.stdout.read(65536):
            pass

    async def stop(self) -> None:
        if self.process.returncode is None:
            self.process.terminate()
            try:
                await asyncio.wait_for(self.process.wait(), 30)
            except TimeoutError:
                self.process.kill()
                await self.process.wait()
        if self.drain is not None:
            await self.drain


async def signoff(env: dict[str, str], *args: str) -> None:
    """Run one `signoff` command to its end."""
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot", *args, cwd=ROOT, env=env, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )  # fmt: skip
    _, err = await asyncio.wait_for(process.communicate(), START_TIMEOUT)
    if process.returncode != 0:
        raise RuntimeError(f"signoff {' '.join(args)}: {err.decode()[-2000:]}")


# -- the sides ------------------------------------------------------------------------------


@dataclass
class Setup:
    """What the sides connect to."""

    upstream_url: str
    serve_url: str
    serve_pid: int
    upstream_pid: int
    env: dict[str, str]
    work: Path
    mcp_argv: list[str] = field(default_factory=lambda: [sys.executable, "-m", "bot"])
    profile: Profiler | None = None


@dataclass
class Profiler:
    """`signoff serve` under `bench/profile_serve.py`: each `cut` ends a profile file."""

    directory: Path
    pid: int
    cuts: int = 0
    timed: list[Path] = field(default_factory=list)

    async def cut(self, timed: bool) -> None:
        """End the profile so far (`timed`: it holds timed calls) and wait for its file."""
        os.kill(self.pid, signal.SIGUSR1)
        self.cuts += 1
        written = self.directory / f"{self.cuts}.prof"
        done = self.directory / f"{self.cuts}.tx.txt"  # written after the profile
        async with asyncio.timeout(60):
            while True:
                if done.exists():
                    break
                await asyncio.sleep(0.01)
        if timed:
            self.timed.append(written)


@contextlib.asynccontextmanager
async def connected(side: str, setup: Setup, session: str) -> AsyncIterator[tuple[Any, int]]:
    """An SDK client connected to `side`, and the pid of the process serving it."""
    import httpx2
    from mcp import Client, StdioServerParameters
    from mcp.client.stdio import stdio_client
    from mcp.client.streamable_http import streamable_http_client

    timeout = httpx2.Timeout(CALL_TIMEOUT)
    with (setup.work / f"{side.replace(' ', '-')}.log").open("a") as errlog:
        if side in ("direct http", "gateway http"):
            if side == "direct http":
                url, headers, pid = setup.upstream_url, {}, setup.upstream_pid
            else:
                url = f"{setup.serve_url}/mcp/{AGENT}"
                headers = {"Authorization": f"Bearer {TOKEN}", "Signoff-Session": session}
                pid = setup.serve_pid
            async with (
                httpx2.AsyncClient(headers=headers, timeout=timeout) as http,
                Client(streamable_http_client(url, http_client=http)) as client,
            ):
                yield client, pid
            return
        if side == "direct stdio":
            params = StdioServerParameters(
                command=sys.executable, args=[str(UPSTREAM), "stdio"], cwd=str(ROOT)
            )
            marker = f"{UPSTREAM} stdio"
        else:
            argv = [*setup.mcp_argv, "mcp", AGENT, "--session", session]
            params = StdioServerParameters(
                command=argv[0],
                args=[*argv[1:], "--as", ACTOR, "--no-operator"],
                env=setup.env,
                cwd=str(ROOT),
            )
            marker = f"mcp {AGENT} --session {session}"
        async with Client(stdio_client(params, errlog=errlog)) as client:
            [pid] = children(marker)
            yield client, pid


def text_of(result: Any) -> str:
    return "\n".join(getattr(block, "text", "") for block in result.content)


async def call(client: Any, text: str) -> None:
    """One call of ``echo``; its answer must be `text`."""
    result = await asyncio.wait_for(client.call_tool("echo", {"text": text}), CALL_TIMEOUT)
    if result.is_error or text_of(result) != text:
        raise RuntimeError(f"echo {text!r} answered {text_of(result)!r}")


@dataclass
class Figures:
    """One side's calls in one round."""

    latencies: list[float]
    seconds: float
    cpu: float

    @property
    def median_ms(self) -> float:
        return statistics.median(self.latencies) * 1000

    @property
    def p95_ms(self) -> float:
        return percentile(self.latencies, 0.95) * 1000

    @property
    def mean_ms(self) -> float:
        return statistics.fmean(self.latencies) * 1000

    @property
    def rate(self) -> float:
        return len(self.latencies) / self.seconds

    @property
    def cpu_ms(self) -> float:
        return self.cpu / len(self.latencies) * 1000


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


async def run_side(side: str, setup: Setup, label: str, calls: int, warmup: int) -> Figures:
    async with connected(side, setup, session=label) as (client, pid):
        for number in range(warmup):
            await call(client, f"{label} warm-up {number}")
        profiled = setup.profile if side == "gateway http" else None
        if profiled is not None:
            await profiled.cut(timed=False)
        latencies = []
        cpu = proc_cpu(pid)
        began = time.perf_counter()
        for number in range(calls):
            sent = time.perf_counter()
            await call(client, f"{label} call {number}")
            latencies.append(time.perf_counter() - sent)
        seconds = time.perf_counter() - began
        cpu = proc_cpu(pid) - cpu
        if profiled is not None:
            await profiled.cut(timed=True)
    return Figures(latencies, seconds, cpu)


LAYERS = [
    ("/runtime/store/", "signoff: store (runtime/store)"),
    ("/runtime/", "signoff: runtime core"),
    ("/adapters/", "signoff: adapters (MCP gateway and hub, HTTP edge)"),
    ("/bot/", "signoff: bot"),
    ("/bench/", "bench: the transaction counter"),
    ("/mcp/", "MCP SDK (server and client sessions)"),
    ("/mcp_types/", "MCP SDK (server and client sessions)"),
    ("/anyio/", "anyio (the SDK's streams and task groups)"),
    ("/httpx2/", "httpx2, httpcore2, h11 (the hub's HTTP client)"),
    ("/httpcore2/", "httpx2, httpcore2, h11 (the hub's HTTP client)"),
    ("/h11/", "httpx2, httpcore2, h11 (the hub's HTTP client)"),
    ("/aiohttp/", "aiohttp (serve's HTTP server)"),
    ("/sqlalchemy/", "SQLAlchemy (column types)"),
    ("/pydantic", "pydantic"),
    ("/json/", "json"),
    ("/asyncio/", "asyncio"),
    ("/site-packages/", "other packages"),
]


def layers(files: list[Path]) -> list[tuple[str, float]]:
    """Shares of the profiled CPU by layer (C functions: sqlite3's apart, the rest as
    "builtins")."""
    import pstats

    stats = pstats.Stats(*(str(f) for f in files))
    raw: dict[Any, Any] = stats.stats  # type: ignore[attr-defined]
    spent: Counter[str] = Counter()
    for (file, _line, function), (_cc, _nc, own, _cum, _callers) in raw.items():
        if file == "~":
            name = "sqlite3 (statements, commits)" if "sqlite3" in function else "builtins"
        else:
            name = next((n for part, n in LAYERS if part in file), "Python's library (other)")
        spent[name] += own
    total = sum(spent.values()) or 1.0
    return [(name, own / total) for name, own in spent.most_common()]


def row(name: str, figures: Figures, base: Figures | None) -> str:
    cells = [
        f"{figures.median_ms:8.2f}",
        f"{figures.p95_ms:8.2f}",
        f"{figures.mean_ms:8.2f}",
        f"{figures.rate:8.1f}",
        f"{figures.cpu_ms:8.2f}",
    ]
    if base is not None and figures is not base:
        cells += [
            f"{figures.median_ms / base.median_ms:7.2f}x",
            f"{figures.p95_ms / base.p95_ms:7.2f}x",
            f"{figures.median_ms - base.median_ms:+9.2f}",
        ]
    return f"{name:22}" + " ".join(cells)


HEADER = (
    f"{'side':22}{'p50 ms':>8} {'p95 ms':>8} {'mean ms':>8} {'calls/s':>8} {'cpu ms':>8}"
    f" {'p50 vs':>8} {'p95 vs':>8} {'p50 +ms':>9}"
)


# -- transactions per call ------------------------------------------------------------------


def counted(out: Path, argv: list[str]) -> None:
    """Run ``signoff ARGV`` counting the store's transactions (bench only).

    At each SIGUSR1 the counts so far are written to `out` as JSON with a sequence number
    (``{"seq": n, "counts": {...}}``), by a thread waiting for the signal, so that the
    event loop, whatever it is, needs no handler.
    """
    sys.path.insert(0, str(ROOT))
    sys.path.insert(0, str(BENCH))
    from profile_serve import count_transactions

    counts: Counter[str] = Counter()
    count_transactions(counts)
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})  # threads started later too

    def snapshots() -> None:
        seq = 0
        while True:
            signal.sigwait({signal.SIGUSR1})
            seq += 1
            while True:
                try:
                    now = dict(counts)
                    break
                except RuntimeError:  # changed size while copied: copy again
                    continue
            staged = out.with_suffix(".tmp")
            staged.write_text(json.dumps({"seq": seq, "counts": now}))
            staged.replace(out)

    threading.Thread(target=snapshots, daemon=True).start()
    from bot.__main__ import main

    sys.argv = ["signoff", *argv]
    main()


async def snapshot(pid: int, out: Path, seq: int) -> Counter[str]:
    """Ask the counting process `pid` for its counts and wait until they are written."""
    os.kill(pid, signal.SIGUSR1)
    async with asyncio.timeout(30):
        while True:
            found = read_snapshot(out)
            if found is not None and found["seq"] == seq:
                return Counter(found["counts"])
            await asyncio.sleep(0.01)


async def transactions(setup: Setup, calls: int) -> None:
    """`calls` calls through each gateway, whose process counts its transactions."""
    print(f"\nstore transactions per call ({calls} calls per gateway, one at a time)")
    counting = [sys.executable, str(SCRIPT), "counted"]
    out = setup.work / "serve-tx.json"
    served, line = await Process.start(
        [*counting, str(out), "serve"],
        setup.env,
        setup.work / "serve-counted.log",
        lambda line: line.startswith("signoff serving at "),
    )
    try:
        url = line.split("signoff serving at ", 1)[1]
        counted_setup = Setup(
            setup.upstream_url, url, served.process.pid, setup.upstream_pid, setup.env, setup.work
        )
        await count_side("gateway http", counted_setup, out, served.process.pid, calls)
    finally:
        await served.stop()
    out = setup.work / "mcp-tx.json"
    stdio_setup = Setup(
        setup.upstream_url,
        setup.serve_url,
        setup.serve_pid,
        setup.upstream_pid,
        setup.env,
        setup.work,
        mcp_argv=[*counting, str(out)],
    )
    await count_side("gateway stdio", stdio_setup, out, None, calls)


async def count_side(side: str, setup: Setup, out: Path, pid: int | None, calls: int) -> None:
    async with connected(side, setup, session=f"tx {side}") as (client, served_pid):
        pid = pid or served_pid
        for number in range(3):
            await call(client, f"tx warm-up {number}")
        before = await snapshot(pid, out, 1)
        for number in range(calls):
            await call(client, f"tx call {number}")
        after = await snapshot(pid, out, 2)
    spent = after - before
    writes = sum(n for key, n in spent.items() if key.endswith(" write"))
    reads = sum(n for key, n in spent.items() if key.endswith(" read"))
    print(f"  {side}: {writes / calls:.2f} write + {reads / calls:.2f} read per call")
    for key, n in sorted(spent.items(), key=lambda item: (-item[1], item[0])):
        print(f"    {n / calls:6.2f}  {key}")


# -- the run ---------------------------------------------------------------------------------


async def bench(args: argparse.Namespace, work: Path) -> None:
    database = args.database or f"sqlite+aiosqlite:///{work / 'gateway.db'}"
    upstream, line = await Process.start(
        [sys.executable, str(UPSTREAM), "http"],
        os.environ.copy(),
        work / "upstream.log",
        lambda line: line.startswith("READY "),
    )
    served: Process | None = None
    try:
        upstream_url = f"http://127.0.0.1:{line.split()[1]}/mcp"
        agents = work / "agents.toml"
        agents.write_text(AGENTS_FILE.format(url=upstream_url, agent=AGENT))
        env = environment(database, agents, args.synchronous)
        await signoff(env, "migrate")
        command = ["-m", "bot", "serve"]
        if args.profile is not None:
            args.profile.mkdir(parents=True, exist_ok=True)
            command = [str(BENCH / "profile_serve.py"), str(args.profile)]
        served, line = await Process.start(
            [sys.executable, *command],
            env,
            work / "serve.log",
            lambda line: line.startswith("signoff serving at "),
        )
        serve_url = line.split("signoff serving at ", 1)[1]
        setup = Setup(upstream_url, serve_url, served.process.pid, upstream.process.pid, env, work)
        if args.profile is not None:
            setup.profile = Profiler(args.profile, served.process.pid)
        shown = database.split("@")[-1] if "@" in database else database
        if database.startswith("sqlite"):
            shown += f", synchronous={args.synchronous}"
        print(
            f"{args.rounds} round(s) of {args.calls} calls per side (after {args.warmup} "
            f"untimed), one at a time; database {shown}; {platform.python_version()}, "
            f"nproc {os.cpu_count()}, load {os.getloadavg()[0]:.2f}"
        )
        print("cpu ms: the serving process's CPU per call (upstream's or signoff's);")
        print(f"p50/p95 vs and p50 +ms: against {BASE} in the same round\n")
        results: dict[str, list[Figures]] = {side: [] for side in SIDES}
        for number in range(args.rounds):
            turn = number % len(SIDES)
            order = [*SIDES[turn:], *SIDES[:turn]]
            figures: dict[str, Figures] = {}
            disk = f"disk {disk_rate(work):,.0f} commits/s; " if args.database is None else ""
            for side in order:
                label = f"r{number + 1} {side}"
                figures[side] = await run_side(side, setup, label, args.calls, args.warmup)
            print(
                f"round {number + 1} (order: {', '.join(order)}; {disk}"
                f"load {os.getloadavg()[0]:.2f})"
            )
            print(HEADER)
            for side in SIDES:
                results[side].append(figures[side])
                print(row(side, figures[side], figures[BASE]))
        print("\nmedians over the rounds of each round's figures and ratios")
        print(HEADER)
        for side in SIDES:
            runs = results[side]
            bases = results[BASE]
            cells = [
                statistics.median(f.median_ms for f in runs),
                statistics.median(f.p95_ms for f in runs),
                statistics.median(f.mean_ms for f in runs),
                statistics.median(f.rate for f in runs),
                statistics.median(f.cpu_ms for f in runs),
            ]
            line = f"{side:22}" + " ".join(
                f"{value:8.1f}" if i == 3 else f"{value:8.2f}" for i, value in enumerate(cells)
            )
            if side != BASE:
                pairs = list(zip(runs, bases, strict=True))
                line += (
                    f" {statistics.median(f.median_ms / b.median_ms for f, b in pairs):7.2f}x"
                    f" {statistics.median(f.p95_ms / b.p95_ms for f, b in pairs):7.2f}x"
                    f" {statistics.median(f.median_ms - b.median_ms for f, b in pairs):+9.2f}"
                )
            print(line)
        await served.stop()
        served = None
        if setup.profile is not None:
            files = setup.profile.timed
            names = ", ".join(f.name for f in files)
            print(f"\ngateway http's timed calls under cProfile ({names} in {args.profile}):")
            print("the serve process's CPU by layer")
            for name, share in layers(files):
                print(f"  {share * 100:5.1f}%  {name}")
        if args.transactions:
            await transactions(setup, args.transactions)
        print(f"\nload average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    finally:
        if served is not None:
            await served.stop()
        await upstream.stop()


def main() -> None:
    if sys.argv[1:2] == ["counted"]:
        counted(Path(sys.argv[2]), sys.argv[3:])
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=200, help="timed calls per side and round")
    parser.add_argument("--rounds", type=int, default=4, help="each side goes first once in 4")
    parser.add_argument("--warmup", type=int, default=5, help="untimed calls before them")
    parser.add_argument(
        "--database", help="a SQLAlchemy URL (default: a SQLite file in a temporary directory)"
    )
    parser.add_argument(
        "--synchronous",
        choices=("full", "normal"),
        default="full",
        help="SIGNOFF_SQLITE_SYNCHRONOUS of the SQLite store (default full, as serve's)",
    )
    parser.add_argument(
        "--profile",
        type=Path,
        help="run serve under bench/profile_serve.py, writing its profiles to this directory",
    )
    parser.add_argument(
        "--transactions", type=int, default=20, help="calls per gateway counting transactions"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="signoff-gateway-") as name:
        asyncio.run(bench(args, Path(name)))


if __name__ == "__main__":
    main()
