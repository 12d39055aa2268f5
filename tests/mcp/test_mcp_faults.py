"""MCP servers that go away, change their tools or list too many: real fake servers over
stdio and Streamable HTTP, a real worker over SQLite, decisions through the API."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import mcp_types
import pytest
from mcpbed import HttpProcess, McpBed, calls, http_server, kill_hanging, pids, stdio_server, until
from testkit import ROOT, echo_model

from adapters.mcp import Binding, ToolKnobs
from adapters.mcp.config import HttpServer, redact_url
from adapters.mcp.hub import McpHub
from bot.logs import QUIET_LIBRARIES
from runtime import (
    Agent,
    ModelRequest,
    Permission,
    ReplayPolicy,
    RunStatus,
    ScriptedModel,
    StaleTicket,
    final_reply,
)

pytestmark = pytest.mark.timeout(120)

MORE = {"FAKE_MCP_MORE": "1"}


def agent(name: str, *calls_: tuple[str, dict[str, Any]]) -> Agent:
    return Agent(name, "Operate.", echo_model(*calls_))


def allow(pattern: str, **options: Any) -> ToolKnobs:
    return ToolKnobs(pattern, where=f"rule {pattern}", permission=Permission.ALLOW, **options)


async def take_down(bed: McpBed, state: Path) -> None:
    """Keep the stdio server from starting again and kill the running one."""
    await until(lambda: bed.hub.connections["infra"].up, "the server up")
    (state / "down").write_text("")
    os.kill(pids(state)[-1], signal.SIGKILL)
    await until(lambda: not bed.hub.connections["infra"].up, "the server down")


async def decide(bed: McpBed, ticket_id: str, decision: str = "allow") -> tuple[int, Any]:
    assert bed.client is not None
    response = await bed.client.post(
        f"/api/tickets/{ticket_id}/decision",
        json={"decision": decision},
        headers={"Authorization": "Bearer tok-u1"},
    )
    return response.status, await response.json()


# -- a server that is briefly down --------------------------------------------------------


async def test_a_safe_call_cut_off_by_a_dying_server_runs_once_more_once_it_is_back(
    make_bed: Any, state: Path
) -> None:
    ops = agent("ops", ("flaky", {}))
    server = stdio_server(state, env=MORE, restart_delay=(0.5, 1.0))
    knobs = (allow("infra.flaky", replay_policy=ReplayPolicy.SAFE),)
    bed: McpBed = await make_bed([ops], [server], [Binding(ops, ("infra",), knobs)])
    run_id = await bed.start("ops")
    await until(lambda: (state / "hanging").exists(), "the call reaching the server")
    kill_hanging(state)

    done = await bed.finished(run_id)

    assert done.text == "Finished. ran once more"
    first, again = [c for c in calls(state) if c["tool"] == "flaky"]
    assert first["pid"] != again["pid"]  # the restarted server ran it
    [dispatched, replayed] = await bed.events(run_id, "tool_dispatched")
    key = dispatched["data"]["execution_key"]
    assert replayed["data"]["execution_key"] == key
    assert first["meta"]["signoff/execution_key"] == again["meta"]["signoff/execution_key"] == key
    [replay] = await bed.events(run_id, "tool_replayed")
    assert "went away before answering flaky" in replay["data"]["reason"]


async def test_an_approval_given_while_the_server_is_down_waits_for_it(
    make_bed: Any, state: Path
) -> None:
    ops = agent("ops", ("deploy", {"service": "api", "environment": "staging"}))
    bed: McpBed = await make_bed([ops], [stdio_server(state)], [Binding(ops, ("infra",))])
    parked = await bed.parked(await bed.start("ops"))
    [entry] = parked.pending
    await take_down(bed, state)

    status, _ = await decide(bed, entry.ticket_id)
    assert status == 200
    bed.worker.wake()
    await until(
        lambda: bed.events(parked.run_id, "tool_dispatched"), "the call waiting for the server"
    )
    (state / "down").unlink()

    done = await bed.finished(parked.run_id)
    assert done.text == "Finished. deployed api to staging"
    assert [c["tool"] for c in calls(state)] == ["deploy"]
    assert await bed.events(parked.run_id, "tool_failed") == []


async def test_an_approved_call_whose_server_stays_down_is_left_for_a_retry(
    make_bed: Any, state: Path
) -> None:
    ops = agent("ops", ("deploy", {"service": "api", "environment": "staging"}))
    bed: McpBed = await make_bed(
        [ops], [stdio_server(state, timeout=2.0)], [Binding(ops, ("infra",))]
    )
    parked = await bed.parked(await bed.start("ops"))
    [entry] = parked.pending
    await take_down(bed, state)

    status, _ = await decide(bed, entry.ticket_id)
    assert status == 200
    bed.worker.wake()
    uncertain = await bed.wait(
        parked.run_id,
        lambda r: (
            r.status is RunStatus.AWAITING and any(p.status == "uncertain" for p in r.pending)
        ),
    )
    [event] = await bed.events(parked.run_id, "tool_uncertain")
    assert event["data"]["reason"].startswith("MCP server 'infra' is not available (")
    assert event["data"]["reason"].endswith("; try again later; nothing was sent")
    assert calls(state) == []

    (state / "down").unlink()
    await until(lambda: bed.hub.connections["infra"].up, "the server back")
    await bed.runtime.resolve_tool(uncertain.pending[0], retry=True, actor="U1")
    bed.worker.wake()
    done = await bed.finished(parked.run_id)
    assert done.text == "Finished. deployed api to staging"
    assert [c["tool"] for c in calls(state)] == ["deploy"]


async def test_an_allowed_call_to_a_server_that_stays_down_reads_as_documented(
    make_bed: Any, state: Path
) -> None:
    ops = agent("ops", ("lookup", {"service": "api"}))
    bed: McpBed = await make_bed(
        [ops], [stdio_server(state, timeout=2.0)], [Binding(ops, ("infra",), (allow("infra.*"),))]
    )
    await take_down(bed, state)

    done = await bed.finished(await bed.start("ops"))

    assert done.text.startswith("Finished. Error: MCP server 'infra' is not available (")
    assert done.text.endswith("); try again later")
    [failed] = await bed.events(done.run_id, "tool_failed")
    assert failed["data"]["error"] == done.text.removeprefix("Finished. Error: ")


# -- denied tools -------------------------------------------------------------------------


async def test_denied_tools_are_not_offered_to_the_model_unless_configured(
    make_bed: Any, state: Path
) -> None:
    offered: list[list[str]] = []

    def reply(request: ModelRequest) -> dict[str, Any]:
        offered.append(sorted(spec["function"]["name"] for spec in request.tools))
        return final_reply("done")

    ops = Agent("ops", "Operate.", ScriptedModel(reply))
    knobs = (
        ToolKnobs("infra.*", permission=Permission.DENY),
        allow("infra.lookup"),
        ToolKnobs("infra.merge", hide=False),  # still denied by the glob, but offered
        ToolKnobs("infra.deploy", hide=True),  # asks, but is not offered
    )
    bed: McpBed = await make_bed([ops], [stdio_server(state)], [Binding(ops, ("infra",), knobs)])
    assert sorted(ops.tools) == ["deploy", "fail", "hang", "lookup", "merge"]

    await bed.finished(await bed.start("ops"))

    assert offered == [["lookup", "merge"]]


# -- re-listing ---------------------------------------------------------------------------


@pytest.fixture
async def restartable(state: Path) -> AsyncIterator[list[HttpProcess]]:
    started: list[HttpProcess] = []
    yield started
    for process in started:
        process.kill()


@pytest.mark.parametrize("stateless", [False, True], ids=["session", "sessionless"])
async def test_an_http_server_restarted_with_a_changed_schema_is_listed_again(
    make_bed: Any, state: Path, restartable: list[HttpProcess], stateless: bool
) -> None:
    env = {"FAKE_MCP_STATELESS": "1"} if stateless else {}
    restartable.append(await HttpProcess.start(state, **env))
    url = restartable[0].url
    port = url.split(":")[2].split("/")[0]
    ops = agent("ops", ("deploy", {"service": "api", "environment": "production"}))
    server = http_server(url, refresh_interval=0.3)
    bed: McpBed = await make_bed([ops], [server], [Binding(ops, ("infra",))])
    parked = await bed.parked(await bed.start("ops"))
    [entry] = parked.pending
    before = ops.catalog_fingerprint

    restartable[0].kill()
    (state / "schema").write_text("v2")
    restartable.append(await HttpProcess.start(state, FAKE_MCP_PORT=port, **env))
    await until(lambda: "reason" in ops.tools["deploy"].parameters["properties"], "relisting")
    assert ops.catalog_fingerprint != before

    status, body = await decide(bed, entry.ticket_id)
    assert status == 409, body
    assert body["error"] == "stale_ticket"
    with pytest.raises(StaleTicket):
        await bed.runtime.approve(entry, actor="U1")
    assert calls(state) == []


async def test_tools_list_changed_lists_the_tools_again(
    make_bed: Any, state: Path, restartable: list[HttpProcess]
) -> None:
    restartable.append(await HttpProcess.start(state, **MORE))
    ops = agent("ops", ("upgrade", {}))
    server = http_server(restartable[0].url, refresh_interval=3600)
    bed: McpBed = await make_bed(
        [ops], [server], [Binding(ops, ("infra",), (allow("infra.upgrade"),))]
    )
    assert "reason" not in ops.tools["deploy"].parameters["properties"]

    done = await bed.finished(await bed.start("ops"))

    assert done.text == "Finished. upgraded"
    await until(lambda: "reason" in ops.tools["deploy"].parameters["properties"], "relisting")
    assert len(pids(state)) == 1  # the same server, not a restart


# -- huge listings and servers that keep exiting ------------------------------------------


@pytest.mark.parametrize(
    ("cap", "message"),
    [
        ({"max_tools": 50}, "its tool listing has more than 50 tools (max_tools)"),
        (
            {"max_listing_bytes": 2000},
            "its tool listing takes more than 2000 bytes (max_listing_bytes)",
        ),
    ],
)
async def test_a_listing_over_a_cap_is_refused_and_logged(
    make_bed: Any, state: Path, caplog: pytest.LogCaptureFixture, cap: Any, message: str
) -> None:
    caplog.set_level(logging.INFO, logger="signoff.mcp")
    ops = agent("ops", ("lookup", {"service": "api"}))
    server = stdio_server(state, env={"FAKE_MCP_TOOLS": "60"}, **cap)
    bed: McpBed = await make_bed(
        [ops], [server], [Binding(ops, ("infra",), (allow("infra.lookup"),))]
    )

    assert bed.hub.source_of("ops", "lookup") == "mcp:infra (unavailable)"
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert any(message in line for line in errors), errors
    done = await bed.finished(await bed.start("ops"))
    assert done.text.startswith(f"Finished. Error: MCP server 'infra' is not available ({message}")
    assert calls(state) == []


async def test_a_server_that_exits_after_each_listing_is_retried_less_and_less_often(
    make_bed: Any, state: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="signoff.mcp")
    ops = agent("ops")
    server = stdio_server(state, env={"FAKE_MCP_EXIT_AFTER_LIST": "1"}, restart_delay=(0.1, 5.0))
    await make_bed([ops], [server], [Binding(ops, ("infra",))])

    def delays() -> list[str]:
        return [
            r.getMessage().rsplit(" ", 1)[1]
            for r in caplog.records
            if "retrying in" in r.getMessage()
        ]

    await until(lambda: len(delays()) >= 3, "three restarts")
    assert delays()[:3] == ["0.1s", "0.2s", "0.4s"]


# -- URLs in logs -------------------------------------------------------------------------


def test_an_http_server_is_shown_by_scheme_host_and_port_only() -> None:
    server = HttpServer("github", "https://u:pw@mcp.example.com:8443/k/s3cr3t?token=t0k#x")
    assert server.shown == "HTTP server 'github' (https://mcp.example.com:8443/…)"
    assert redact_url("http://[::1]:9/mcp") == "http://[::1]:9/…"
    assert redact_url("https://mcp.example.com") == "https://mcp.example.com"


async def test_the_key_in_a_url_never_reaches_the_logs_or_the_recorder(
    make_bed: Any, state: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Log levels as `signoff serve` sets them: INFO, chatty libraries at WARNING.
    caplog.set_level(logging.INFO)
    for name in QUIET_LIBRARIES:
        monkeypatch.setattr(logging.getLogger(name), "level", logging.WARNING)
    served = await HttpProcess.start(state)
    try:
        with socket.socket() as probe:  # a port nobody listens on
            probe.bind(("127.0.0.1", 0))
            closed = f"http://127.0.0.1:{probe.getsockname()[1]}/mcp/key-s3cr3t"
        ops = agent("ops", ("deploy", {"service": "a", "environment": "staging"}))
        live = agent("live", ("lookup", {"service": "api"}))
        bed: McpBed = await make_bed(
            [ops, live],
            [
                http_server(closed, connect_timeout=5.0),
                http_server(served.url + "?token=t0k", name="live"),
            ],
            [
                Binding(ops, ("infra",), (ToolKnobs("infra.deploy"),)),
                Binding(live, ("live",), (allow("live.lookup"),)),
            ],
        )
        done = await bed.finished(await bed.start("ops"))
        looked = await bed.finished(await bed.start("live"))
    finally:
        served.kill()

    assert done.status is RunStatus.DONE and looked.text == "Finished. api is healthy"
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert "(http://127.0.0.1:" in logged and "/…) is not available" in logged
    assert "s3cr3t" not in logged and "t0k" not in logged
    assert "s3cr3t" not in str(await bed.runtime.events(done.run_id))


def test_signoff_agents_never_prints_a_key_from_the_url(tmp_path: Path) -> None:
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    agents = tmp_path / "agents.toml"
    agents.write_text(
        textwrap.dedent(
            f"""
            [servers.remote]
            url = "http://127.0.0.1:{port}/mcp/${{REMOTE_MCP_KEY}}"
            connect_timeout = 5

            [agents.ops]
            instructions = "x"
            model = "examples.mcp:infra_model"
            servers = ["remote"]

            [agents.ops.rules."remote.deploy"]
            permission = "ask"
            """
        )
    )
    clean = {k: v for k, v in os.environ.items() if not k.startswith("SIGNOFF_")}
    done = subprocess.run(
        [sys.executable, "-m", "bot", "agents"],
        cwd=ROOT,
        env={
            **clean,
            "SIGNOFF_AGENTS": str(agents),
            "SIGNOFF_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path / 'signoff.db'}",
            "SIGNOFF_LOG_LEVEL": "debug",
            "REMOTE_MCP_KEY": "k3y-0123456789",
        },
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=90,
    )

    assert done.returncode == 0, done.stderr
    assert "mcp:remote (unavailable)" in done.stdout
    assert f"http://127.0.0.1:{port}/…" in done.stderr
    assert "k3y-0123456789" not in done.stdout + done.stderr


async def test_a_long_listing_is_built_a_slice_at_a_time(state: Path) -> None:
    ops = agent("ops")
    hub = McpHub([stdio_server(state)], [Binding(ops, ("infra",))])
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}}
    listing = [mcp_types.Tool(name=f"t{i}", input_schema=schema) for i in range(400)]
    ticks = 0
    stop = asyncio.Event()

    async def ticker() -> None:
        nonlocal ticks
        while not stop.is_set():
            ticks += 1
            await asyncio.sleep(0)

    task = asyncio.create_task(ticker())
    await asyncio.sleep(0)
    before = ticks
    await hub._listed(hub.connections["infra"], listing)  # never connected: no process
    during = ticks - before
    stop.set()
    await task

    assert len(ops.tools) == 400
    assert during >= 15  # other tasks ran between the slices
