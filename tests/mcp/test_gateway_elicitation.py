"""An upstream server's elicitation during a call through the MCP gateway: forwarded to
the calling MCP client when it declared the elicitation capability (its answer is the
server's), else ``cancel``. The official SDK client over Streamable HTTP, against
`signoff serve`'s process with the fake server's ``restart`` over stdio."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
import httpx2
import mcp_types
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcpbed import calls, stdio_server, until
from pydantic import SecretStr
from testkit import echo_model

from adapters.mcp import Binding, ToolKnobs
from adapters.mcp.gateway import McpGateway, add_gateway_routes, gateway_agent
from adapters.mcp.hub import McpHub
from adapters.web import ApiToken, TokenAuth
from bot.bootstrap import Parts, build_service
from bot.settings import Settings
from runtime import Actor, Agent, ManualClock, Permission, Runtime
from runtime.store.sql import SQLStore

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(params=["2026-07-28", "legacy"], ids=["2026-07-28", "handshake"])
def mode(request: pytest.FixtureRequest) -> str:
    """The client's protocol: 2026-07-28 (questions by retry) or an older one
    (``elicitation/create`` requests to the client)."""
    return str(request.param)


CALLER = "tok-caller-0123456789"
OPERATOR = "tok-operator-0123456789"


@contextlib.asynccontextmanager
async def serving(
    tmp_path: Path, state: Path, rule: Permission
) -> AsyncIterator[tuple[str, Runtime]]:
    """The gateway to ``ops``'s tools at ``<url>/mcp/ops``; ``infra.restart`` by `rule`."""
    ops = Agent("ops", "Operate.", echo_model())
    agent = gateway_agent(ops)
    auth = TokenAuth([ApiToken(CALLER, "svc-ci"), ApiToken(OPERATOR, "ops:alice", operator=True)])
    rules = (ToolKnobs("infra.restart", where="rule", permission=rule, approvers=("ops:alice",)),)
    server = stdio_server(state, env={"FAKE_MCP_INPUT": "1"}, elicitation=True)
    database = tmp_path / "signoff.db"
    async with contextlib.AsyncExitStack() as stack:
        hub = McpHub([server], [Binding(ops, ("infra",), rules)])
        await hub.start()
        stack.push_async_callback(hub.stop)
        store = SQLStore.sqlite(database)
        await store.migrate()
        stack.push_async_callback(store.close)
        service = await build_service(
            Settings(
                database_url=f"sqlite+aiosqlite:///{database}",
                operator_token=SecretStr(OPERATOR),
                cookie_secret=SecretStr("gateway-cookie-secret-0123456789abcdef"),
                bind_host="127.0.0.1",
                port=0,
                poll_seconds=0.02,
            ),
            agents=[ops, agent],
            store=store,
            clock=ManualClock(datetime.now(UTC).replace(microsecond=0)),
            auth=auth,
            pacing={},
            parts=Parts(deadlines=False, wake_ups=False),
        )
        hub.attach(service.runtime)  # as `signoff serve` does
        gateway = McpGateway(
            service.runtime, agent, ops, service.worker.wake_runs, progress_seconds=0.2
        )
        add_gateway_routes(service.app, gateway, auth.bearer, path="/mcp/ops")
        url = await service.start()
        stack.push_async_callback(service.stop, 5)
        stack.callback(lambda: None)
        yield url, service.runtime
        # No input run: the elicitation never became a ticket.
        runs = await service.runtime.list_runs()
        assert not any(r.agent.endswith(".elicitation") for r in runs)
        tickets = await service.runtime.open_tickets(viewer=Actor(id="ops", operator=True))
        assert all(t.agent == "ops.mcp" for t in tickets)


