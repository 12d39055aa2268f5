"""A real `signoff serve` SIGKILLed while an MCP tool call of its run waits for the answer
to the server's elicitation: another `signoff serve` on the same database recovers the
call by its replay policy (``manual``: uncertain) and voids the input ticket, saying why."""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from mcpbed import FAKE, until
from testkit import ROOT, Served

from adapters.mcp.elicitation import HOLDER_GONE_REASON

pytestmark = [pytest.mark.timeout(120), pytest.mark.crash]

TOKEN = "operator-token-0123456789"
MODULE = """
from testkit import echo_model

model = echo_model(("restart", {"service": "api"}))
"""
FILE = """
[servers.infra]
command = "${{SIGNOFF_PYTHON}}"
args = ["{fake}", "stdio"]
env = {{ FAKE_MCP_STATE = "{state}", FAKE_MCP_INPUT = "1" }}
elicitation = true
timeout = 600

[agents.ops]
instructions = "Operate."
model = "elicit_model:model"
servers = ["infra"]

[agents.ops.rules."infra.restart"]
permission = "allow"
"""


async def api(url: str, method: str, path: str, body: Any = None) -> Any:
    headers = {"Authorization": f"Bearer {TOKEN}"}
    async with (
        aiohttp.ClientSession() as http,
        http.request(method, url + path, json=body, headers=headers) as answer,
    ):
        assert answer.status < 300, await answer.text()
        return await answer.json()


async def test_a_killed_holder_leaves_the_call_uncertain_and_the_ticket_voided(
    tmp_path: Path, state: Path
) -> None:
    (tmp_path / "elicit_model.py").write_text(MODULE)
    agents = tmp_path / "agents.toml"
    agents.write_text(textwrap.dedent(FILE.format(fake=FAKE, state=state)))
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith("SIGNOFF_")}
    env.update(
        {
            "PYTHONPATH": os.pathsep.join(
                [str(ROOT), str(ROOT / "tests" / "support"), str(tmp_path)]
            ),
            "SIGNOFF_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path / 'serve.db'}",
            "SIGNOFF_AGENTS": str(agents),
            "SIGNOFF_PORT": "0",
            "SIGNOFF_LEASE_SECONDS": "1",
            "SIGNOFF_POLL_SECONDS": "0.1",
            "SIGNOFF_OPERATOR_TOKEN": TOKEN,
        }
    )
    first = await Served.start(env)
    try:
        started = await api(first.url, "POST", "/api/runs", {"agent": "ops", "input": "go"})
        run_id = started["run_id"]

        async def input_ticket() -> dict[str, Any] | None:
            tickets = (await api(first.url, "GET", "/api/tickets"))["tickets"]
            return next((t for t in tickets if t.get("agent") == "ops.elicitation"), None)

        ticket = await until(input_ticket, "the input ticket")
    finally:
        first.kill()

    second = await Served.start(env)
    try:

        async def uncertain() -> bool:
            run = await api(second.url, "GET", f"/api/runs/{run_id}")
            return any(p.get("kind") == "uncertain" for p in run.get("pending") or [])

        await until(uncertain, "the call uncertain")

        async def voided() -> bool:
            run = await api(second.url, "GET", f"/api/runs/{ticket['run_id']}")
            return bool(run["status"] == "cancelled")

        await until(voided, "the input run cancelled")
        events = await api(second.url, "GET", f"/api/runs/{ticket['run_id']}/events")
        assert HOLDER_GONE_REASON in json.dumps(events)
    finally:
        await second.stop()
