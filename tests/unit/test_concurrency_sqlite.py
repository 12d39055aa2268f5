"""The concurrency tests again, over a real SQLite file and over two stores (processes)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from test_concurrency import *  # noqa: F403  (the same test bodies, run over SQLite)
from test_concurrency import _agent

from runtime import Actor, Allow, ManualClock, NotAwaiting, RunStatus, Runtime, SequentialIds
from runtime.store.sql import SQLStore


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SQLStore]:
    sql = SQLStore.sqlite(tmp_path / "concurrency.db")
    await sql.migrate()
    try:
        yield sql
    finally:
        await sql.close()


async def test_two_stores_on_one_file_resume_exactly_once(tmp_path: Path) -> None:
    """Two stores on one file behave like two processes: one decision wins."""
    path = tmp_path / "shared.db"
    first, second = SQLStore.sqlite(path), SQLStore.sqlite(path)
    await first.migrate()
    clock = ManualClock()
    ran: list[str] = []
    try:
        a = Runtime(first, [_agent(ran)], clock=clock, ids=SequentialIds("a"))
        b = Runtime(second, [_agent(ran)], clock=clock, ids=SequentialIds("b"))
        parked = await a.start("payments", "pay", requester="U1")
        ticket = parked.pending[0].ticket

        async def click(rt: Runtime, who: str) -> Any:
            return await rt.decide(
                ticket.ticket_id,
                Allow(),
                Actor(id=who),
                correlation=ticket.correlation,
                resume=True,
            )

        outcomes = await asyncio.gather(
            *(click(rt, f"U{n}") for n, rt in enumerate([a, b] * 10)), return_exceptions=True
        )
        won = [o for o in outcomes if not isinstance(o, BaseException)]
        lost = [o for o in outcomes if isinstance(o, BaseException)]
        assert len(won) == 1, outcomes
        assert all(isinstance(e, NotAwaiting) for e in lost), lost
        assert won[0].status is RunStatus.DONE
        assert ran == ["INV-1"]
    finally:
        await first.close()
        await second.close()
