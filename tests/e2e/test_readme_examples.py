"""The docs' examples run as printed: the agents file of docs/agents-file.md loads
against the bundled ``infra`` MCP server, and the signed webhook request of
docs/webhooks.md starts a run on a real `signoff serve` (its ``SIGNOFF_HOOKS`` too, taken
from the same page)."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from testkit import Served

from tests.e2e.test_cli import REPO

DOCS = REPO / "docs"

pytestmark = pytest.mark.timeout(180)


def _page(name: str) -> str:
    return (DOCS / name).read_text()


def _blocks(section: str, language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", section, re.DOTALL)


def _environment(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SIGNOFF_")}
    env.update(SIGNOFF_DATABASE_URL=f"sqlite+aiosqlite:///{tmp_path / 'signoff.db'}", **extra)
    return env


# What the example names from "mycompany": a model and a Python tool.
MYCOMPANY = {
    "__init__.py": "",
    "models.py": "from examples.mcp import infra_model as ops_model\n",
    "tools.py": textwrap.dedent(
        '''
        from runtime import tool


        @tool
        async def page_oncall(summary: str) -> str:
            """Page the on-call engineer."""
            return "paged"
        '''
    ),
}


def test_the_agents_file_example_loads_with_the_bundled_infra_server(tmp_path: Path) -> None:
    [example] = [b for b in _blocks(_page("agents-file.md"), "toml") if "[servers.infra]" in b]
    (tmp_path / "agents.toml").write_text(example)
    shutil.copy(REPO / "examples" / "mcp" / "infra_server.py", tmp_path)
    (tmp_path / "mycompany").mkdir()
    for name, text in MYCOMPANY.items():
        (tmp_path / "mycompany" / name).write_text(text)

    done = subprocess.run(
        [sys.executable, "-m", "bot", "agents"],
        cwd=REPO,
        env=_environment(
            tmp_path,
            SIGNOFF_AGENTS=str(tmp_path / "agents.toml"),
            PYTHONPATH=f"{tmp_path}{os.pathsep}{REPO}",
            GITHUB_MCP_TOKEN="github-token-for-the-example",
            SIGNOFF_LOG_LEVEL="ERROR",
        ),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
    )

    assert done.returncode == 0, done.stderr
    rows = {line.split()[0]: line for line in done.stdout.splitlines() if line.startswith("  ")}
    assert rows["deploy"].split()[1:3] == ["mcp:infra", "rule"]
    assert rows["service_status"].split()[1:4] == ["mcp:infra", "allow", "safe"]
    assert rows["page_oncall"].split()[1] == "python"


@pytest.mark.skipif(
    shutil.which("curl") is None or shutil.which("openssl") is None,
    reason="the example uses curl and openssl",
)
async def test_the_signed_webhook_example_starts_a_run(tmp_path: Path) -> None:
    section = _page("webhooks.md")
    hooks = re.search(r"export SIGNOFF_HOOKS='(.*?)'\n", section, re.DOTALL)
    assert hooks is not None
    request = next(block for block in _blocks(section, "sh") if "/hooks/refunds" in block)
    served = await Served.start(
        _environment(
            tmp_path,
            SIGNOFF_HOOKS=hooks.group(1),
            SIGNOFF_PORT="0",
            SIGNOFF_OPERATOR_TOKEN="operator-token-0123456789",
            SIGNOFF_LOG_LEVEL="ERROR",
        )
    )
    try:
        sent = await asyncio.create_subprocess_exec(
            "bash",
            "-euc",
            request.replace("http://127.0.0.1:8080", served.url),
            env={k: v for k, v in os.environ.items() if k != "SECRET"},
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(sent.communicate(), 60)
    finally:
        await served.stop()

    assert sent.returncode == 0, err.decode()
    answer = json.loads(out)
    assert answer["run_id"].startswith("run_")
    assert answer["status_url"] == f"/api/runs/{answer['run_id']}"
