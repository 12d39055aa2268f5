"""`signoff serve` with the bundled agents file serves the MCP gateway at ``/mcp/infra``:
the official `mcp` SDK client lists the infra server's tools (not the denied ones), a
staging deploy runs at once, and a production deploy waits until a person allows it
through the JSON API."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx2
import mcp_types
import pytest
from aiohttp import ClientSession
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcpbed import until
from test_serve_mcp import TOKEN, Api, environment
from testkit import Served

pytestmark = pytest.mark.timeout(180)


@contextlib.asynccontextmanager
async def mcp_client(url: str, token: str) -> AsyncIterator[Client]:
    headers = {"Authorization": f"Bearer {token}", "Signoff-Session": "serve-1"}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30.0, read=120.0)) as http,
        Client(streamable_http_client(url, http_client=http)) as client,
    ):
        yield client


def _text(result: mcp_types.CallToolResult) -> str:
    return "\n".join(b.text for b in result.content if isinstance(b, mcp_types.TextContent))


async def test_serve_mounts_the_gateway_of_the_agents_file(tmp_path: Path) -> None:
    served = await Served.start(
        environment(
            tmp_path, SIGNOFF_APP="examples:demo_agents", SIGNOFF_AGENTS="examples/mcp/agents.toml"
        )
    )
    try:
        url = served.url + "/mcp/infra"
        async with httpx2.AsyncClient() as http:
            refused = await http.post(
                url,
                json={"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}},
                headers={"Accept": "application/json, text/event-stream"},
            )
        assert refused.status_code == 401
        async with ClientSession() as session, mcp_client(url, TOKEN) as client:
            api = Api(session, served.url)
            listed = {t.name for t in (await client.list_tools()).tools}
            assert listed == {"service_status", "deploy"}

            staged = await client.call_tool(
                "deploy", {"service": "checkout", "version": "2.5.0", "environment": "staging"}
            )
            assert not staged.is_error, _text(staged)
            assert _text(staged) == "deployed checkout 2.5.0 to staging"

            asking = asyncio.ensure_future(
                client.call_tool(
                    "deploy",
                    {"service": "checkout", "version": "2.5.1", "environment": "production"},
                )
            )

            async def pending() -> Any:
                _, found = await api.call("GET", "/api/approvals?status=pending")
                return found["approvals"] or None

            [approval] = await until(pending, "the production deploy's approval")
            assert approval["agent"] == "infra.mcp"
            status, decided = await api.call(
                "POST", f"/api/tickets/{approval['ticket_id']}/decision", {"decision": "allow"}
            )
            assert status == 200, decided
            result = await asyncio.wait_for(asking, 90)
            assert _text(result) == "deployed checkout 2.5.1 to production"
    finally:
        await served.stop()
    assert served.process.returncode == 0
