"""The MCP gateway over Streamable HTTP: the official `mcp` SDK client calls the tools of a
real MCP server through signoff, under the agents' per-tool rules; allowed calls reach the
server, asking calls wait for a decision, denials and expiries come back as tool errors."""

from __future__ import annotations

import asyncio
import contextlib
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
from mcpbed import McpBed, calls, stdio_server, until
from testkit import echo_model

from adapters.mcp import Binding, ToolKnobs
from adapters.mcp.gateway import McpGateway, add_gateway_routes, gateway_agent
from adapters.web import ApiToken, TokenAuth
from runtime import Actor, Agent, Permission, Unauthorized

pytestmark = pytest.mark.timeout(120)

UMA = "tok-uma-0123456789"
OPS = "tok-ops-0123456789"


class Gateway:
    def __init__(self, bed: McpBed, gateway: McpGateway, url: str) -> None:
        self.bed, self.gateway, self.url = bed, gateway, url

    @contextlib.asynccontextmanager
    async def client(self, token: str = UMA, session: str | None = None) -> AsyncIterator[Client]:
        headers = {"Authorization": f"Bearer {token}"}
        if session is not None:
            headers["Signoff-Session"] = session
        async with (
            httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30.0, read=60.0)) as http,
            streamable_http_client(self.url, http_client=http) as (read, write),
            Client(_streams(read, write)) as client,
        ):
            yield client

    async def pending_ticket(self) -> str:
        async def open_one() -> Any:
            found = await self.bed.runtime.open_tickets(viewer=Actor(id="OPS", operator=True))
            return found[0].ticket_id if found else None

        ticket: str = await until(open_one, "an open ticket for the gateway call")
        return ticket


@contextlib.asynccontextmanager
async def _streams(read: Any, write: Any) -> AsyncIterator[Any]:
    yield read, write


@pytest.fixture
async def gateway(make_bed: Any, state: Path) -> AsyncIterator[Gateway]:
    ops = Agent("ops", "Operate.", echo_model())
    knobs = (
        ToolKnobs("infra.lookup", where="rule infra.lookup", permission=Permission.ALLOW),
        ToolKnobs("infra.merge", where="rule infra.merge", permission=Permission.DENY),
        ToolKnobs("infra.fail", where="rule infra.fail", permission=Permission.ALLOW),
        ToolKnobs("infra.deploy", where="rule infra.deploy", four_eyes=True),
    )
    agent = gateway_agent(ops)
    bed: McpBed = await make_bed(
        [ops, agent], [stdio_server(state)], [Binding(ops, ("infra",), knobs)]
    )
    served = McpGateway(bed.runtime, agent, ops, bed.worker.wake, progress_seconds=0.2)
    auth = TokenAuth([ApiToken(UMA, "U1", name="Uma"), ApiToken(OPS, "U2", operator=True)])
    app = web.Application()
    add_gateway_routes(app, served, auth.bearer)
    server = TestServer(app, host="127.0.0.1", port=0)
    await server.start_server()
    try:
        yield Gateway(bed, served, str(server.make_url("/mcp")))
    finally:
        await server.close()


def _text(result: mcp_types.CallToolResult) -> str:
    return "\n".join(b.text for b in result.content if isinstance(b, mcp_types.TextContent))


async def test_tools_are_listed_except_those_a_rule_denies(gateway: Gateway) -> None:
    async with gateway.client() as client:
        listed = await client.list_tools()
    names = {t.name for t in listed.tools}
    assert {"lookup", "deploy"} <= names
    assert "merge" not in names


async def test_an_allowed_call_goes_straight_to_the_server(gateway: Gateway, state: Path) -> None:
    async with gateway.client() as client:
        result = await client.call_tool("lookup", {"service": "api"})
    assert not result.is_error, _text(result)
    assert _text(result) == "api is healthy"
    [call] = calls(state)
    assert call["args"] == {"service": "api"}
    assert call["meta"].get("signoff/execution_key")


async def test_an_asking_call_waits_and_runs_once_allowed(gateway: Gateway, state: Path) -> None:
    progress: list[float] = []

    async def on_progress(done: float, total: float | None, message: str | None) -> None:
        progress.append(done)

    async with gateway.client() as client:
        asking = asyncio.ensure_future(
            client.call_tool(
                "deploy",
                {"service": "api", "environment": "production"},
                progress_callback=on_progress,
            )
        )
        ticket = await gateway.pending_ticket()
        await until(lambda: bool(progress), "a progress notification while the call waits")
        assert calls(state) == []
        await gateway.bed.runtime.approve(ticket, actor=Actor(id="U2", operator=True))
        gateway.bed.worker.wake()
        result = await asyncio.wait_for(asking, 60)
    assert not result.is_error, _text(result)
    assert _text(result) == "deployed api to production"
    assert [c["tool"] for c in calls(state)] == ["deploy"]
    [approval] = (await gateway.bed.runtime.approval_page(viewer=Actor(id="U1"))).items
    run = await gateway.bed.runtime.get(approval.approval_id)
    assert run.text == "Ran: deployed api to production"


async def test_a_denied_call_is_a_tool_error_with_the_reason(gateway: Gateway, state: Path) -> None:
    async with gateway.client() as client:
        asking = asyncio.ensure_future(
            client.call_tool("deploy", {"service": "api", "environment": "production"})
        )
        ticket = await gateway.pending_ticket()
        await gateway.bed.runtime.decline(
            ticket, actor=Actor(id="U2", operator=True), reason="freeze until Monday"
        )
        result = await asyncio.wait_for(asking, 60)
    assert result.is_error
    assert "freeze until Monday" in _text(result)
    assert calls(state) == []


