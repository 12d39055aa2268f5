"""The permission prompt tool's HTTP endpoint in process, over a runtime on the memory
store with the agents file of docs/claude-code.md: a waiting call reports progress to a
client that asked for it, a server that stops answers its waiting calls as they stand,
and how calls are matched (the idempotency key) with and without a session."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx2
import mcp_types
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from adapters.claude_code.hook import PreToolUse, idempotency_key
from adapters.claude_code.permission_prompt import (
    PATH,
    TOOL,
    add_permission_prompt_routes,
    prompt_key,
    read_call,
)
from adapters.web import ApiToken, TokenAuth
from bot.agents_file import load_agents_file
from runtime import Actor, Allow, MemoryStore, Runtime
from tests.claude_code.conftest import page_block

pytestmark = pytest.mark.timeout(60)

UMA = "tok-uma-0123456789"
OPS = Actor(id="OPS", operator=True)


class Served:
    def __init__(self, runtime: Runtime, server: TestServer) -> None:
        self.runtime, self.server = runtime, server
        self.url = str(server.make_url(PATH))

    @contextlib.asynccontextmanager
    async def client(self) -> AsyncIterator[Client]:
        async with (
            httpx2.AsyncClient(
                headers={"Authorization": f"Bearer {UMA}"},
                timeout=httpx2.Timeout(30.0, read=60.0),
                trust_env=False,
            ) as http,
            streamable_http_client(self.url, http_client=http) as (read, write),
            Client(_streams(read, write)) as client,
        ):
            yield client

    async def open_ticket(self) -> str:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 30
        while loop.time() < deadline:
            found = await self.runtime.open_tickets(viewer=OPS)
            if found:
                return found[0].ticket_id
            await asyncio.sleep(0.02)
        raise AssertionError("no open ticket within 30 s")


@contextlib.asynccontextmanager
async def _streams(read: Any, write: Any) -> AsyncIterator[Any]:
    yield read, write


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[Served]:
    agents = tmp_path / "claude-code.toml"
    agents.write_text(page_block("toml", "test_hook_command.py"), encoding="utf-8")
    runtime = Runtime(MemoryStore(), load_agents_file(agents).agents)
    auth = TokenAuth([ApiToken(UMA, "U-uma")])
    app = web.Application()
    add_permission_prompt_routes(
        app,
        runtime,
        authenticate=auth.bearer,
        may_act_for=lambda request, user: False,
        on_change=lambda: None,
        progress_seconds=0.05,
    )
    server = TestServer(app, host="127.0.0.1", port=0)
    await server.start_server()
    try:
        yield Served(runtime, server)
    finally:
        await server.close()


def _answer(result: mcp_types.CallToolResult) -> dict[str, Any]:
    (block,) = result.content
    assert isinstance(block, mcp_types.TextContent) and not result.is_error
    return dict(json.loads(block.text))


PUSH = {"tool_name": "Bash", "input": {"command": "git push"}, "tool_use_id": "toolu_01"}


async def test_a_waiting_call_reports_progress_until_decided(served: Served) -> None:
    progress: list[float] = []
    reported = asyncio.Event()

    async def on_progress(done: float, total: float | None, message: str | None) -> None:
        progress.append(done)
        assert total == 3600 and message == "waiting for sign-off"
        if len(progress) >= 3:
            reported.set()

    async with served.client() as client:
        asking = asyncio.ensure_future(client.call_tool(TOOL, PUSH, progress_callback=on_progress))
        ticket = await served.open_ticket()
        await asyncio.wait_for(reported.wait(), 30)
        await served.runtime.decide(ticket, Allow(), OPS)
        answer = _answer(await asyncio.wait_for(asking, 30))
    assert answer == {"behavior": "allow", "updatedInput": {"command": "git push"}}
    assert progress == sorted(progress) and progress[0] > 0


async def test_a_stopping_server_answers_waiting_calls_as_they_stand(served: Served) -> None:
    async with served.client() as client:
        asking = asyncio.ensure_future(client.call_tool(TOOL, PUSH))
        ticket = await served.open_ticket()
        await served.server.app.shutdown()  # what stopping signoff runs first
        answer = _answer(await asyncio.wait_for(asking, 30))
    assert answer["behavior"] == "deny"
    assert f"stays open for a person to decide (ticket {ticket}" in answer["message"]
    assert [t.ticket_id for t in await served.runtime.open_tickets(viewer=OPS)] == [ticket]


async def test_a_connected_clients_stream_does_not_hold_up_the_shutdown(served: Served) -> None:
    headers = {
        "Authorization": f"Bearer {UMA}",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": "2025-11-25",
    }
    initialize = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "claude-code", "version": "2.1.197"},
        },
    }
    async with httpx2.AsyncClient(timeout=30, trust_env=False) as http:
        started = await http.post(served.url, json=initialize, headers=headers)
        assert started.status_code == 200, started.text
        headers["Mcp-Session-Id"] = started.headers["mcp-session-id"]
        ready = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        assert (await http.post(served.url, json=ready, headers=headers)).status_code == 202
        async with http.stream("GET", served.url, headers=headers) as stream:
            assert stream.status_code == 200
            assert stream.headers["content-type"].startswith("text/event-stream")
            closing = asyncio.ensure_future(served.server.close())
            # The stream ends (the server stops) well before aiohttp's 60 s wait for open
            # requests.
            await asyncio.wait_for(_drain(stream), 20)
            await asyncio.wait_for(closing, 20)


async def _drain(stream: Any) -> None:
    async for _ in stream.aiter_bytes():
        pass


def test_calls_are_matched_by_session_and_tool_use_or_by_the_whole_call() -> None:
    arguments = {"tool_name": "Bash", "input": {"command": "ls"}, "tool_use_id": "toolu_01"}
    in_session = read_call(arguments, "session-1")
    other_input = read_call({**arguments, "input": {"command": "pwd"}}, "session-1")
    assert prompt_key(other_input) == prompt_key(in_session) is not None
    assert prompt_key(read_call(arguments, "session-2")) != prompt_key(in_session)
    hooks = PreToolUse("session-1", "Bash", {"command": "ls"}, "toolu_01")
    assert prompt_key(in_session) != idempotency_key(hooks)  # never a hook's withdrawn one

    alone = read_call(arguments, None)
    assert prompt_key(alone) not in (None, prompt_key(in_session))
    assert prompt_key(read_call(arguments, None)) == prompt_key(alone)
    assert prompt_key(read_call({**arguments, "input": {"command": "pwd"}}, None)) != (
        prompt_key(alone)
    )
    assert prompt_key(alone, "other-agent") != prompt_key(alone)
    without_id = {"tool_name": "Bash", "input": {"command": "ls"}}
    assert prompt_key(read_call(without_id, "session-1")) is None


def test_the_lazy_route_serves_the_same_path() -> None:
    from adapters.claude_code import prompt_route

    assert prompt_route.PATH == PATH
