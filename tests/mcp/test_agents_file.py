"""Agents defined in a TOML file (``SIGNOFF_AGENTS``): loading, combining, and every kind of
mistake as one clear line with exit code 3 through the real ``signoff`` command."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from mcpbed import FAKE
from testkit import ROOT

from adapters.mcp import HttpServer
from bot.agents_file import load_agents_file
from bot.settings import load_settings
from bot.wiring import load_agent_set
from runtime import ConfigurationError, Escalate, Permission

pytestmark = pytest.mark.timeout(120)

MODULE = '''
from runtime import ScriptedModel, final_reply, tool

def make_model():
    return ScriptedModel([final_reply("ok")], name="file-model")

def page(engineer: str, urgent: bool = False) -> str:
    """Page an engineer."""
    return f"paged {engineer}"

@tool(permission="allow", replay_policy="safe")
def lookup(name: str) -> str:
    """Look a person up."""
    return name
'''


@pytest.fixture
def module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: Any) -> str:
    name = f"fileagents_{request.node.name.split('[')[0]}_{os.getpid()}"
    (tmp_path / f"{name}.py").write_text(MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    return name


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "agents.toml"
    path.write_text(textwrap.dedent(text))
    return path


def test_a_file_defines_agents_with_python_tools_and_rules(tmp_path: Path, module: str) -> None:
    path = write(
        tmp_path,
        f"""
        [agents.oncall]
        description = "Pages people"
        instructions = "Page whoever is on call."
        model = "{module}:make_model"
        tools = ["{module}:page", "{module}:lookup"]
        approvers = ["U-lead"]
        deadline = 600
        on_expiry = {{ escalate = ["U-boss"], deadline = 300 }}
        max_turns = 5

        [agents.oncall.rules.page]
        ask_if = [{{ urgent = true }}]
        permission = "allow"
        four_eyes = true
        """,
    )
    loaded = load_agents_file(path)

    [agent] = loaded.agents
    assert loaded.servers == [] and loaded.bindings == []
    assert agent.name == "oncall" and agent.model.name == "file-model"
    assert agent.max_turns == 5 and agent.approvers == ("U-lead",)
    assert agent.deadline is not None and agent.deadline.total_seconds() == 600
    assert isinstance(agent.on_expiry, Escalate) and agent.on_expiry.approvers == ("U-boss",)
    page, lookup = agent.tools["page"], agent.tools["lookup"]
    assert page.permission_for({"engineer": "ada", "urgent": True}) is Permission.ASK
    assert page.permission_for({"engineer": "ada", "urgent": False}) is Permission.ALLOW
    assert page.four_eyes is True
    assert lookup.permission is Permission.ALLOW and lookup.replay_policy == "safe"


def test_a_plain_function_asks_by_default(tmp_path: Path, module: str) -> None:
    path = write(
        tmp_path,
        f"""
        [agents.oncall]
        instructions = "x"
        model = "{module}:make_model"
        tools = ["{module}:page"]
        """,
    )
    [agent] = load_agents_file(path).agents
    assert agent.tools["page"].permission is Permission.ASK


def test_the_file_and_signoff_app_combine(
    tmp_path: Path, module: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write(
        tmp_path,
        f"""
        [agents.pager]
        instructions = "x"
        model = "{module}:make_model"
        """,
    )
    for name in list(os.environ):
        if name.startswith("SIGNOFF_"):
            monkeypatch.delenv(name)
    only_file = load_agent_set(load_settings(overrides={"agents": path}))
    assert [a.name for a in only_file.agents] == ["pager"]  # no demo agents by default
    assert only_file.origin == str(path)

    both = load_agent_set(load_settings(overrides={"agents": path, "app": "examples:demo_agents"}))
    assert [a.name for a in both.agents] == ["refunds", "deploys", "oncall", "pager"]
    assert both.origin == f"examples:demo_agents and {path}"


BAD_FILES: list[tuple[str, str, str]] = [
    (
        "unknown key",
        """
        [agents.ops]
        instructions = "x"
        model = "examples.mcp:infra_model"
        colour = "red"
        """,
        "agents.ops.colour (line 5): unknown key",
    ),
    (
        "bad permission",
        """
        [agents.ops]
        instructions = "x"
        model = "examples.mcp:infra_model"
        servers = ["infra"]

        [agents.ops.rules."infra.deploy"]
        permission = "maybe"
        """,
        'agents.ops.rules."infra.deploy".permission (line 8): Input should be',
    ),
    (
        "invalid rule",
        """
        [agents.ops]
        instructions = "x"
        model = "examples.mcp:infra_model"
        servers = ["infra"]

        [agents.ops.rules."infra.deploy"]
        ask_if = [{ replicas = { between = 3 } }]
        """,
        "ask_if[0].replicas: unknown operator 'between' (use one of eq, ne, gt",
    ),
    (
        "invalid glob",
        """
        [agents.ops]
        instructions = "x"
        model = "examples.mcp:infra_model"
        servers = ["infra"]

        [agents.ops.rules."infra.[dep"]
        permission = "ask"
        """,
        "the glob 'infra.[dep' has an unclosed '['",
    ),
    (
        "a tool the server does not have",
        """
        [agents.ops]
        instructions = "x"
        model = "examples.mcp:infra_model"
        servers = ["infra"]

        [agents.ops.rules."infra.nosuch"]
        permission = "allow"
        """,
        "MCP server 'infra' has no tool 'nosuch' (its tools: deploy, fail, hang, lookup, merge)",
    ),
    (
        "a glob that matches no tool",
        """
        [agents.ops]
        instructions = "x"
        model = "examples.mcp:infra_model"
        servers = ["infra"]

        [agents.ops.rules."infra.drop_*"]
        permission = "deny"
        """,
        "'infra.drop_*' matches no tool of MCP server 'infra'",
    ),
    (
        "a condition on an argument the tool does not take",
        """
        [agents.ops]
        instructions = "x"
        model = "examples.mcp:infra_model"
        servers = ["infra"]

        [agents.ops.rules."infra.deploy"]
        ask_if = [{ region = "eu" }]
        """,
        "tool 'infra.deploy' has no argument 'region' (its arguments: environment, service)",
    ),
    (
        "an unknown server",
        """
        [agents.ops]
        instructions = "x"
        model = "examples.mcp:infra_model"
        servers = ["nope"]
        """,
        "agents.ops.servers[0] (line 5): no MCP server named 'nope' (defined: infra)",
    ),
    (
        "a rule for no Python tool",
        """
        [agents.ops]
        instructions = "x"
        model = "examples.mcp:infra_model"

        [agents.ops.rules.refund]
        permission = "ask"
        """,
        "agents.ops.rules.refund (line 6): matches no tool of agent 'ops'",
    ),
    (
        "a provider spec without a model",
        """
        [agents.ops]
        instructions = "x"
        model = "openai:"
        """,
        "agents.ops.model (line 4): expected module:attr",
    ),
    (
        "a model that is not one",
        """
        [agents.ops]
        instructions = "x"
        model = "examples:demo_agents"
        """,
        "agents.ops.model (line 4): examples:demo_agents is a list, not a Model",
    ),
    (
        "missing instructions",
        """
        [agents.ops]
        model = "examples.mcp:infra_model"
        """,
        "agents.ops.instructions (line 2): missing (required)",
    ),
    (
        "a missing environment variable",
        """
        [servers.remote]
        url = "https://mcp.example.com/mcp"
        bearer_token = "${NO_SUCH_TOKEN_VARIABLE}"

        [agents.ops]
        instructions = "x"
        model = "examples.mcp:infra_model"
        servers = ["remote"]
        """,
        "servers.remote.bearer_token (line 4): the environment variable NO_SUCH_TOKEN_VARIABLE",
    ),
    (
        "two transports",
        """
        [servers.both]
        url = "https://mcp.example.com/mcp"
        command = "x"

        [agents.ops]
        instructions = "x"
        model = "examples.mcp:infra_model"
        """,
        "servers.both (line 2): give either command (a stdio server) or url",
    ),
    (
        "not TOML",
        """
        [agents.ops
        instructions = "x"
        """,
        "not valid TOML: Expected ']' at the end of a table declaration (at line 2",
    ),
]

SERVER = """
[servers.infra]
command = "${{SIGNOFF_PYTHON}}"
args = ["{fake}", "stdio"]
env = {{ FAKE_MCP_STATE = "{state}" }}
"""


def signoff(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("SIGNOFF_")}
    clean["SIGNOFF_DATABASE_URL"] = f"sqlite+aiosqlite:///{tmp_path / 'signoff.db'}"
    return subprocess.run(
        [sys.executable, "-m", "bot", *args],
        cwd=ROOT,
        env={**clean, **env},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=90,
    )


@pytest.mark.parametrize(("case", "text", "expected"), BAD_FILES, ids=[c[0] for c in BAD_FILES])
def test_a_malformed_file_is_one_line_and_exit_code_3(
    tmp_path: Path, state: Path, case: str, text: str, expected: str
) -> None:
    body = textwrap.dedent(text)
    if "servers = [" in body and "[servers." not in body:
        body += SERVER.format(fake=FAKE, state=state)
    path = tmp_path / "agents.toml"
    path.write_text(body)

    done = signoff(tmp_path, "agents", SIGNOFF_AGENTS=str(path))

    assert done.returncode == 3, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith(f"signoff: configuration: SIGNOFF_AGENTS={path}: "), lines[0]
    assert expected in lines[0]
    assert done.stdout == ""


def test_a_provider_model_in_the_file_needs_its_key(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
        [agents.ops]
        instructions = "x"
        model = "openai:gpt-4.1-mini"
        """,
    )
    done = signoff(tmp_path, "agents", SIGNOFF_AGENTS=str(path), OPENAI_API_KEY="")
    assert done.returncode == 3
    assert "agent 'ops': SIGNOFF_OPENAI_API_KEY is not set" in done.stderr
    ready = signoff(
        tmp_path, "agents", SIGNOFF_AGENTS=str(path), SIGNOFF_OPENAI_API_KEY="sk-test-123"
    )
    assert ready.returncode == 0, ready.stderr
    assert "ops (version 1, model gpt-4.1-mini)" in ready.stdout or "openai" in ready.stdout
    # SIGNOFF_MODEL is for SIGNOFF_APP's agents: a file's agent keeps the model it names.
    kept = signoff(
        tmp_path,
        "agents",
        SIGNOFF_AGENTS=str(path),
        SIGNOFF_OPENAI_API_KEY="sk-test-123",
        SIGNOFF_ANTHROPIC_API_KEY="sk-ant-test",
        SIGNOFF_MODEL="anthropic:claude-sonnet-4-5",
    )
    assert kept.returncode == 0, kept.stderr
    assert "claude" not in kept.stdout


