"""`signoff mcp infra` serves the bundled infra agent's MCP tools over stdio to the official
`mcp` SDK client: the listing leaves the denied tool out, a staging deploy runs at once,
the denied tool is a tool error, and a production deploy waits until `signoff approve`
(another process on the same database) allows it, then runs once."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

import mcp_types
import pytest
from mcp import Client, StdioServerParameters
from mcpbed import until
from testkit import ROOT

pytestmark = pytest.mark.timeout(180)


def environment(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SIGNOFF_")}
    env.update(
        SIGNOFF_DATABASE_URL=f"sqlite+aiosqlite:///{tmp_path / 'signoff.db'}",
        SIGNOFF_AGENTS="examples/mcp/agents.toml",
        SIGNOFF_LOG_LEVEL="ERROR",
    )
    return env


async def signoff(env: dict[str, str], *args: str) -> str:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bot",
        *args,
        cwd=ROOT,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode == 0, err.decode()
    return out.decode()


def _text(result: mcp_types.CallToolResult) -> str:
    return "\n".join(b.text for b in result.content if isinstance(b, mcp_types.TextContent))


async def test_signoff_mcp_serves_the_agents_tools_over_stdio(tmp_path: Path) -> None:
    env = environment(tmp_path)
    await signoff(env, "migrate")
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "bot", "mcp", "infra", "--session", "job-1", "--as", "U1", "--no-operator"],
        env=env,
        cwd=str(ROOT),
    )
    async with Client(params) as client:
        listed = {t.name for t in (await client.list_tools()).tools}
        assert listed == {"service_status", "deploy"}

        staged = await client.call_tool(
            "deploy", {"service": "checkout", "version": "2.5.0", "environment": "staging"}
        )
        assert _text(staged) == "deployed checkout 2.5.0 to staging"

        refused = await client.call_tool("destroy_environment", {"environment": "staging"})
        assert refused.is_error
        assert "Not allowed" in _text(refused)

        production = {"service": "checkout", "version": "2.5.1", "environment": "production"}
        asking = asyncio.ensure_future(client.call_tool("deploy", production))

        async def ticket() -> str | None:
            found = json.loads(await signoff(env, "tickets", "--json"))
            return found[0]["ticket_id"] if found else None

        ticket_id = await until(ticket, "the production deploy's ticket", seconds=60)
        await signoff(env, "approve", ticket_id)
        result = await asyncio.wait_for(asking, 90)
        assert _text(result) == "deployed checkout 2.5.1 to production"

        again = await client.call_tool("deploy", production)
        assert _text(again) == "deployed checkout 2.5.1 to production"
    assert json.loads(await signoff(env, "tickets", "--json")) == []
