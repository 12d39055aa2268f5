"""An MCP server with a huge tool list that exits after each listing: what `signoff serve`'s
`/healthz`, memory and CPU go through, before and after the listing caps.

Usage::

    python bench/mcp_listing.py                        # 20,000 tools, 2 rounds of 60 s
    python bench/mcp_listing.py --seconds 20 --rounds 1
    python bench/mcp_listing.py --before bac0869 --tools 5000

The bench writes a stdio MCP server (on the MCP SDK's low-level server) offering `--tools`
tools, each with a description and a small input schema; the server appends a line to a
file each time it starts and exits 0.3 s after it answered a tool listing. `--before` (a
commit) is checked out with ``git worktree add`` into a temporary directory (removed at
the end); "after" is this checkout (`--after`). Each round runs both codes, alternating
which goes first: `signoff serve` (``python -m bot serve``, 127.0.0.1, port 0) on a fresh
SQLite file with an agents file declaring that server (``SIGNOFF_AGENTS``), then
``/healthz`` asked every `--interval` seconds for `--seconds` seconds. Reported per run:
the time to ready, ``/healthz`` latency (p50, p99, max), the serve process's peak RSS
(``VmHWM``) and CPU seconds during the probing (``/proc/PID/stat``, the process itself,
not its children), and how many times the MCP server was started meanwhile.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import queue
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OPERATOR_TOKEN = "bench-operator-token-0123456789"
START_TIMEOUT = 120.0  # seconds for `signoff serve` to say where it serves
PROBE_TIMEOUT = 60.0  # seconds one /healthz may take before it counts as an error
TICKS = os.sysconf("SC_CLK_TCK")

SERVER = '''"""A stdio MCP server with BENCH_TOOLS tools that exits after each tool listing."""

import os
import threading
import time

import anyio
import mcp_types as types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

with open(os.environ["BENCH_STARTS"], "a") as handle:
    handle.write(f"{os.getpid()} {time.time()}\\n")

TOOLS = [
    types.Tool(
        name=f"tool_{number}",
        description=f"Tool {number}: looks a record up by its id and says what it found.",
        input_schema={
            "type": "object",
            "properties": {
                "id": {"type": "string", "description": "The record's id."},
                "limit": {"type": "integer", "minimum": 1, "maximum": 100},
            },
            "required": ["id"],
        },
    )
    for number in range(int(os.environ["BENCH_TOOLS"]))
]
LISTED = threading.Event()


class Out:
    """stdout for the transport: 0.3 s after a listing has been written, the process exits."""

    def __init__(self):
        self.file = open(1, "w", encoding="utf-8", closefd=False)

    def write(self, text):
        return self.file.write(text)

    def flush(self):
        self.file.flush()
        if LISTED.is_set():
            LISTED.clear()
            timer = threading.Timer(0.3, os._exit, (0,))
            timer.daemon = True
            timer.start()


async def list_tools(ctx, params):
    LISTED.set()
    return types.ListToolsResult(tools=TOOLS)


async def call_tool(ctx, params):
    return types.CallToolResult(content=[types.TextContent(type="text", text="found")])


server = Server("bench-big", on_list_tools=list_tools, on_call_tool=call_tool)


async def main():
    async with stdio_server(stdout=anyio.wrap_file(Out())) as (read, write):
        await server.run(read, write, server.create_initialization_options())


anyio.run(main)
'''

AGENTS = """[servers.big]
command = "${{SIGNOFF_PYTHON}}"
args = ["{script}"]
env = {{ BENCH_TOOLS = "{tools}", BENCH_STARTS = "{starts}" }}

[agents.big]
description = "Uses an MCP server with many tools"
instructions = "Look records up."
model = "examples.mcp:infra_model"
servers = ["big"]
"""


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def proc_cpu(pid: int) -> float:
    """The process's own user + system CPU seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime, stime (fields 14 and 15)


def proc_hwm_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM")


def starts(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


def serve(
    source: Path, work: Path, script: Path, tools: int
) -> tuple[subprocess.Popen[str], str, Path, float]:
    """Start `signoff serve` of `source`; return it, its URL, the starts file and the
    seconds it took to say where it serves."""
    starts_file = work / "starts"
    agents = work / "agents.toml"
    agents.write_text(AGENTS.format(script=script, tools=tools, starts=starts_file))
    env = {k: v for k, v in os.environ.items() if not k.startswith("SIGNOFF_")}
    for proxy in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY"):
        env.pop(proxy, None)
    env.update(
        {
            "PYTHONPATH": str(source),
            "SIGNOFF_DATABASE_URL": f"sqlite+aiosqlite:///{work / 'serve.db'}",
            "SIGNOFF_AGENTS": str(agents),
            "SIGNOFF_BIND_HOST": "127.0.0.1",
            "SIGNOFF_PORT": "0",
            "SIGNOFF_OPERATOR_TOKEN": OPERATOR_TOKEN,
        }
    )
    log = work / "serve.log"
    began = time.perf_counter()
    process = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import runtime, sys; print('code', runtime.__file__, flush=True); "
            "sys.argv = ['signoff', 'serve']; import runpy; "
            "runpy.run_module('bot', run_name='__main__')",
        ],
        cwd=source,
        env=env,
        stdout=subprocess.PIPE,
        stderr=log.open("w"),
        text=True,
    )
    lines: queue.Queue[str | None] = queue.Queue()

    def pump() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            lines.put(line)
        lines.put(None)

    threading.Thread(target=pump, daemon=True).start()
    deadline = began + START_TIMEOUT
    code = None
    while time.perf_counter() < deadline:
        try:
            line = lines.get(timeout=max(0.0, deadline - time.perf_counter()))
        except queue.Empty:
            break
        if line is None:
            break
        if line.startswith("code "):
            code = Path(line.split(" ", 1)[1].strip())
            if not code.is_relative_to(source):
                process.kill()
                raise RuntimeError(f"{source}: serve imported {code}")
        if line.startswith("signoff serving at "):
            assert code is not None
            url = line.split("signoff serving at ", 1)[1].strip()
            return process, url, starts_file, time.perf_counter() - began
    process.kill()
    process.wait(timeout=10)
    raise RuntimeError(f"signoff serve did not start: {log.read_text()[-3000:]}")