def test_the_same_agent_in_the_file_and_in_signoff_app(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
        [agents.refunds]
        instructions = "x"
        model = "examples.mcp:infra_model"
        """,
    )
    done = signoff(tmp_path, "agents", SIGNOFF_AGENTS=str(path), SIGNOFF_APP="examples:demo_agents")
    assert done.returncode == 3
    assert "agent 'refunds' is also defined by SIGNOFF_APP=examples:demo_agents" in done.stderr
    missing = signoff(tmp_path, "agents", SIGNOFF_AGENTS=str(tmp_path / "nope.toml"))
    assert missing.returncode == 3
    assert "nope.toml: the file does not exist" in missing.stderr


def test_signoff_agents_lists_mcp_tools_with_server_permission_and_policy(tmp_path: Path) -> None:
    done = signoff(
        tmp_path,
        "agents",
        SIGNOFF_AGENTS="examples/mcp/agents.toml",
        SIGNOFF_APP="examples:demo_agents",
    )

    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert out.startswith("4 agents from examples:demo_agents and examples/mcp/agents.toml")
    rows = {line.split()[0]: line.split()[1:4] for line in out.splitlines() if "mcp:" in line}
    assert rows == {
        "deploy": ["mcp:infra", "rule", "manual"],
        "destroy_environment": ["mcp:infra", "deny", "manual"],
        "service_status": ["mcp:infra", "allow", "safe"],
    }
    assert "rules: ask if environment == 'production'; else allow; deadline 1h" in out
    assert "  lookup_order  python  allow" in out


def test_load_agent_set_rejects_an_unknown_header_server(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
        [agents.ops]
        instructions = "x"
        model = "examples.mcp:infra_model"
        """,
    )
    settings = load_settings(
        overrides={"agents": path, "mcp_headers": {"github": {"Authorization": "Bearer x"}}}
    )
    with pytest.raises(ConfigurationError, match=r"SIGNOFF_MCP_HEADERS: .* no MCP server"):
        load_agent_set(settings)


