"""Tool annotations as opt-in defaults, per-server tool filters, and refreshing a listing,
against a real MCP server (``annotated_mcp_server.py``, the SDK's server side) over stdio."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from testkit import ROOT, echo_model

from adapters.mcp import Binding, StdioServer, ToolKnobs
from adapters.mcp.annotations import Origin
from adapters.mcp.hub import McpHub
from adapters.web import ApiToken, TokenAuth
from adapters.web.mcp_routes import add_mcp_refresh_route
from runtime import Agent, ConfigurationError, Permission, ReplayPolicy

pytestmark = pytest.mark.timeout(120)

SERVER = Path(__file__).with_name("annotated_mcp_server.py")


def server(state: Path, **options: Any) -> StdioServer:
    options.setdefault("restart_delay", (0.2, 1.0))
    options.setdefault("connect_timeout", 60.0)  # a loaded machine starts Python slowly
    env = {"ANNOTATED_STATE": str(state)}
    return StdioServer("ann", sys.executable, (str(SERVER),), env=env, **options)


@pytest.fixture
def state(tmp_path: Path) -> Path:
    path = tmp_path / "ann"
    path.mkdir()
    return path


async def hub_for(
    state: Path, *knobs: ToolKnobs, **options: Any
) -> AsyncIterator[tuple[McpHub, Agent]]:
    ops = Agent("ops", "Operate.", echo_model())
    hub = McpHub([server(state, **options)], [Binding(ops, ("ann",), knobs)])
    await hub.start()
    try:
        yield hub, ops
    finally:
        await hub.stop()


def summary(hub: McpHub, ops: Agent) -> dict[str, tuple[str, str, tuple[Origin, Origin] | None]]:
    out = {}
    for name, tool in ops.tools.items():
        permission = tool.permission
        assert isinstance(permission, Permission)
        out[name] = (permission.value, tool.replay_policy, hub.origin_of("ops", name))
    return out


# -- annotations --------------------------------------------------------------------------


async def test_trusted_annotations_allow_read_only_tools_and_replay_idempotent_ones(
    state: Path,
) -> None:
    async for hub, ops in hub_for(state, trust_annotations=True):
        assert summary(hub, ops) == {
            "get_status": ("allow", "manual", ("annotation", "default")),
            "put_config": ("ask", "idempotent", ("default", "annotation")),
            # readOnlyHint with destructiveHint: an annotation never loosens a destroyer
            "wipe": ("ask", "manual", ("default", "default")),
            "plain": ("ask", "manual", ("default", "default")),
            "snapshot": ("ask", "manual", ("default", "default")),
        }


async def test_annotations_change_nothing_unless_the_server_is_trusted(state: Path) -> None:
    async for hub, ops in hub_for(state):
        assert {name: row[:2] for name, row in summary(hub, ops).items()} == dict.fromkeys(
            ["get_status", "put_config", "wipe", "plain", "snapshot"], ("ask", "manual")
        )
        assert hub.origin_of("ops", "get_status") == ("default", "default")


async def test_a_rule_beats_an_annotation(state: Path) -> None:
    knobs = (
        ToolKnobs("ann.get_status", where="rule", permission=Permission.DENY),
        ToolKnobs("ann.put_config", where="rule", replay_policy=ReplayPolicy.MANUAL),
        ToolKnobs("ann.wipe", where="rule", permission=Permission.ALLOW),
    )
    async for hub, ops in hub_for(state, *knobs, trust_annotations=True):
        rows = summary(hub, ops)
        assert rows["get_status"] == ("deny", "manual", ("rule", "default"))
        assert rows["put_config"] == ("ask", "manual", ("default", "rule"))
        assert rows["wipe"] == ("allow", "manual", ("rule", "default"))


# -- filters ------------------------------------------------------------------------------


async def test_tools_and_exclude_tools_choose_what_is_offered(state: Path) -> None:
    options = {"tools": ("get_*", "put_*", "snapshot"), "exclude_tools": ("put_*",)}
    async for _hub, ops in hub_for(state, **options):
        assert sorted(ops.tools) == ["get_status", "snapshot"]


async def test_a_rule_naming_a_filtered_out_tool_is_refused(state: Path) -> None:
    knobs = ToolKnobs("ann.wipe", where="rules.ann.wipe", permission=Permission.ALLOW)
    with pytest.raises(ConfigurationError) as refused:
        async for _ in hub_for(state, knobs, tools=("get_*",)):
            pass
    message = str(refused.value)
    assert "rules.ann.wipe: MCP server 'ann' has no tool 'wipe'" in message
    assert "after its tools and exclude_tools filters" in message


# -- refresh ------------------------------------------------------------------------------


async def test_a_refresh_lists_the_tools_again_at_once(state: Path) -> None:
    async for hub, ops in hub_for(state):
        assert "search" not in ops.tools
        (state / "extra").write_text("1")
        assert await hub.refresh("ann") == 6
        assert "search" in ops.tools


async def test_the_refresh_route_is_for_operators_only(state: Path) -> None:
    auth = TokenAuth(
        [ApiToken("tok-op", "ops:root", operator=True), ApiToken("tok-stranger", "U9")]
    )
    async for hub, ops in hub_for(state):
        app = web.Application()
        add_mcp_refresh_route(app, auth, hub.refresh, ["ann"])
        client = TestClient(TestServer(app, host="127.0.0.1", port=0))
        await client.start_server()
        try:
            (state / "extra").write_text("1")
            url = "/api/mcp/servers/ann/refresh"
            nobody = await client.post(url)
            assert nobody.status == 401
            stranger = await client.post(url, headers={"Authorization": "Bearer tok-stranger"})
            assert stranger.status == 403
            assert (await stranger.json())["error"] == "forbidden"
            assert "search" not in ops.tools  # nothing was listed
            operator = {"Authorization": "Bearer tok-op"}
            unknown = await client.post("/api/mcp/servers/nope/refresh", headers=operator)
            assert unknown.status == 404
            assert "no MCP server named 'nope'" in (await unknown.json())["message"]
            done = await client.post(url, headers=operator)
            assert done.status == 200
            assert await done.json() == {"server": "ann", "tools": 6}
            assert "search" in ops.tools
        finally:
            await client.close()


async def test_refreshing_a_server_that_cannot_start_is_a_503(state: Path) -> None:
    auth = TokenAuth([ApiToken("tok-op", "ops:root", operator=True)])
    broken = StdioServer(
        "ann",
        sys.executable,
        ("-c", "import sys; sys.exit(3)"),
        connect_timeout=1.0,
        restart_delay=(30.0, 30.0),
    )
    ops = Agent("ops", "Operate.", echo_model())
    hub = McpHub([broken], [Binding(ops, ("ann",))])
    await hub.start()
    app = web.Application()
    add_mcp_refresh_route(app, auth, _as_route(hub), ["ann"])
    client = TestClient(TestServer(app, host="127.0.0.1", port=0))
    await client.start_server()
    try:
        answer = await client.post(
            "/api/mcp/servers/ann/refresh", headers={"Authorization": "Bearer tok-op"}
        )
        assert answer.status == 503
        body = await answer.json()
        assert body["error"] == "mcp_server_unavailable"
        assert "did not list its tools within 1s" in body["message"]
    finally:
        await client.close()
        await hub.stop()


def _as_route(hub: McpHub) -> Any:
    from adapters.mcp.connection import McpServerUnavailable

    async def refresh(name: str) -> int:
        try:
            return await hub.refresh(name)
        except McpServerUnavailable as exc:
            raise ConnectionError(str(exc)) from None

    return refresh


# -- the agents file and `signoff agents` ---------------------------------------------------


def test_signoff_agents_shows_where_permission_and_replay_came_from(
    tmp_path: Path, state: Path
) -> None:
    path = tmp_path / "agents.toml"
    path.write_text(
        f"""
