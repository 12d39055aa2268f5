"""Fixtures of the MCP tests: a state directory for the fake server and test beds."""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from mcpbed import McpBed, close_bed, open_bed
from testkit import ROOT

# The Slack test of this folder reuses the fake Slack of the Slack edge's tests.
sys.path.insert(0, str(ROOT / "tests" / "adapters" / "slack"))


@pytest.fixture(autouse=True)
def no_proxies(monkeypatch: pytest.MonkeyPatch) -> None:
    """HTTP clients honour proxy variables even for 127.0.0.1."""
    for name in list(os.environ):
        if name.upper() in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY"):
            monkeypatch.delenv(name, raising=False)


@pytest.fixture
def state(tmp_path: Path) -> Path:
    """The fake MCP server's state directory."""
    path = tmp_path / "mcp"
    path.mkdir()
    return path


@pytest.fixture
async def make_bed(tmp_path: Path) -> AsyncIterator[Callable[..., Awaitable[McpBed]]]:
    """Open test beds (see `mcpbed.open_bed`); all are closed after the test."""
    opened: list[McpBed] = []

    async def make(*args: Any, **options: Any) -> McpBed:
        bed = await open_bed(tmp_path / f"signoff{len(opened)}.db", *args, **options)
        opened.append(bed)
        return bed

    yield make
    for bed in reversed(opened):
        await close_bed(bed)
