"""The ``grants`` option of agents-file rules: on Python tools named in the file and on
MCP tools (a real MCP server subprocess over stdio), and its mistakes."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path
from typing import Any

import pytest
from mcpbed import stdio_server
from testkit import echo_model

from adapters.mcp import Binding, ToolKnobs
from bot.agents_file import load_agents_file
from runtime import Agent, ConfigurationError

pytestmark = pytest.mark.timeout(120)

MODULE = '''
from runtime import ScriptedModel, final_reply

def make_model():
    return ScriptedModel([final_reply("ok")], name="file-model")

def refund(order: str, amount: float) -> str:
    """Refund an order."""
    return order

def page(engineer: str) -> str:
    """Page an engineer."""
    return engineer
'''


@pytest.fixture
def module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: Any) -> str:
    name = f"grantrules_{request.node.name.split('[')[0]}_{os.getpid()}"
    (tmp_path / f"{name}.py").write_text(MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    return name


def load(tmp_path: Path, module: str, rules: str) -> Agent:
    path = tmp_path / "agents.toml"
    head = f"""
    [agents.shop]
    instructions = "Refund."
    model = "{module}:make_model"
    tools = ["{module}:refund", "{module}:page"]
    """
    path.write_text(textwrap.dedent(head) + textwrap.dedent(rules))
    [agent] = load_agents_file(path).agents
    return agent


def test_a_rule_sets_the_grants_a_tool_allows(tmp_path: Path, module: str) -> None:
    agent = load(
        tmp_path,
        module,
        """
        [agents.shop.rules.refund]
        grants = ["run", "thread"]

        [agents.shop.rules.page]
        grants = []
        """,
    )
    assert agent.grants_for(agent.tools["refund"]) == ("run", "thread")
    assert agent.grants_for(agent.tools["page"]) == ()


def test_without_a_rule_a_tool_allows_grants_for_the_run(tmp_path: Path, module: str) -> None:
    agent = load(tmp_path, module, "")
    assert agent.grants_for(agent.tools["refund"]) == ("run",)


@pytest.mark.parametrize(
    ("rules", "expected"),
    [
        ('grants = ["forever"]', "grants[0] (line 7): Input should be 'run' or 'thread'"),
        ('grants = ["run", "run"]', "given twice"),
        ('grants = "run"', "grants"),
        ('four_eyes = true\ngrants = ["run"]', "four-eyes tool cannot take standing grants"),
    ],
    ids=["unknown scope", "twice", "not a list", "four-eyes"],
)
def test_a_bad_grants_option_is_a_configuration_error(
    tmp_path: Path, module: str, rules: str, expected: str
) -> None:
    with pytest.raises(ConfigurationError) as raised:
        load(tmp_path, module, f"[agents.shop.rules.refund]\n{rules}\n")
    assert expected in str(raised.value)


async def test_mcp_tools_take_grants_from_their_rules(make_bed: Any, state: Path) -> None:
    ops = Agent("ops", "Operate.", echo_model())
    knobs = (
        ToolKnobs("infra.*", where="rule infra.*", grants=("run", "thread")),
        ToolKnobs("infra.merge", where="rule infra.merge", grants=()),
    )
    await make_bed([ops], [stdio_server(state)], [Binding(ops, ("infra",), knobs)])

    assert ops.grants_for(ops.tools["deploy"]) == ("run", "thread")
    assert ops.grants_for(ops.tools["merge"]) == ()


async def test_mcp_tools_allow_grants_for_the_run_by_default(make_bed: Any, state: Path) -> None:
    ops = Agent("ops", "Operate.", echo_model())
    four_eyes = (ToolKnobs("infra.deploy", where="rule infra.deploy", four_eyes=True),)
    await make_bed([ops], [stdio_server(state)], [Binding(ops, ("infra",), four_eyes)])

    assert ops.grants_for(ops.tools["lookup"]) == ("run",)
    assert ops.grants_for(ops.tools["deploy"]) == ()  # four-eyes: none
