"""An upstream server's question that the calling client never answers does not hold the
call until the server's own time-out: after the gateway's ``question_seconds`` the server
gets ``cancel`` and ends the call; the client's late answer gets that outcome. The official
SDK client over Streamable HTTP, on both protocols, against `signoff serve`'s process with
the fake server's ``restart`` over stdio (a call time-out far beyond the test's)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

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
from runtime import Agent, ConfigurationError, ManualClock, Permission
from runtime.store.sql import SQLStore

pytestmark = pytest.mark.timeout(120)

CALLER = "tok-caller-0123456789"
OPERATOR = "tok-operator-0123456789"
QUESTION = 0.5
"""The gateway's bound on a question in these tests."""
SERVER_TIMEOUT = 600.0
"""The upstream call's time-out: never reached here, so only the gateway's bound ends the
wait."""


@pytest.fixture(params=["2026-07-28", "legacy"], ids=["2026-07-28", "handshake"])
def mode(request: pytest.FixtureRequest) -> str:
    """The client's protocol: 2026-07-28 (questions by retry) or an older one
    (``elicitation/create`` requests to the client)."""
    return str(request.param)


@contextlib.asynccontextmanager
async def serving(tmp_path: Path, state: Path) -> AsyncIterator[str]:
    """The gateway to ``ops``'s tools at ``<url>/mcp/ops``, questions bounded by
    `QUESTION`; ``infra.restart`` allowed."""
    ops = Agent("ops", "Operate.", echo_model())
    agent = gateway_agent(ops)
    auth = TokenAuth([ApiToken(CALLER, "svc-ci"), ApiToken(OPERATOR, "ops:alice", operator=True)])
    rules = (ToolKnobs("infra.restart", where="rule", permission=Permission.ALLOW),)
    server = stdio_server(
        state, env={"FAKE_MCP_INPUT": "1"}, elicitation=True, timeout=SERVER_TIMEOUT
    )
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
            service.runtime,
            agent,
            ops,
            service.worker.wake_runs,
            progress_seconds=0.2,
            question_seconds=QUESTION,
        )
        add_gateway_routes(service.app, gateway, auth.bearer, path="/mcp/ops")
        url = await service.start()
        stack.push_async_callback(service.stop, 5)
        yield url


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


async def test_an_unanswered_question_gets_the_server_a_cancel(
    tmp_path: Path, state: Path, mode: str
) -> None:
    asked: list[str] = []
    late = asyncio.Event()

    async def answer_late(context: Any, params: mcp_types.ElicitRequestParams) -> Any:
        """Holds the question (so the client neither retries nor answers) until the test
        saw what the server got, then accepts."""
        assert isinstance(params, mcp_types.ElicitRequestFormParams)
        asked.append(params.message)
        await late.wait()
        return mcp_types.ElicitResult(action="accept", content={"ticket": 42})

    async with (
        serving(tmp_path, state) as url,
        client(url, mode=mode, elicitation_callback=answer_late) as mcp,
    ):
        calling = asyncio.ensure_future(mcp.call_tool("restart", {"service": "api"}))
        try:
            [entry] = await until(lambda: restarts(state), "the server's restart call")
            assert asked == ["Restarting api: which change ticket?"]
            assert entry["action"] == "cancel"  # not the late accept
            if mode == "2026-07-28":  # the call's outcome waits for the client's retry
                assert not calling.done()
        finally:
            late.set()
        result = await asyncio.wait_for(calling, 60)

    # The late answer finds the call's outcome; the server ran once, with cancel.
    assert text(result) == "did not restart api: cancel"
    assert [r["action"] for r in restarts(state)] == ["cancel"]


async def test_a_question_answered_in_time_still_reaches_the_server(
    tmp_path: Path, state: Path, mode: str
) -> None:
    async def answer(context: Any, params: mcp_types.ElicitRequestParams) -> Any:
        return mcp_types.ElicitResult(action="accept", content={"ticket": 7})

    async with (
        serving(tmp_path, state) as url,
        client(url, mode=mode, elicitation_callback=answer) as mcp,
    ):
        result = await mcp.call_tool("restart", {"service": "db"})

    assert text(result) == "restarted db under change 7"


@pytest.mark.parametrize("seconds", [0.0, -1.0, float("nan")])
def test_a_bound_of_no_time_is_refused(seconds: float) -> None:
    ops = Agent("ops", "Operate.", echo_model())
    with pytest.raises(ConfigurationError, match="question_seconds must be more than 0"):
        McpGateway(object(), gateway_agent(ops), ops, question_seconds=seconds)  # type: ignore[arg-type]
