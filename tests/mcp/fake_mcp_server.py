"""An MCP server for the tests, on the MCP SDK's server side: ``python fake_mcp_server.py
stdio`` or ``... http`` (Streamable HTTP on 127.0.0.1, a free port; prints ``READY
<port>`` once it accepts connections).

Its state directory (``FAKE_MCP_STATE``) is how tests watch and steer it:

- ``pids``: one line per start, the process id (tests SIGKILL it);
- ``calls.jsonl``: one JSON line per tool call, with the arguments, the request's
  ``_meta`` and (over HTTP) the ``Authorization`` header;
- ``hanging``: written by ``hang`` when its call has arrived (then it never answers);
- ``schema``: if it says ``v2`` at start-up, ``deploy`` takes a required ``reason`` too;
- ``down``: while it exists, the server exits at once when started.

With ``FAKE_MCP_TOKEN`` set, HTTP requests without ``Authorization: Bearer <token>`` get 401.
``FAKE_MCP_PORT`` makes the HTTP server listen on that port (a restart keeps its URL),
``FAKE_MCP_STATELESS=1`` serves it without sessions. ``FAKE_MCP_MORE=1`` adds ``flaky``
(hangs on a call's first attempt, answers its replay) and ``upgrade`` (gives ``deploy``
the v2 schema and sends ``notifications/tools/list_changed``). ``FAKE_MCP_INPUT=1`` adds
``restart``, which asks for a change ticket with ``elicitation/create`` and logs the
answer's action (and data), two resources (``infra://runbook``, ``infra://services``) and
a prompt (``incident``). ``FAKE_MCP_TOOLS=<n>`` adds tools ``extra_0`` ...
``extra_<n-1>``; ``FAKE_MCP_EXIT_AFTER_LIST=1`` makes the process exit
shortly after it answered a tool listing.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import sys
import time
from pathlib import Path
from typing import Annotated, Any, Literal

from mcp.server.mcpserver import Context, Elicit, ElicitationResult, MCPServer, Resolve
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import BaseModel, Field

STATE = Path(os.environ["FAKE_MCP_STATE"])
SCHEMA = (STATE / "schema").read_text().strip() if (STATE / "schema").exists() else "v1"


class _Server(MCPServer[Any]):
    async def list_tools(self) -> Any:
        listed = await super().list_tools()
        if os.environ.get("FAKE_MCP_EXIT_AFTER_LIST") == "1":
            asyncio.get_running_loop().call_later(0.3, os._exit, 0)
        return listed


server: MCPServer[Any] = _Server("fake-infra", log_level="ERROR")


def _log(tool: str, args: dict[str, Any], ctx: Context) -> None:
    meta = dict(ctx.request_context.meta or {})
    headers = ctx.headers or {}
    entry = {
        "tool": tool,
        "args": args,
        "meta": meta,
        "authorization": headers.get("authorization"),
        "pid": os.getpid(),
    }
    with (STATE / "calls.jsonl").open("a") as handle:
        handle.write(json.dumps(entry) + "\n")


@server.tool()
def lookup(service: str, ctx: Context) -> str:
    """Look a service up (read-only)."""
    _log("lookup", {"service": service}, ctx)
    return f"{service} is healthy"


if SCHEMA == "v2":

    @server.tool()
    def deploy(
        service: str, environment: Literal["staging", "production"], reason: str, ctx: Context
    ) -> str:
        """Deploy a service (v2: with a reason)."""
        _log("deploy", {"service": service, "environment": environment, "reason": reason}, ctx)
        return f"deployed {service} to {environment}"

else:

    @server.tool()
    def deploy(service: str, environment: Literal["staging", "production"], ctx: Context) -> str:
        """Deploy a service."""
        _log("deploy", {"service": service, "environment": environment}, ctx)
        return f"deployed {service} to {environment}"


@server.tool()
def merge(branch: str, token: str, ctx: Context) -> str:
    """Merge a branch (the token is a secret)."""
    _log("merge", {"branch": branch}, ctx)
    return f"merged {branch}"


@server.tool()
def fail(ctx: Context) -> str:
    """Always fails."""
    _log("fail", {}, ctx)
    raise ToolError("the disk is full")


@server.tool()
async def hang(ctx: Context) -> str:
    """Never answers (the test kills the server or times the call out)."""
    _log("hang", {}, ctx)
    marker = STATE / f"hanging.{os.getpid()}"
    marker.write_text(str(os.getpid()))
    marker.replace(STATE / "hanging")  # atomically: a reader never sees it half written
    await asyncio.sleep(3600)
    return "woke up"


async def flaky(ctx: Context) -> str:
    """Hangs the first time a call (by its execution key) arrives; answers after that."""
    _log("flaky", {}, ctx)
    key = str((ctx.request_context.meta or {}).get("signoff/execution_key"))
    seen = STATE / "flaky_keys"
    known = seen.read_text().splitlines() if seen.exists() else []
    if key in known:
        return "ran once more"
    with seen.open("a") as handle:
        handle.write(key + "\n")
    return await hang(ctx)


async def upgrade(ctx: Context) -> str:
    """Give ``deploy`` the v2 schema (a required reason) and tell the client."""
    _log("upgrade", {}, ctx)
    server.remove_tool("deploy")

    def deploy(
        service: str, environment: Literal["staging", "production"], reason: str, ctx: Context
    ) -> str:
        """Deploy a service (v2: with a reason)."""
        _log("deploy", {"service": service, "environment": environment, "reason": reason}, ctx)
        return f"deployed {service} to {environment}"

    server.add_tool(deploy)
    await ctx.notify_tools_changed()  # to subscriptions/listen (protocol 2026-07-28)
    return "upgraded"


if os.environ.get("FAKE_MCP_MORE") == "1":
    server.add_tool(flaky)
    server.add_tool(upgrade)


class ChangeTicket(BaseModel):
    """What ``restart`` asks for before it restarts anything."""

    ticket: int = Field(description="The change ticket's number", ge=1)
    note: str = Field(default="", description="Anything the on-call engineer should know")


def ask_change(service: str) -> Elicit[ChangeTicket]:
    """Ask for the change ticket (``ctx.elicit`` before protocol 2026-07-28, an
    ``InputRequiredResult`` from it on)."""
    return Elicit(f"Restarting {service}: which change ticket?", ChangeTicket)


async def restart(
    service: str,
    answer: Annotated[ElicitationResult[ChangeTicket], Resolve(ask_change)],
    ctx: Context,
) -> str:
    """Restart a service, once a person gives a change ticket (asked with elicitation)."""
    entry: dict[str, Any] = {"service": service, "action": answer.action}
    if answer.action == "accept":
        entry["data"] = answer.data.model_dump()
    _log("restart", entry, ctx)
    if answer.action == "accept":
        return f"restarted {service} under change {answer.data.ticket}"
    return f"did not restart {service}: {answer.action}"


def runbook() -> str:
    """The on-call runbook."""
    return "Step 1: breathe. Step 2: roll back."


def services() -> str:
    """Every service and its owner."""
    return "api: team-a\nweb: team-b"


def incident(service: str) -> str:
    """Write an incident summary."""
    return f"Summarise the incident on {service}."


if os.environ.get("FAKE_MCP_INPUT") == "1":
    server.add_tool(restart)
    server.resource("infra://runbook", description="The on-call runbook")(runbook)
    server.resource("infra://services", description="Every service and its owner")(services)
    server.prompt(description="Write an incident summary")(incident)


def _extra(number: int) -> Any:
    def extra() -> str:
        return f"extra {number}"

    return extra


for _number in range(int(os.environ.get("FAKE_MCP_TOOLS", "0"))):
    server.add_tool(_extra(_number), name=f"extra_{_number}", description=f"Extra {_number}.")


class _Bearer:
    """ASGI middleware: 401 unless the request carries the expected bearer token."""

    def __init__(self, app: Any, token: str) -> None:
        self.app = app
        self.expected = f"Bearer {token}".encode()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and dict(scope["headers"]).get(b"authorization") != (
            self.expected
        ):
            await send({"type": "http.response.start", "status": 401, "headers": []})
            await send({"type": "http.response.body", "body": b"unauthorized"})
            return
        await self.app(scope, receive, send)


async def _serve_http() -> None:
    import uvicorn

    # IPPROTO_TCP given: asyncio turns Nagle off only on sockets it knows are TCP, and a
    # plain socket() would hold each response body back ~40 ms for the client's ACK.
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", int(os.environ.get("FAKE_MCP_PORT", "0"))))
    port = sock.getsockname()[1]
    app: Any = server.streamable_http_app(
        stateless_http=os.environ.get("FAKE_MCP_STATELESS") == "1"
    )
    token = os.environ.get("FAKE_MCP_TOKEN")
    if token:
        app = _Bearer(app, token)
    config = uvicorn.Config(app, log_level="error", lifespan="on")
    http = uvicorn.Server(config)
    task = asyncio.create_task(http.serve(sockets=[sock]))
    while not http.started:
        if task.done():
            await task
        await asyncio.sleep(0.01)
    print(f"READY {port}", flush=True)
    await task


def main() -> None:
    STATE.mkdir(parents=True, exist_ok=True)
    if (STATE / "down").exists():
        sys.exit(1)
    with (STATE / "pids").open("a") as handle:
        handle.write(f"{os.getpid()} {time.time()}\n")
    if sys.argv[1:] == ["http"]:
        asyncio.run(_serve_http())
    else:
        server.run()


if __name__ == "__main__":
    main()
