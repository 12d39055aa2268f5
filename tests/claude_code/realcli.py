"""What the tests of the real Claude Code CLI (npm ``@anthropic-ai/claude-code``, 2.1.x)
share: finding the binary, the fake of Anthropic's Messages API it talks to, the offline
environment it runs in, and one headless ``claude -p`` run.

The CLI is ``CLAUDE_CODE_BIN`` (as `.ci/run` installs it), else a ``claude`` on PATH; the
tests are skipped without it, except under CI, where a missing CLI fails them.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from tests.claude_code.fake_anthropic import FakeAnthropic


def claude_binary() -> str | None:
    """The Claude Code 2.1.x binary, or None."""
    found = os.environ.get("CLAUDE_CODE_BIN") or shutil.which("claude")
    if not found:
        return None
    version = subprocess.run([found, "--version"], capture_output=True, text=True, timeout=60)
    return found if version.stdout.startswith("2.1.") else None


CLAUDE = claude_binary()
requires_claude = pytest.mark.skipif(
    CLAUDE is None and not os.environ.get("CI"),
    reason="the Claude Code CLI 2.1.x is not installed",
)
"""Skips a test without the CLI, except under CI (`.ci/run` installs it)."""


@pytest.fixture
async def fake() -> AsyncIterator[FakeAnthropic]:
    """The fake of Anthropic's Messages API, listening on 127.0.0.1."""
    found = FakeAnthropic()
    runner = web.AppRunner(found.app())
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    found.url = f"http://127.0.0.1:{runner.addresses[0][1]}"
    try:
        yield found
    finally:
        await runner.cleanup()


def offline_env(tmp_path: Path, fake_url: str, **extra: str) -> dict[str, str]:
    """The CLI's whole environment: a throwaway ``HOME`` under `tmp_path`, the fake API,
    no telemetry, updates or other traffic, this interpreter's ``bin`` (``signoff``) on
    ``PATH``, and `extra`."""
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    return {
        "PATH": os.pathsep.join([str(Path(sys.executable).parent), "/usr/bin", "/bin"]),
        "HOME": str(home),
        "ANTHROPIC_BASE_URL": fake_url,
        "ANTHROPIC_API_KEY": "sk-ant-offline",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_AUTOUPDATER": "1",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        **extra,
    }


async def run_claude(
    *args: str, cwd: Path, env: dict[str, str], seconds: float = 120
) -> dict[str, Any]:
    """One headless ``claude -p <args> --output-format json`` run in `cwd`; its JSON
    result (the run must exit 0)."""
    assert CLAUDE is not None
    process = await asyncio.create_subprocess_exec(
        CLAUDE,
        "-p",
        *args,
        "--output-format",
        "json",
        cwd=cwd,
        env=env,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        stdout, stderr = await asyncio.wait_for(process.communicate(), timeout=seconds)
    finally:
        if process.returncode is None:
            process.kill()
            await process.communicate()
    assert process.returncode == 0, stderr.decode()
    return dict(json.loads(stdout))
