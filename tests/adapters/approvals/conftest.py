"""The `approvals` fixture: a running signoff service with external agents
(`approvals_harness.start_approvals`)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from approvals_harness import Approvals, start_approvals


@pytest.fixture
async def approvals(tmp_path: Path) -> AsyncIterator[Approvals]:
    async with start_approvals(tmp_path) as running:
        yield running