@contextlib.asynccontextmanager
async def client(url: str, **options: Any) -> AsyncIterator[Client]:
    headers = {"Authorization": f"Bearer {CALLER}", "Signoff-Session": "s-1"}
    async with (
        httpx2.AsyncClient(
            headers=headers, timeout=httpx2.Timeout(30.0, read=90.0), trust_env=False
        ) as http,
        Client(streamable_http_client(url + "/mcp/ops", http_client=http), **options) as found,
    ):
        yield found


def text(result: mcp_types.CallToolResult) -> str:
    return "\n".join(b.text for b in result.content if isinstance(b, mcp_types.TextContent))


def restarts(state: Path) -> list[dict[str, Any]]:
    return [c["args"] for c in calls(state) if c["tool"] == "restart"]


async def test_the_calling_client_answers_the_servers_question(
    tmp_path: Path, state: Path, mode: str
) -> None:
    asked: list[tuple[str, dict[str, Any]]] = []

    async def answer(context: Any, params: mcp_types.ElicitRequestParams) -> mcp_types.ElicitResult:
        assert isinstance(params, mcp_types.ElicitRequestFormParams)
        schema: Any = params.requested_schema
        asked.append((params.message, dict(schema)))
        return mcp_types.ElicitResult(action="accept", content={"ticket": 42, "note": "ok"})

    async with (
        serving(tmp_path, state, Permission.ALLOW) as (url, _),
        client(url, mode=mode, elicitation_callback=answer) as mcp,
    ):
        result = await mcp.call_tool("restart", {"service": "api"})

    assert not result.is_error, text(result)
    assert text(result) == "restarted api under change 42"
    [(message, schema)] = asked
    assert message == "Restarting api: which change ticket?"
    assert set(schema["properties"]) == {"ticket", "note"}
    assert restarts(state)[-1]["action"] == "accept"


async def test_a_declined_question_reaches_the_server(
    tmp_path: Path, state: Path, mode: str
) -> None:
    async def decline(context: Any, params: mcp_types.ElicitRequestParams) -> Any:
        return mcp_types.ElicitResult(action="decline")

    async with (
        serving(tmp_path, state, Permission.ALLOW) as (url, _),
        client(url, mode=mode, elicitation_callback=decline) as mcp,
    ):
        result = await mcp.call_tool("restart", {"service": "web"})

    assert text(result) == "did not restart web: decline"


async def test_a_client_without_elicitation_gets_the_server_a_cancel(
    tmp_path: Path, state: Path, mode: str
) -> None:
    async with (
        serving(tmp_path, state, Permission.ALLOW) as (url, _),
        client(url, mode=mode) as mcp,
    ):
        result = await mcp.call_tool("restart", {"service": "api"})

    assert text(result) == "did not restart api: cancel"
    assert restarts(state)[-1]["action"] == "cancel"


async def test_a_call_signed_off_first_forwards_its_question_too(
    tmp_path: Path, state: Path, mode: str
) -> None:
    """The worker dispatches the call once a person allowed it: the question still goes
    to the client that waits for the call."""

    async def answer(context: Any, params: mcp_types.ElicitRequestParams) -> Any:
        return mcp_types.ElicitResult(action="accept", content={"ticket": 7})

    async with (
        serving(tmp_path, state, Permission.ASK) as (url, runtime),
        client(url, mode=mode, elicitation_callback=answer) as mcp,
        aiohttp.ClientSession() as http,
    ):
        calling = asyncio.ensure_future(mcp.call_tool("restart", {"service": "db"}))

        async def open_one() -> str | None:
            if calling.done():
                return "ended: " + text(calling.result())
            found = await runtime.open_tickets(viewer=Actor(id="ops", operator=True))
            return found[0].ticket_id if found else None

        ticket = await until(open_one, "the sign-off ticket of the gateway call")
        async with http.post(
            f"{url}/api/tickets/{ticket}/decision",
            json={"decision": "allow"},
            headers={"Authorization": f"Bearer {OPERATOR}"},
        ) as decided:
            assert decided.status == 200, await decided.text()
        result = await calling

    assert text(result) == "restarted db under change 7"
