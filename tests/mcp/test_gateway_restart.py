"""A real `signoff serve` SIGKILLed in the middle of a gateway call, and an MCP server that
dies under one: a waiting call is allowed after the restart and runs once; a call whose
dispatch was recorded but whose result never came back is uncertain until a person
resolves it, never run again on its own, and a client calling again gets that state (then
the person's resolution)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import textwrap
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx2
import mcp_types
import pytest
from aiohttp import ClientSession
from gatewaybed import serve_gateway, text
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcpbed import FAKE, calls, kill_hanging, pids, until
from testkit import ROOT, Served

from runtime import Actor

pytestmark = [pytest.mark.timeout(240), pytest.mark.crash]

CALLER = "tok-ci-0123456789abcdef"
APPROVER = "tok-approver-0123456789abc"
OPERATOR = "tok-operator-0123456789abc"
SESSION = "release-77"
PRODUCTION = {"service": "api", "environment": "production"}


@pytest.fixture
def stray_servers(state: Path) -> Iterator[None]:
    """SIGKILL whatever MCP server a killed `signoff serve` left behind."""
    yield
    for pid in pids(state):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def environment(directory: Path, state: Path) -> dict[str, str]:
    """`signoff serve` with ``ops`` on the fake MCP server, its gateway at ``/mcp/ops``, on
    a fixed port (a restarted process is found at the same address)."""
    agents = directory / "agents.toml"
    agents.write_text(
        textwrap.dedent(
            f"""
            [servers.infra]
            command = "${{SIGNOFF_PYTHON}}"
            args = [{json.dumps(str(FAKE))}, "stdio"]
            env = {{ FAKE_MCP_STATE = {json.dumps(str(state))} }}

            [agents.ops]
            instructions = "Operate."
            model = "examples.mcp:infra_model"
            servers = ["infra"]

            [agents.ops.rules."infra.deploy"]
            permission = "ask"
            approvers = ["U-approver"]

            [agents.ops.rules."infra.hang"]
            permission = "allow"

            [agents.ops.rules."infra.lookup"]
            permission = "allow"
            """
        ),
        encoding="utf-8",
    )
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = int(probe.getsockname()[1])
    env = {k: v for k, v in os.environ.items() if not k.startswith("SIGNOFF_")}
    env.update(
        PYTHONPATH=str(ROOT),
        SIGNOFF_DATABASE_URL=f"sqlite+aiosqlite:///{directory / 'signoff.db'}",
        SIGNOFF_AGENTS=str(agents),
        SIGNOFF_BIND_HOST="127.0.0.1",
        SIGNOFF_PORT=str(port),
        SIGNOFF_LEASE_SECONDS="1",
        SIGNOFF_POLL_SECONDS="0.05",
        SIGNOFF_OPERATOR_TOKEN=OPERATOR,
        SIGNOFF_LOG_LEVEL="ERROR",
        SIGNOFF_API_TOKENS=json.dumps(
            [{"token": CALLER, "actor": "svc-ci"}, {"token": APPROVER, "actor": "U-approver"}]
        ),
    )
    return env


@contextlib.asynccontextmanager
async def mcp_client(url: str) -> AsyncIterator[Client]:
    headers = {"Authorization": f"Bearer {CALLER}", "Signoff-Session": SESSION}
    async with (
        httpx2.AsyncClient(
            headers=headers, timeout=httpx2.Timeout(30.0, read=120.0), trust_env=False
        ) as http,
        Client(streamable_http_client(url + "/mcp/ops", http_client=http)) as client,
    ):
        yield client


@contextlib.asynccontextmanager
async def dying_client(url: str) -> AsyncIterator[Client]:
    """`mcp_client` to a server the block kills: the client's lost connection is expected."""
    try:
        async with mcp_client(url) as client:
            yield client
    except* (httpx2.TransportError, OSError):
        pass


async def api(url: str, method: str, path: str, token: str, body: Any = None) -> tuple[int, Any]:
    async with (
        ClientSession() as session,
        session.request(
            method, url + path, json=body, headers={"Authorization": f"Bearer {token}"}
        ) as answer,
    ):
        return answer.status, await answer.json()


