"""A connected MCP client keeps a standalone stream (GET) open on the gateway for as long
as it runs; stopping ``signoff serve`` ends it, as if the client went away, instead of
waiting for it."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx2
import pytest
from gatewaybed import CALLER, serve_gateway

pytestmark = pytest.mark.timeout(120)

VERSION = "2025-11-25"


async def _drain(stream: Any) -> None:
    async for _ in stream.aiter_bytes():
        pass


async def test_a_connected_clients_stream_does_not_hold_up_the_shutdown(
    tmp_path: Path, state: Path
) -> None:
    headers = {
        "Authorization": f"Bearer {CALLER}",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": VERSION,
    }
    initialize = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": VERSION,
            "capabilities": {},
            "clientInfo": {"name": "a-client", "version": "1"},
        },
    }
    async with (
        serve_gateway(tmp_path, state, approver="U-approver") as served,
        httpx2.AsyncClient(timeout=30, trust_env=False) as http,
    ):
        started = await http.post(served.mcp_url, json=initialize, headers=headers)
        assert started.status_code == 200, started.text
        headers["Mcp-Session-Id"] = started.headers["mcp-session-id"]
        ready = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        answered = await http.post(served.mcp_url, json=ready, headers=headers)
        assert answered.status_code == 202
        async with http.stream("GET", served.mcp_url, headers=headers) as stream:
            assert stream.status_code == 200
            assert stream.headers["content-type"].startswith("text/event-stream")
            # A grace far longer than the wait allowed below: without the hang-up, the
            # open stream holds the stop for aiohttp's 60 s.
            stopping = asyncio.ensure_future(served.service.stop(grace_seconds=30))
            await asyncio.wait_for(_drain(stream), 20)
            await asyncio.wait_for(stopping, 20)