[servers.ann]
command = "${{SIGNOFF_PYTHON}}"
args = ["{SERVER}"]
env = {{ ANNOTATED_STATE = "{state}" }}
trust_annotations = true
exclude_tools = ["snapshot", "pl*"]
connect_timeout = 60

[agents.ops]
instructions = "Operate."
model = "examples.mcp:infra_model"
servers = ["ann"]

[agents.ops.rules."ann.put_config"]
replay_policy = "safe"
"""
    )
    clean = {k: v for k, v in os.environ.items() if not k.startswith("SIGNOFF_")}
    clean["SIGNOFF_DATABASE_URL"] = f"sqlite+aiosqlite:///{tmp_path / 'signoff.db'}"
    done = subprocess.run(
        [sys.executable, "-m", "bot", "agents"],
        cwd=ROOT,
        env={**clean, "SIGNOFF_AGENTS": str(path)},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert done.returncode == 0, done.stderr
    rows = {line.split()[0]: line for line in done.stdout.splitlines() if "mcp:ann" in line}
    assert sorted(rows) == ["get_status", "put_config", "wipe"], done.stdout
    assert "allow" in rows["get_status"]
    assert "permission by annotation, replay by default" in rows["get_status"]
    assert "permission by default, replay by rule" in rows["put_config"]
    assert " safe " in rows["put_config"]
    assert "permission by default, replay by default" in rows["wipe"]


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        (
            'tools = ["bad glob"]',
            "servers.ann.tools[0] (line 4): 'bad glob' is not a tool name or glob",
        ),
        ('exclude_tools = "x"', "servers.ann.exclude_tools"),
        ('trust_annotations = "maybe"', "servers.ann.trust_annotations"),
    ],
)
def test_bad_filter_and_trust_settings_are_one_clear_line(
    tmp_path: Path, line: str, expected: str
) -> None:
    from bot.agents_file import load_agents_file

    path = tmp_path / "agents.toml"
    path.write_text(
        f"""