async def pending(url: str, token: str) -> list[dict[str, Any]]:
    """The caller's pending approvals, once there is one."""

    async def found() -> Any:
        _, body = await api(url, "GET", "/api/approvals?status=pending", token)
        return body["approvals"] or None

    approvals: list[dict[str, Any]] = await until(found, "a pending gateway approval")
    return approvals


async def cut_off(call: asyncio.Future[mcp_types.CallToolResult]) -> None:
    """Wait for a call whose server was killed under it to end, however it ends."""
    with contextlib.suppress(Exception):
        await asyncio.wait_for(call, 60)


async def test_a_waiting_call_survives_a_killed_serve_and_runs_once_allowed(
    tmp_path: Path, state: Path, stray_servers: None
) -> None:
    env = environment(tmp_path, state)
    first = await Served.start(env)
    try:
        async with dying_client(first.url) as client:
            asking = asyncio.ensure_future(client.call_tool("deploy", PRODUCTION))
            [approval] = await pending(first.url, CALLER)
            first.kill()
            await cut_off(asking)
    finally:
        if first.process.poll() is None:
            first.kill()
    assert calls(state) == []

    again = await Served.start(env)
    try:
        async with mcp_client(again.url) as client:
            asking = asyncio.ensure_future(client.call_tool("deploy", PRODUCTION))
            # The same call in the same session waits on the approval it opened before.
            [still] = await pending(again.url, CALLER)
            assert still["approval_id"] == approval["approval_id"]
            status, decided = await api(
                again.url,
                "POST",
                f"/api/tickets/{approval['ticket_id']}/decision",
                APPROVER,
                {"decision": "allow"},
            )
            assert status == 200, decided
            result = await asyncio.wait_for(asking, 90)
            assert not result.is_error, text(result)
            assert text(result) == "deployed api to production"
            replayed = await client.call_tool("deploy", PRODUCTION)
            assert text(replayed) == "deployed api to production"
    finally:
        await again.stop()
    assert [c["args"] for c in calls(state)] == [PRODUCTION]  # exactly once


async def test_a_call_cut_off_by_a_killed_serve_is_uncertain_and_never_run_again(
    tmp_path: Path, state: Path, stray_servers: None
) -> None:
    env = environment(tmp_path, state)
    first = await Served.start(env)
    try:
        async with dying_client(first.url) as client:
            hanging = asyncio.ensure_future(client.call_tool("hang", {}))
            await until(lambda: (state / "hanging").exists(), "the call reaching the server")
            first.kill()  # after the dispatch was recorded, before any result
            await cut_off(hanging)
    finally:
        if first.process.poll() is None:
            first.kill()

    again = await Served.start(env)
    try:
        async with mcp_client(again.url) as client:
            # The client calls again: the call is uncertain, for a person to resolve.
            result = await asyncio.wait_for(client.call_tool("hang", {}), 90)
            assert result.is_error
            assert "uncertain" in text(result) and "a person resolves it" in text(result)

            status, tickets = await api(again.url, "GET", "/api/tickets", OPERATOR)
            assert status == 200
            [ticket] = tickets["tickets"]
            assert ticket["kind"] == "uncertain"
            assert [c["tool"] for c in calls(state)] == ["hang"]  # not run again

            status, resolved = await api(
                again.url,
                "POST",
                f"/api/tickets/{ticket['ticket_id']}/decision",
                OPERATOR,
                {"resolution": "result", "result": "it finished before the crash"},
            )
            assert status == 200, resolved

            # Once resolved, the same call gets what the person recorded.
            async def settled() -> Any:
                found = await client.call_tool("hang", {})
                return found if "uncertain" not in text(found) else None

            resolved_result = await until(settled, "the resolution reaching the client")
            assert not resolved_result.is_error, text(resolved_result)
            assert text(resolved_result) == "it finished before the crash"
    finally:
        await again.stop()
    assert [c["tool"] for c in calls(state)] == ["hang"]


