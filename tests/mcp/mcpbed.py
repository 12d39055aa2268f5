"""The MCP test bed: real MCP servers (`fake_mcp_server`) and a real signoff around them.

`McpBed` holds `signoff serve`'s process (`bot.bootstrap.build_service`) on a SQLite
file, its worker running, the operator console on an aiohttp test server, and an `McpHub`
connected to the servers of the test. Servers run as subprocesses: over stdio (started by
the hub) or over Streamable HTTP (`HttpProcess`, started by the test).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web
from aiohttp.test_utils import TestClient

from adapters.mcp import Binding, HttpServer, StdioServer
from adapters.mcp.hub import McpHub
from runtime import Agent, RunResult, RunStatus, Runtime
from runtime.store.sql import SQLStore
from runtime.worker import Worker

FAKE = Path(__file__).with_name("fake_mcp_server.py")


def stdio_server(state: Path, name: str = "infra", **options: Any) -> StdioServer:
    """The fake server over stdio, restarted quickly after an exit."""
    options.setdefault("restart_delay", (0.2, 1.0))
    env = {"FAKE_MCP_STATE": str(state), **options.pop("env", {})}
    return StdioServer(name, sys.executable, (str(FAKE), "stdio"), env=env, **options)


def http_server(url: str, name: str = "infra", **options: Any) -> HttpServer:
    """The fake server over Streamable HTTP."""
    options.setdefault("restart_delay", (0.2, 1.0))
    return HttpServer(name, url, **options)


class HttpProcess:
    """The fake server over Streamable HTTP, as a subprocess on 127.0.0.1."""

    def __init__(self, state: Path, token: str | None = None, **env_: str) -> None:
        env = {**os.environ, "FAKE_MCP_STATE": str(state), **env_}
        if token is not None:
            env["FAKE_MCP_TOKEN"] = token
        self.process = subprocess.Popen(
            [sys.executable, str(FAKE), "http"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        self.url = ""

    @classmethod
    async def start(cls, state: Path, token: str | None = None, **env: str) -> HttpProcess:
        """Start it (`env`: more of the fake's variables) and wait for its ``READY <port>``
        line."""
        served = cls(state, token, **env)
        try:
            line = await asyncio.wait_for(asyncio.to_thread(served._ready), timeout=60)
        except BaseException:
            served.kill()
            raise
        served.url = f"http://127.0.0.1:{line.split()[1]}/mcp"
        return served

    def _ready(self) -> str:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            if line.startswith("READY "):
                return line
        raise AssertionError("the MCP server did not start")

    def kill(self) -> None:
        """SIGKILL it (idempotent)."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=10)
        if self.process.stdout is not None:
            self.process.stdout.close()


def calls(state: Path) -> list[dict[str, Any]]:
    """Every tool call the fake server received, in order."""
    path = state / "calls.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]


def pids(state: Path) -> list[int]:
    """The process id of every start of the fake server."""
    path = state / "pids"
    if not path.exists():
        return []
    return [int(line.split()[0]) for line in path.read_text().splitlines()]


async def until(check: Callable[[], Any], what: str, seconds: float = 30.0) -> Any:
    """Poll `check` (plain or async) until it returns something truthy."""
    deadline = time.monotonic() + seconds
    while True:
        value = check()
        if asyncio.iscoroutine(value):
            value = await value
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"never saw {what}")
        await asyncio.sleep(0.05)


def kill_hanging(state: Path) -> int:
    """SIGKILL the server process whose ``hang`` call is in flight; returns its pid."""
    pid = int((state / "hanging").read_text())
    os.kill(pid, signal.SIGKILL)
    return pid


@dataclass
class McpBed:
    """Everything a test needs to drive runs whose tools are MCP tools."""

    runtime: Runtime
    store: SQLStore
    worker: Worker
    hub: McpHub
    agents: list[Agent]
    client: TestClient[web.Request, web.Application] | None = None
    stops: list[Callable[[], Any]] = field(default_factory=list)

    async def start(self, agent: str, text: str = "go", requester: str = "U1") -> str:
        """Start a run for the worker; returns its id."""
        started = await self.runtime.start(
            agent, text, requester=requester, origin={"platform": "console"}, wait=False
        )
        self.worker.wake()
        return started.run_id

    async def wait(self, run_id: str, check: Callable[[RunResult], bool]) -> RunResult:
        """Poll the run until `check` holds."""
        found: RunResult | None = None

        async def probe() -> bool:
            nonlocal found
            found = await self.runtime.get(run_id)
            return check(found)

        await until(probe, f"run {run_id} reaching the expected state")
        assert found is not None
        return found

    async def parked(self, run_id: str) -> RunResult:
        """Wait until the run waits for decisions."""
        return await self.wait(run_id, lambda r: r.status is RunStatus.AWAITING)

    async def finished(self, run_id: str) -> RunResult:
        """Wait until the run ended."""
        return await self.wait(run_id, lambda r: r.status.finished)

    async def events(self, run_id: str, kind: str) -> list[dict[str, Any]]:
        """The run's flight-recorder events of one kind."""
        return [e for e in await self.runtime.events(run_id) if e["kind"] == kind]

    async def login(self, token: str = "tok-u1") -> str:
        """Sign in to the console; returns a CSRF token."""
        assert self.client is not None
        page = await self.client.get("/login")
        csrf = _csrf(await page.text())
        response = await self.client.post(
            "/login", data={"csrf": csrf, "token": token}, allow_redirects=False
        )
        assert response.status == 303, await response.text()
        page = await self.client.get("/runs")
        return _csrf(await page.text())


def _csrf(html: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', html)
    assert found, "no CSRF field on the page"
    return found.group(1)


async def open_bed(
    db: Path,
    agents: Sequence[Agent],
    servers: Sequence[StdioServer | HttpServer],
    bindings: Sequence[Binding],
    *,
    console: bool = True,
) -> McpBed:
    """Connect the servers, then build `signoff serve`'s process around them
    (`bot.bootstrap.build_service`) and start its worker; the console on a test server."""
    from aiohttp.test_utils import TestServer

    from adapters.web import ApiToken, TokenAuth
    from bot.bootstrap import Parts, build_service
    from bot.settings import Settings

    hub = McpHub(servers, bindings)
    await hub.start()
    store = SQLStore.sqlite(db)
    await store.migrate()
    settings = Settings(
        database_url=f"sqlite+aiosqlite:///{db}",
        operator_token="mcp-operator-0123456789",
        cookie_secret="k" * 32,
        poll_seconds=0.05,
    )
    service = await build_service(
        settings,
        agents=agents,
        store=store,
        auth=TokenAuth([ApiToken("tok-u1", "U1", name="Uma")]),
        parts=Parts(listen=False, outbox=False, deadlines=False, wake_ups=False),
    )
    bed = McpBed(service.runtime, store, service.worker, hub, list(agents))
    if console:
        bed.client = TestClient(TestServer(service.app, host="127.0.0.1", port=0))
        await bed.client.start_server()
    await service.start()

    async def close() -> None:
        if bed.client is not None:
            await bed.client.close()
        await service.stop(grace_seconds=5)
        await hub.stop()
        await store.close()

    bed.stops.append(close)
    return bed


async def close_bed(bed: McpBed) -> None:
    """Stop everything the bed started."""
    for stop in reversed(bed.stops):
        await stop()