async def probe(url: str, seconds: float, interval: float) -> tuple[list[float], int]:
    """GET /healthz every `interval` seconds (one at a time) for `seconds`."""
    import aiohttp

    latencies: list[float] = []
    errors = 0
    timeout = aiohttp.ClientTimeout(total=PROBE_TIMEOUT)
    async with aiohttp.ClientSession(timeout=timeout) as http:
        loop = asyncio.get_running_loop()
        end = loop.time() + seconds
        tick = loop.time()
        while loop.time() < end:
            began = time.perf_counter()
            try:
                async with http.get(url + "/healthz") as answer:
                    await answer.read()
                    if answer.status != 200:
                        errors += 1
            except (aiohttp.ClientError, TimeoutError):
                errors += 1
            latencies.append(time.perf_counter() - began)
            tick += interval
            await asyncio.sleep(max(0.0, tick - loop.time()))
            tick = max(tick, loop.time() - interval)  # after a stall, no burst of probes
    return latencies, errors


def run_one(source: Path, tmp: Path, label: str, script: Path, args: argparse.Namespace) -> dict:
    work = Path(tempfile.mkdtemp(prefix=f"{label}-", dir=tmp))
    process, url, starts_file, ready = serve(source, work, script, args.tools)
    try:
        cpu0 = proc_cpu(process.pid)
        starts0 = starts(starts_file)
        latencies, errors = asyncio.run(probe(url, args.seconds, args.interval))
        cpu = proc_cpu(process.pid) - cpu0
        hwm = proc_hwm_mib(process.pid)
        started = starts(starts_file)
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)
    return {
        "code": label,
        "ready_s": ready,
        "p50_ms": statistics.median(latencies) * 1000,
        "p99_ms": percentile(latencies, 0.99) * 1000,
        "max_ms": max(latencies) * 1000,
        "probes": len(latencies),
        "errors": errors,
        "rss_mib": hwm,
        "cpu_s": cpu,
        "starts": started - starts0,
        "starts_total": started,
    }


COLUMNS = [
    ("ready_s", "ready s", "{:.2f}"),
    ("p50_ms", "p50 ms", "{:.1f}"),
    ("p99_ms", "p99 ms", "{:.1f}"),
    ("max_ms", "max ms", "{:.1f}"),
    ("probes", "probes", "{:.0f}"),
    ("errors", "errors", "{:.0f}"),
    ("rss_mib", "peak RSS MiB", "{:.0f}"),
    ("cpu_s", "cpu s", "{:.1f}"),
    ("starts", "MCP starts", "{:.0f}"),
    ("starts_total", "incl. start-up", "{:.0f}"),
]


def row(name: str, figures: dict) -> str:
    cells = [fmt.format(figures[key]).rjust(max(len(title), 8)) for key, title, fmt in COLUMNS]
    return f"{name:16} " + " ".join(cells)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tools", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=2, help="each round runs both codes")
    parser.add_argument("--seconds", type=float, default=60.0, help="probing per run")
    parser.add_argument("--interval", type=float, default=0.05, help="between /healthz probes")
    parser.add_argument("--before", default="bac0869", help="the commit to compare with")
    parser.add_argument("--after", type=Path, default=ROOT, help="the checkout to run as after")
    args = parser.parse_args()
    after = args.after.resolve()
    with tempfile.TemporaryDirectory(prefix="signoff-mcp-listing-") as name:
        tmp = Path(name)
        script = tmp / "big_server.py"
        script.write_text(SERVER)
        before = tmp / "before"
        subprocess.run(
            ["git", "-C", str(ROOT), "worktree", "add", "--detach", "-q", str(before), args.before],
            check=True,
        )
        try:
            print(
                f"{args.tools} tools, the server exits after each listing; {args.rounds} "
                f"round(s) of {args.seconds:g} s per code, /healthz every {args.interval:g} s; "
                f"before {args.before}, after {after}"
            )
            header = f"{'run':16} " + " ".join(t.rjust(max(len(t), 8)) for _, t, _ in COLUMNS)
            print(header)
            results: dict[str, list[dict]] = {"before": [], "after": []}
            for number in range(args.rounds):
                order = [("before", before), ("after", after)]
                if number % 2:
                    order.reverse()
                for label, source in order:
                    figures = run_one(source, tmp, label, script, args)
                    results[label].append(figures)
                    print(row(f"{label} r{number + 1}", figures), flush=True)
            medians = {
                label: {key: statistics.median(f[key] for f in runs) for key, _, _ in COLUMNS}
                for label, runs in results.items()
            }
            print(row("before median", medians["before"]))
            print(row("after median", medians["after"]))
            ratios = []
            for key, title, _ in COLUMNS:
                high, low = medians["before"][key], medians["after"][key]
                ratio = f"{high / low:.2f}x" if low else "-"
                ratios.append(ratio.rjust(max(len(title), 8)))
            print(f"{'before/after':16} " + " ".join(ratios))
        finally:
            subprocess.run(
                ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(before)],
                check=False,
            )


if __name__ == "__main__":
    main()
