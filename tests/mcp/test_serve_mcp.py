"""`signoff serve` with an agents file: the bundled MCP demo behind sign-off, end to end,
and a server that cannot be started while ``serve`` keeps serving."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path
from typing import Any

import pytest
from aiohttp import ClientSession
from mcpbed import until
from testkit import Served

pytestmark = pytest.mark.timeout(180)

TOKEN = "operator-token-0123456789"


def environment(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SIGNOFF_")}
    env.update(
        SIGNOFF_DATABASE_URL=f"sqlite+aiosqlite:///{tmp_path / 'signoff.db'}",
        SIGNOFF_PORT="0",
        SIGNOFF_OPERATOR_TOKEN=TOKEN,
        SIGNOFF_LOG_LEVEL="ERROR",
        **extra,
    )
    return env


class Api:
    def __init__(self, session: ClientSession, url: str) -> None:
        self.session, self.url = session, url

    async def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        async with self.session.request(
            method, self.url + path, json=body, headers={"Authorization": f"Bearer {TOKEN}"}
        ) as response:
            return response.status, await response.json()

    async def run_until(self, run_id: str, *statuses: str) -> dict[str, Any]:
        found: dict[str, Any] = {}

        async def check() -> bool:
            nonlocal found
            _, found = await self.call("GET", f"/api/runs/{run_id}")
            return found["status"] in statuses

        await until(check, f"run {run_id} in {statuses}", seconds=60)
        return found


async def test_make_runs_demo_an_mcp_tool_waits_for_sign_off(tmp_path: Path) -> None:
    served = await Served.start(
        environment(
            tmp_path,
            SIGNOFF_APP="examples:demo_agents",
            SIGNOFF_AGENTS="examples/mcp/agents.toml",
        )
    )
    try:
        async with ClientSession() as session:
            api = Api(session, served.url)
            status, agents = await api.call("GET", "/api/agents")
            assert status == 200
            assert {"refunds", "infra"} <= {a["name"] for a in agents["agents"]}

            status, started = await api.call(
                "POST",
                "/api/runs",
                {"agent": "infra", "input": "Deploy checkout 2.5.0 to production"},
            )
            assert status == 202, started
            parked = await api.run_until(started["run_id"], "awaiting")
            [pending] = parked["pending"]
            assert pending["tool"] == "deploy"
            assert pending["arguments"]["environment"] == "production"

            status, decided = await api.call(
                "POST", f"/api/tickets/{pending['ticket_id']}/decision", {"decision": "allow"}
            )
            assert status == 200, decided
            done = await api.run_until(started["run_id"], "done")
            assert done["text"] == "Done: deployed checkout 2.5.0 to production."

            status, staged = await api.call(
                "POST", "/api/runs", {"agent": "infra", "input": "Deploy search 2.0 to staging"}
            )
            done = await api.run_until(staged["run_id"], "done")
            assert done["text"] == "Done: deployed search 2.0 to staging."
    finally:
        await served.stop()
    assert served.process.returncode == 0


async def test_serve_keeps_serving_when_a_server_cannot_start(tmp_path: Path) -> None:
    path = tmp_path / "agents.toml"
    path.write_text(
        textwrap.dedent(
            """
            [servers.infra]
            command = "/nonexistent/mcp-server"

            [agents.infra]
            instructions = "Deploy."
            model = "examples.mcp:infra_model"
            servers = ["infra"]

            [agents.infra.rules."infra.service_status"]
            permission = "allow"
            """
        )
    )
    served = await Served.start(environment(tmp_path, SIGNOFF_AGENTS=str(path)))
    try:
        async with ClientSession() as session:
            api = Api(session, served.url)
            async with session.get(served.url + "/readyz") as ready:
                assert ready.status == 200
            status, started = await api.call(
                "POST", "/api/runs", {"agent": "infra", "input": "Deploy checkout 2.5.0 to staging"}
            )
            assert status == 202
            done = await api.run_until(started["run_id"], "done")
            assert done["text"].startswith(
                "I could not check checkout: Error: MCP server 'infra' is not available "
                "(cannot start the command: No such file or directory"
            )
    finally:
        await served.stop()
    assert served.process.returncode == 0