def test_a_rule_sets_which_arguments_an_approver_may_change(tmp_path: Path, module: str) -> None:
    path = write(
        tmp_path,
        f"""
        [agents.oncall]
        instructions = "x"
        model = "{module}:make_model"
        tools = ["{module}:page", "{module}:lookup"]

        [agents.oncall.rules.page]
        editable = ["urgent"]

        [agents.oncall.rules.lookup]
        editable = false
        """,
    )
    [agent] = load_agents_file(path).agents
    assert agent.tools["page"].editable_arguments() == ("urgent",)
    assert agent.tools["lookup"].editable_arguments() == ()


@pytest.mark.parametrize(
    ("editable", "message"),
    [('["nope"]', "tool 'page' has no argument 'nope'"), ('"urgent"', "editable")],
)
def test_a_bad_editable_rule_is_a_configuration_error(
    tmp_path: Path, module: str, editable: str, message: str
) -> None:
    path = write(
        tmp_path,
        f"""
        [agents.oncall]
        instructions = "x"
        model = "{module}:make_model"
        tools = ["{module}:page"]

        [agents.oncall.rules.page]
        editable = {editable}
        """,
    )
    with pytest.raises(ConfigurationError, match=message):
        load_agents_file(path)


def test_rules_that_deny_or_hide_keep_tools_from_the_model(tmp_path: Path, module: str) -> None:
    path = write(
        tmp_path,
        f"""
        [servers.remote]
        url = "https://mcp.example.com/mcp"
        max_tools = 10
        max_listing_bytes = 5000
        refresh_interval = 5

        [agents.oncall]
        instructions = "Page whoever is on call."
        model = "{module}:make_model"
        tools = ["{module}:page", "{module}:lookup"]
        servers = ["remote"]

        [agents.oncall.rules.page]
        permission = "deny"

        [agents.oncall.rules."remote.*"]
        hide = true
        """,
    )
    loaded = load_agents_file(path)

    [agent] = loaded.agents
    assert agent.hidden == {"page"}
    assert [t.name for t in agent.offered()] == ["lookup"]
    [server] = loaded.servers
    assert isinstance(server, HttpServer)
    assert (server.max_tools, server.max_listing_bytes, server.refresh_interval) == (10, 5000, 5)
    [binding] = loaded.bindings
    assert [k.hide for k in binding.knobs] == [True]


def test_refresh_interval_is_for_url_servers(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
        [servers.local]
        command = "x"
        refresh_interval = 5
        """,
    )
    with pytest.raises(ConfigurationError, match="refresh_interval is for url servers"):
        load_agents_file(path)