[servers.ann]
command = "python"
{line}

[agents.ops]
instructions = "Operate."
model = "examples.mcp:infra_model"
servers = ["ann"]
"""
    )
    with pytest.raises(ConfigurationError) as refused:
        load_agents_file(path)
    assert expected in str(refused.value)


def test_the_documented_server_options_load(tmp_path: Path) -> None:
    from adapters.mcp import HttpServer
    from bot.agents_file import load_agents_file

    page = (ROOT / "docs" / "agents-file.md").read_text()
    section = page.split("## Filters, annotations and images", 1)[1]
    block = section.split("```toml\n", 1)[1].split("```", 1)[0]
    path = tmp_path / "agents.toml"
    path.write_text(
        block
        + """
[agents.ops]
instructions = "Operate."
model = "examples.mcp:infra_model"
servers = ["github"]
"""
    )
    [server] = load_agents_file(path).servers
    assert isinstance(server, HttpServer)
    assert server.tools == ("get_*", "list_*", "search_*", "merge_pull_request")
    assert server.exclude_tools == ("get_secret*",)
    assert server.trust_annotations is True
    assert server.max_image_bytes == 524288


async def test_signoff_serve_mounts_the_refresh_route_for_its_agents_file(
    tmp_path: Path, state: Path
) -> None:
    from bot.bootstrap import Parts, build_service
    from bot.settings import ApiTokenSetting, Settings

    path = tmp_path / "agents.toml"
    path.write_text(
        f"""
[servers.ann]
command = "{sys.executable}"
args = ["{SERVER}"]
env = {{ ANNOTATED_STATE = "{state}" }}
connect_timeout = 60

[agents.ops]
instructions = "Operate."
model = "examples.mcp:infra_model"
servers = ["ann"]
"""
    )
    settings = Settings(
        database_url=f"sqlite+aiosqlite:///{tmp_path / 'signoff.db'}",
        operator_token="serve-operator-0123456789",
        cookie_secret="k" * 32,
        agents=path,
        api_tokens=[ApiTokenSetting(token="stranger-token-0123456789", actor="U9")],
    )
    service = await build_service(
        settings, parts=Parts(listen=False, outbox=False, deadlines=False, wake_ups=False)
    )
    await service.runtime.store.migrate()
    client = TestClient(TestServer(service.app, host="127.0.0.1", port=0))
    await client.start_server()
    try:
        (state / "extra").write_text("1")
        url = "/api/mcp/servers/ann/refresh"
        stranger = await client.post(
            url, headers={"Authorization": "Bearer stranger-token-0123456789"}
        )
        assert stranger.status == 403
        done = await client.post(url, headers={"Authorization": "Bearer serve-operator-0123456789"})
        assert done.status == 200, await done.text()
        assert await done.json() == {"server": "ann", "tools": 6}
        assert "search" in service.runtime.agents["ops"].tools
    finally:
        await client.close()
        await service.stop(grace_seconds=5)
