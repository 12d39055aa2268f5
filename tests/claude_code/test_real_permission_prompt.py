"""The real Claude Code CLI (2.1.x) asks a served signoff through its permission prompt
tool, configured as docs/claude-code.md shows (the ``--mcp-config`` files for the stdio
command and the HTTP endpoint, and the command line), with no ``PreToolUse`` hook, fully
offline against a local fake of Anthropic's Messages API: a call signoff's rules allow
runs, a call a person allows with a changed command runs that command, and a denied call
reaches the model as the tool's error with the reason.

Runs when the CLI is installed (``CLAUDE_CODE_BIN``, else ``claude`` on PATH); skipped
otherwise, except under CI.
"""

from __future__ import annotations

import asyncio
import json
import shlex
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.claude_code.conftest import ROOT, page_block
from tests.claude_code.fake_anthropic import FakeAnthropic
from tests.claude_code.realcli import fake, offline_env, requires_claude, run_claude
from tests.clients.serving import AGENT_TOKEN, Server

pytestmark = [requires_claude, pytest.mark.timeout(180)]
__all__ = ["fake"]  # the fixture, used by name
MARKER = "test_real_permission_prompt.py"


@pytest.fixture(params=["stdio", "http"])
def transport(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def mcp_config(server: Server, transport: str) -> dict[str, Any]:
    """The page's ``--mcp-config`` file for `transport`, pointed at the served signoff."""
    config = json.loads(page_block("json", MARKER, 0 if transport == "stdio" else 1))
    entry = config["mcpServers"]["signoff"]
    assert entry["type"] == transport
    if transport == "http":
        assert entry["url"].startswith("http://127.0.0.1:8080/claude-code/mcp?")
        entry["url"] = entry["url"].replace("http://127.0.0.1:8080", server.url)
    return dict(config)


def command_line(config: Path, prompt: str) -> list[str]:
    """The page's command line with `prompt` and `config` in it."""
    words = shlex.split(page_block("sh", MARKER))
    assert words[:2] == ["claude", "-p"] and "--permission-prompt-tool" in words
    at = words.index("--mcp-config")
    words[at + 1] = str(config)
    return [prompt, *words[3:]]


async def claude(
    server: Server, fake: FakeAnthropic, tmp_path: Path, transport: str, prompt: str
) -> dict[str, Any]:
    """One headless ``claude -p`` run with the permission prompt tool; its JSON result."""
    (tmp_path / "project").mkdir(exist_ok=True)
    config = tmp_path / "signoff-mcp.json"
    config.write_text(json.dumps(mcp_config(server, transport)), encoding="utf-8")
    env = offline_env(
        tmp_path,
        fake.url,
        # How long Claude Code waits for an alwaysLoad server to connect (5 s by default):
        # plenty, so that a loaded machine starts the command in time.
        MCP_CONNECT_TIMEOUT_MS="60000",
        SIGNOFF_URL=server.url,
        SIGNOFF_TOKEN=AGENT_TOKEN,
        PYTHONPATH=str(ROOT),
    )
    return await run_claude(*command_line(config, prompt), cwd=tmp_path / "project", env=env)


def tool_result(done: dict[str, Any]) -> dict[str, Any]:
    """The one tool result the fake model reported back."""
    assert done["stop_reason"] == "end_turn", done
    (result,) = json.loads(done["result"].removeprefix("RESULT "))
    return dict(result)


def approvals_of(server: Server, command: str) -> list[dict[str, Any]]:
    with httpx.Client(base_url=server.url, timeout=30, trust_env=False) as http:
        response = http.get(
            "/api/approvals",
            params={"limit": 100},
            headers={"Authorization": f"Bearer {AGENT_TOKEN}"},
        )
    assert response.status_code == 200, response.text
    return [
        a
        for a in response.json()["approvals"]
        if a["requested_arguments"].get("command") == command
    ]


async def decide_when_asked(server: Server, command: str, decision: dict[str, Any]) -> str:
    """Decide the approval of `command` once the waiting run asked; its id."""
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        found = await asyncio.to_thread(approvals_of, server, command)
        if found and found[0]["ticket_id"]:  # its ticket opens right after the approval
            (approval,) = found
            assert approval["status"] == "pending", approval
            await asyncio.to_thread(server.decide, approval["ticket_id"], decision)
            return str(approval["approval_id"])
        await asyncio.sleep(0.1)
    raise AssertionError(f"Claude Code did not ask about {command!r} within 90 s")


async def test_a_call_the_rules_allow_runs(
    server: Server, fake: FakeAnthropic, tmp_path: Path, transport: str
) -> None:
    name = f"made-by-rule-{uuid.uuid4().hex[:8]}"
    done = await claude(server, fake, tmp_path, transport, f"RUN<<touch {name}>>")
    result = tool_result(done)
    assert result.get("is_error") is not True, result
    assert (tmp_path / "project" / name).exists()
    (approval,) = await asyncio.to_thread(approvals_of, server, f"touch {name}")
    assert (approval["status"], approval["basis"]) == ("allowed", "rule")
    assert approval["tool"] == "Bash"


async def test_a_call_allowed_with_a_changed_command_runs_that_command(
    server: Server, fake: FakeAnthropic, tmp_path: Path, transport: str
) -> None:
    command = f"rm -rf build-{uuid.uuid4().hex[:8]}"
    edited = {"command": "echo removed-after-sign-off", "description": "As asked"}
    running = asyncio.ensure_future(claude(server, fake, tmp_path, transport, f"RUN<<{command}>>"))
    try:
        approval_id = await decide_when_asked(
            server, command, {"decision": "allow", "args": edited}
        )
        result = tool_result(await asyncio.wait_for(running, 120))
    finally:
        if not running.done():
            running.cancel()
            await asyncio.gather(running, return_exceptions=True)
    assert result["content"].strip() == "removed-after-sign-off"
    assert result.get("is_error") is not True
    (approval,) = await asyncio.to_thread(approvals_of, server, command)
    assert approval["approval_id"] == approval_id and approval["status"] == "allowed"


async def test_a_denied_call_reaches_the_model_with_its_reason(
    server: Server, fake: FakeAnthropic, tmp_path: Path, transport: str
) -> None:
    command = f"rm -rf build-{uuid.uuid4().hex[:8]}"
    running = asyncio.ensure_future(claude(server, fake, tmp_path, transport, f"RUN<<{command}>>"))
    try:
        await decide_when_asked(server, command, {"decision": "deny", "reason": "keep build/"})
        result = tool_result(await asyncio.wait_for(running, 120))
    finally:
        if not running.done():
            running.cancel()
            await asyncio.gather(running, return_exceptions=True)
    assert result["is_error"] is True
    assert "keep build/" in json.dumps(result["content"])
