"""MCP tools behind sign-off, against a real MCP server over Streamable HTTP on 127.0.0.1.

The server is ``fake_mcp_server.py http`` in a subprocess (uvicorn on a free port, ready
once it prints ``READY <port>``); the hub talks to it with the SDK's Streamable HTTP
client.
"""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from mcpbed import HttpProcess, McpBed, calls, http_server, until
from testkit import echo_model

from adapters.mcp import Binding, ToolKnobs
from runtime import Agent, Permission, RunStatus

pytestmark = pytest.mark.timeout(120)

TOKEN = "mcp-token-0123456789"


@pytest.fixture
async def served(state: Path) -> AsyncIterator[HttpProcess]:
    process = await HttpProcess.start(state, token=TOKEN)
    try:
        yield process
    finally:
        process.kill()


def bearer() -> dict[str, str]:
    return {"Authorization": f"Bearer {TOKEN}"}


async def test_an_allowed_call_carries_the_token_and_the_execution_key(
    make_bed: Any, state: Path, served: HttpProcess
) -> None:
    ops = Agent("ops", "Operate.", echo_model(("lookup", {"service": "api"})))
    knobs = (ToolKnobs("infra.lookup", permission=Permission.ALLOW),)
    bed: McpBed = await make_bed(
        [ops], [http_server(served.url, headers=bearer())], [Binding(ops, ("infra",), knobs)]
    )
    assert sorted(ops.tools) == ["deploy", "fail", "hang", "lookup", "merge"]

    done = await bed.finished(await bed.start("ops"))

    assert done.text == "Finished. api is healthy"
    [call] = calls(state)
    [dispatched] = await bed.events(done.run_id, "tool_dispatched")
    assert call["meta"]["signoff/execution_key"] == dispatched["data"]["execution_key"]
    assert call["authorization"] == f"Bearer {TOKEN}"


async def test_an_ask_call_is_approved_in_the_console(
    make_bed: Any, state: Path, served: HttpProcess
) -> None:
    ops = Agent(
        "ops", "Operate.", echo_model(("deploy", {"service": "a", "environment": "staging"}))
    )
    bed: McpBed = await make_bed(
        [ops], [http_server(served.url, headers=bearer())], [Binding(ops, ("infra",))]
    )
    parked = await bed.parked(await bed.start("ops"))
    [entry] = parked.pending

    csrf = await bed.login()
    assert bed.client is not None
    response = await bed.client.post(
        f"/tickets/{entry.ticket_id}/decide",
        data={"csrf": csrf, "action": "allow"},
        allow_redirects=False,
    )
    assert response.status == 303

    done = await bed.finished(parked.run_id)
    assert done.text == "Finished. deployed a to staging"
    assert [c["tool"] for c in calls(state)] == ["deploy"]


async def test_a_server_killed_mid_call_leaves_the_call_uncertain(
    make_bed: Any, state: Path, served: HttpProcess
) -> None:
    ops = Agent("ops", "Operate.", echo_model(("hang", {})))
    knobs = (ToolKnobs("infra.hang", permission=Permission.ALLOW),)
    bed: McpBed = await make_bed(
        [ops], [http_server(served.url, headers=bearer())], [Binding(ops, ("infra",), knobs)]
    )
    run_id = await bed.start("ops")
    await until(lambda: (state / "hanging").exists(), "the call reaching the server")
    served.kill()

    parked = await bed.wait(
        run_id,
        lambda r: (
            r.status is RunStatus.AWAITING and any(p.status == "uncertain" for p in r.pending)
        ),
    )
    [uncertain] = await bed.events(run_id, "tool_uncertain")
    assert "went away before answering hang" in uncertain["data"]["reason"]

    await bed.runtime.resolve_tool(parked.pending[0], abort=True, reason="gave up", actor="U1")
    bed.worker.wake()
    done = await bed.finished(run_id)
    assert done.text == "Finished. Aborted: gave up"


async def test_a_server_that_is_not_listening_or_refuses_the_token(
    make_bed: Any, state: Path, served: HttpProcess
) -> None:
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{probe.getsockname()[1]}/mcp"
    ops = Agent(
        "ops", "Operate.", echo_model(("deploy", {"service": "a", "environment": "staging"}))
    )
    wrong = Agent(
        "wrong", "Operate.", echo_model(("deploy", {"service": "a", "environment": "staging"}))
    )
    named = (ToolKnobs("infra.deploy"),)
    bed: McpBed = await make_bed(
        [ops, wrong],
        [
            http_server(closed, connect_timeout=5.0),
            http_server(served.url, name="guarded", headers={"Authorization": "Bearer nope"}),
        ],
        [
            Binding(ops, ("infra",), named),
            Binding(wrong, ("guarded",), (ToolKnobs("guarded.deploy"),)),
        ],
    )
    assert bed.hub.source_of("ops", "deploy") == "mcp:infra (unavailable)"
    assert bed.hub.source_of("wrong", "deploy") == "mcp:guarded (unavailable)"

    done = await bed.finished(await bed.start("ops"))
    assert done.status is RunStatus.DONE
    assert done.text == (
        "Finished. Error: MCP server 'infra' is not available (connection refused); try again later"
    )
    refused = await bed.finished(await bed.start("wrong"))
    assert refused.text.startswith("Finished. Error: MCP server 'guarded' is not available (MCP")
    assert calls(state) == []
