"""An MCP server's resources and prompts, against the SDK's server over stdio: listed by
``signoff agents``, and read by the agent through ``read_resource`` (``resources = true``)
under the rules of any tool."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from mcpbed import FAKE, McpBed, stdio_server
from testkit import ROOT, echo_model

from adapters.mcp import Binding, ToolKnobs
from bot.agents_file import load_agents_file
from runtime import Agent, ConfigurationError, Permission, RunStatus

pytestmark = pytest.mark.timeout(120)

FILE = """
[servers.infra]
command = "${{SIGNOFF_PYTHON}}"
args = ["{fake}", "stdio"]
env = {{ FAKE_MCP_STATE = "{state}", FAKE_MCP_INPUT = "1" }}
resources = true
elicitation = true

[agents.ops]
instructions = "Operate."
model = "examples.mcp:infra_model"
servers = ["infra"]

[agents.ops.rules."infra.read_resource"]
permission = "allow"
replay_policy = "safe"
"""


def ops(*calls: tuple[str, dict[str, Any]]) -> Agent:
    return Agent("ops", "Operate.", echo_model(*calls))


async def bed_reading(make_bed: Any, state: Path, agent: Agent, *knobs: ToolKnobs) -> McpBed:
    server = stdio_server(state, env={"FAKE_MCP_INPUT": "1"}, resources=True)
    bed: McpBed = await make_bed([agent], [server], [Binding(agent, ("infra",), knobs)])
    return bed


async def test_an_allowed_read_returns_the_resource(make_bed: Any, state: Path) -> None:
    agent = ops(("read_resource", {"uri": "infra://runbook"}))
    rule = ToolKnobs("infra.read_resource", where="rule", permission=Permission.ALLOW)
    bed = await bed_reading(make_bed, state, agent, rule)

    tool = agent.tools["read_resource"]
    assert tool.parameters["properties"]["uri"]["enum"] == ["infra://runbook", "infra://services"]
    assert "infra://runbook (The on-call runbook)" in tool.description
    done = await bed.finished(await bed.start("ops"))
    assert "Step 1: breathe. Step 2: roll back." in (done.text or "")


async def test_a_read_asks_by_default_and_a_deny_reads_nothing(make_bed: Any, state: Path) -> None:
    agent = ops(("read_resource", {"uri": "infra://services"}))
    bed = await bed_reading(make_bed, state, agent)

    assert agent.tools["read_resource"].permission is Permission.ASK
    parked = await bed.parked(await bed.start("ops"))
    assert parked.pending[0].call.name == "read_resource"
    await bed.runtime.decline(parked.pending[0], actor="U1", reason="not for you", resume=True)
    done = await bed.finished(parked.run_id)
    assert "Permission denied" in (done.text or "")
    assert "team-a" not in (done.text or "")


async def test_a_uri_not_listed_is_refused(make_bed: Any, state: Path) -> None:
    agent = ops(("read_resource", {"uri": "file:///etc/passwd"}))
    rule = ToolKnobs("infra.read_resource", where="rule", permission=Permission.ALLOW)
    bed = await bed_reading(make_bed, state, agent, rule)

    done = await bed.finished(await bed.start("ops"))
    assert done.status is RunStatus.DONE
    assert "root:" not in (done.text or "")
    assert "is not one of" in (done.text or "") or "lists no resource" in (done.text or "")


async def test_without_resources_there_is_no_read_tool(make_bed: Any, state: Path) -> None:
    agent = ops()
    server = stdio_server(state, env={"FAKE_MCP_INPUT": "1"})
    await make_bed([agent], [server], [Binding(agent, ("infra",), ())])
    assert "read_resource" not in agent.tools
    assert "restart" in agent.tools


def test_the_agents_file_turns_resources_and_elicitation_on(tmp_path: Path, state: Path) -> None:
    path = tmp_path / "agents.toml"
    path.write_text(textwrap.dedent(FILE.format(fake=FAKE, state=state)))
    loaded = load_agents_file(path)
    (server,) = loaded.servers
    assert server.resources and server.elicitation

    path.write_text(
        textwrap.dedent(FILE.format(fake=FAKE, state=state)).replace(
            "resources = true", 'resources = "maybe"'
        )
    )
    with pytest.raises(ConfigurationError, match=r"servers\.infra\.resources"):
        load_agents_file(path)


def test_signoff_agents_lists_resources_and_prompts(tmp_path: Path, state: Path) -> None:
    path = tmp_path / "agents.toml"
    path.write_text(textwrap.dedent(FILE.format(fake=FAKE, state=state)))
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
    out = done.stdout
    assert "read_resource" in out and "mcp:infra" in out
    assert "MCP server infra: its resources and prompts" in out
    assert "infra://runbook" in out and "The on-call runbook" in out
    assert "incident" in out and "Write an incident summary" in out
    assert "ops.elicitation" not in out  # the input agent is not one of the file's agents


def test_the_documented_settings_load(tmp_path: Path) -> None:
    page = (ROOT / "docs" / "agents-file.md").read_text()
    section = page[page.index("## Elicitation, resources and prompts") :]
    start = section.index("```toml\n") + len("```toml\n")
    block = section[start : section.index("```\n", start)]
    path = tmp_path / "agents.toml"
    agent = '\n[agents.ops]\ninstructions = "x"\nmodel = "examples.mcp:infra_model"\n'
    path.write_text(block + agent + 'servers = ["helpdesk"]\n')
    (server,) = load_agents_file(path).servers
    assert server.elicitation and server.resources and server.timeout == 3600