async def test_a_server_dying_mid_call_leaves_it_uncertain_for_a_person(
    tmp_path: Path, state: Path
) -> None:
    async with serve_gateway(tmp_path, state, approver="U-approver") as served:
        async with served.client(session="s-dies") as client:
            hanging = asyncio.ensure_future(client.call_tool("hang", {}))
            await until(lambda: (state / "hanging").exists(), "the call reaching the server")
            kill_hanging(state)
            result = await asyncio.wait_for(hanging, 60)
            assert result.is_error
            assert "uncertain" in text(result) and "a person resolves it" in text(result)

            [ticket] = await served.service.runtime.open_tickets(
                viewer=Actor(id="ops", operator=True)
            )
            assert ticket.ticket.target.kind == "uncertain"
            again = await asyncio.wait_for(client.call_tool("hang", {}), 60)
            assert again.is_error and "uncertain" in text(again)
            assert [c["tool"] for c in calls(state)] == ["hang"]  # never re-run on its own

            # A person aborts it: the same call then gets that, as a tool error.
            await served.service.runtime.resolve_tool(
                ticket,
                abort=True,
                reason="rolled back by hand",
                actor=Actor(id="ops", operator=True),
            )
            served.service.worker.wake_runs()

            async def aborted() -> Any:
                found = await client.call_tool("hang", {})
                return found if "uncertain" not in text(found) else None

            ended = await until(aborted, "the abort reaching the client")
            assert ended.is_error
            assert "rolled back by hand" in text(ended)
        assert [c["tool"] for c in calls(state)] == ["hang"]


async def test_a_stopping_serve_ends_a_waiting_call_which_the_next_process_picks_up(
    tmp_path: Path, state: Path, stray_servers: None
) -> None:
    env = environment(tmp_path, state)
    first = await Served.start(env)
    try:
        async with mcp_client(first.url) as client:
            asking = asyncio.ensure_future(client.call_tool("deploy", PRODUCTION))
            [approval] = await pending(first.url, CALLER)
            stopping = asyncio.ensure_future(first.stop())  # SIGTERM
            result = await asyncio.wait_for(asking, 30)
            await asyncio.wait_for(stopping, 30)
    finally:
        if first.process.poll() is None:
            first.kill()
    assert first.process.returncode == 0
    assert result.is_error
    assert "signoff is stopping" in text(result) and "call again" in text(result)

    again = await Served.start(env)
    try:
        async with mcp_client(again.url) as client:
            asking = asyncio.ensure_future(client.call_tool("deploy", PRODUCTION))
            status, decided = await api(
                again.url,
                "POST",
                f"/api/tickets/{approval['ticket_id']}/decision",
                APPROVER,
                {"decision": "allow"},
            )
            assert status == 200, decided
            assert text(await asyncio.wait_for(asking, 90)) == "deployed api to production"
    finally:
        await again.stop()
    assert [c["args"] for c in calls(state)] == [PRODUCTION]


async def test_a_retry_a_person_accepts_runs_the_uncertain_call_again_for_the_client(
    tmp_path: Path, state: Path
) -> None:
    async with (
        serve_gateway(tmp_path, state, approver="U-approver", more=True) as served,
        served.client(session="s-retry") as client,
    ):
        first = asyncio.ensure_future(client.call_tool("flaky", {}))
        await until(lambda: (state / "hanging").exists(), "the call reaching the server")
        kill_hanging(state)
        assert "uncertain" in text(await asyncio.wait_for(first, 60))
        [ticket] = await served.service.runtime.open_tickets(viewer=Actor(id="ops", operator=True))
        await served.service.runtime.resolve_tool(
            ticket, retry=True, actor=Actor(id="ops", operator=True)
        )
        served.service.worker.wake_runs()
        # The same call again waits for the retry and gets what it returned.
        again = await asyncio.wait_for(client.call_tool("flaky", {}), 60)
        assert not again.is_error, text(again)
        assert text(again) == "ran once more"
    keys = [c["meta"]["signoff/execution_key"] for c in calls(state) if c["tool"] == "flaky"]
    assert len(keys) == 2 and keys[0] == keys[1]  # the retry, with the same execution key