async def test_an_edited_call_reaches_the_server_with_the_edited_arguments(
    gateway: Gateway, state: Path
) -> None:
    async with gateway.client() as client:
        asking = asyncio.ensure_future(
            client.call_tool("deploy", {"service": "api", "environment": "production"})
        )
        ticket = await gateway.pending_ticket()
        await gateway.bed.runtime.approve(
            ticket,
            actor=Actor(id="U2", operator=True),
            args={"service": "api", "environment": "staging"},
        )
        gateway.bed.worker.wake()
        result = await asyncio.wait_for(asking, 60)
    assert _text(result) == "deployed api to staging"
    assert [c["args"] for c in calls(state)] == [{"service": "api", "environment": "staging"}]


async def test_a_client_without_a_valid_token_is_refused(gateway: Gateway, state: Path) -> None:
    async with httpx2.AsyncClient() as http:
        for headers in ({}, {"Authorization": "Bearer not-a-token"}):
            response = await http.post(
                gateway.url,
                json={"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}},
                headers={**headers, "Accept": "application/json, text/event-stream"},
            )
            assert response.status_code == 401
    assert calls(state) == []


async def test_the_same_call_after_a_reconnect_gets_the_first_outcome(
    gateway: Gateway, state: Path
) -> None:
    arguments = {"service": "api", "environment": "production"}
    async with gateway.client(session="job-7") as client:
        first = asyncio.ensure_future(client.call_tool("deploy", arguments))
        ticket = await gateway.pending_ticket()
        first.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await first
    async with gateway.client(session="job-7") as client:
        again = asyncio.ensure_future(client.call_tool("deploy", arguments))
        await gateway.bed.runtime.approve(ticket, actor=Actor(id="U2", operator=True))
        gateway.bed.worker.wake()
        result = await asyncio.wait_for(again, 60)
        assert _text(result) == "deployed api to production"
        replayed = await client.call_tool("deploy", arguments)
        assert _text(replayed) == "deployed api to production"
    assert [c["tool"] for c in calls(state)] == ["deploy"]
    tickets = await gateway.bed.runtime.open_tickets(viewer=Actor(id="OPS", operator=True))
    assert tickets == []


async def test_a_tool_that_fails_is_a_tool_error_with_its_message(gateway: Gateway) -> None:
    async with gateway.client() as client:
        result = await client.call_tool("fail", {})
    assert result.is_error
    assert "the disk is full" in _text(result)


async def test_the_caller_may_not_allow_a_four_eyes_call_of_its_own(
    gateway: Gateway, state: Path
) -> None:
    async with gateway.client() as client:
        asking = asyncio.ensure_future(
            client.call_tool("deploy", {"service": "db", "environment": "production"})
        )
        ticket = await gateway.pending_ticket()
        with pytest.raises(Unauthorized):
            await gateway.bed.runtime.approve(ticket, actor=Actor(id="U1", operator=True))
        assert calls(state) == []
        await gateway.bed.runtime.approve(ticket, actor=Actor(id="U2", operator=True))
        gateway.bed.worker.wake()
        result = await asyncio.wait_for(asking, 60)
    assert _text(result) == "deployed db to production"


async def test_malformed_mcp_input_gets_a_protocol_error_and_changes_nothing(
    gateway: Gateway, state: Path
) -> None:
    before = await gateway.bed.runtime.run_counts()
    headers = {
        "Authorization": f"Bearer {UMA}",
        "Accept": "application/json, text/event-stream",
        "Content-Type": "application/json",
    }
    bodies = [
        b"{not json",
        b"[]",
        b'{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": "deploy"}',
        b'{"jsonrpc": "2.0", "id": 1}',
        b'{"a":' * 200 + b"1" + b"}" * 200,
    ]
    async with httpx2.AsyncClient() as http:
        for body in bodies:
            response = await http.post(gateway.url, content=body, headers=headers)
            assert 400 <= response.status_code < 500, (body[:40], response.text)
    async with gateway.client() as client:
        unknown = await client.call_tool("no_such_tool", {"x": 1})
        denied = await client.call_tool("merge", {"branch": "main"})
        untyped = await client.call_tool("deploy", {"service": ["not", "a", "string"]})
    assert unknown.is_error and denied.is_error and untyped.is_error
    assert calls(state) == []
    tickets = await gateway.bed.runtime.open_tickets(viewer=Actor(id="OPS", operator=True))
    assert tickets == []
    assert "no tool 'no_such_tool'" in _text(unknown)
    assert "do not fit deploy's parameters" in _text(untyped)
    assert await gateway.bed.runtime.run_counts() == before


async def test_another_identity_in_the_same_session_does_not_get_the_first_outcome(
    gateway: Gateway, state: Path
) -> None:
    arguments = {"service": "api", "environment": "production"}
    async with gateway.client(session="job-8") as client:
        first = asyncio.ensure_future(client.call_tool("deploy", arguments))
        ticket = await gateway.pending_ticket()
        await gateway.bed.runtime.approve(ticket, actor=Actor(id="U2", operator=True))
        gateway.bed.worker.wake()
        assert _text(await asyncio.wait_for(first, 60)) == "deployed api to production"
    async with gateway.client(token=OPS, session="job-8") as other:
        theirs = asyncio.ensure_future(other.call_tool("deploy", arguments))
        second = await gateway.pending_ticket()  # a ticket of its own: nothing reused
        assert second != ticket
        theirs.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await theirs
    assert [c["tool"] for c in calls(state)] == ["deploy"]
