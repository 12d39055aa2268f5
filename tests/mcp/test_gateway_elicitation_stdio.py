"""`signoff mcp ops` forwards an upstream server's elicitation to the calling MCP client
over stdio (the official SDK client with an elicitation callback), and answers the server
``cancel`` for a client without one."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path
from typing import Any

import mcp_types
import pytest
from mcp import Client, StdioServerParameters
from mcpbed import FAKE, calls, until
from testkit import ROOT

pytestmark = pytest.mark.timeout(180)

FILE = """
[servers.infra]
command = "${{SIGNOFF_PYTHON}}"
args = ["{fake}", "stdio"]
env = {{ FAKE_MCP_STATE = "{state}", FAKE_MCP_INPUT = "1" }}
elicitation = true

[agents.ops]
instructions = "Operate."
model = "examples.mcp:infra_model"
servers = ["infra"]

[agents.ops.rules."infra.restart"]
permission = "allow"
"""


def environment(tmp_path: Path, state: Path) -> dict[str, str]:
    agents = tmp_path / "agents.toml"
    agents.write_text(FILE.format(fake=FAKE, state=state))
    env = {k: v for k, v in os.environ.items() if not k.startswith("SIGNOFF_")}
    env.update(
        SIGNOFF_DATABASE_URL=f"sqlite+aiosqlite:///{tmp_path / 'signoff.db'}",
        SIGNOFF_AGENTS=str(agents),
        SIGNOFF_PYTHON=sys.executable,
        SIGNOFF_LOG_LEVEL="ERROR",
    )
    return env


async def migrate(env: dict[str, str]) -> None:
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot", "migrate", cwd=ROOT, env=env, stderr=asyncio.subprocess.PIPE
    )
    _, err = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode == 0, err.decode()


def text(result: mcp_types.CallToolResult) -> str:
    return "\n".join(b.text for b in result.content if isinstance(b, mcp_types.TextContent))


async def test_signoff_mcp_forwards_the_question_to_the_client(tmp_path: Path, state: Path) -> None:
    env = environment(tmp_path, state)
    await migrate(env)
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "bot", "mcp", "ops", "--session", "job-1", "--as", "U1", "--no-operator"],
        env=env,
        cwd=str(ROOT),
    )
    asked: list[str] = []

    async def answer(context: Any, question: mcp_types.ElicitRequestParams) -> Any:
        asked.append(question.message)
        return mcp_types.ElicitResult(action="accept", content={"ticket": 9})

    async with Client(params, elicitation_callback=answer) as client:
        result = await client.call_tool("restart", {"service": "api"})
    assert text(result) == "restarted api under change 9"
    assert asked == ["Restarting api: which change ticket?"]

    async with Client(params) as client:
        result = await client.call_tool("restart", {"service": "web"})
    assert text(result) == "did not restart web: cancel"


async def test_signoff_mcp_gives_up_on_a_question_after_its_setting(
    tmp_path: Path, state: Path
) -> None:
    # SIGNOFF_MCP_QUESTION_SECONDS bounds the wait (300 s by default, beyond this test's
    # time-out): the server gets cancel, and the client's late answer the call's outcome.
    env = environment(tmp_path, state)
    env["SIGNOFF_MCP_QUESTION_SECONDS"] = "0.5"
    await migrate(env)
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "bot", "mcp", "ops", "--session", "job-2", "--as", "U1", "--no-operator"],
        env=env,
        cwd=str(ROOT),
    )
    late = asyncio.Event()

    async def answer_late(context: Any, question: mcp_types.ElicitRequestParams) -> Any:
        await late.wait()
        return mcp_types.ElicitResult(action="accept", content={"ticket": 9})

    def restarts() -> list[dict[str, Any]]:
        return [c["args"] for c in calls(state) if c["tool"] == "restart"]

    async with Client(params, elicitation_callback=answer_late) as client:
        calling = asyncio.ensure_future(client.call_tool("restart", {"service": "api"}))
        try:
            [entry] = await until(restarts, "the server's restart call")
            assert entry["action"] == "cancel"
        finally:
            late.set()
        result = await asyncio.wait_for(calling, 60)
    assert text(result) == "did not restart api: cancel"
    assert [r["action"] for r in restarts()] == ["cancel"]
