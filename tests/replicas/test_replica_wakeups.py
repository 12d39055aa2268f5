"""How replicas find work on PostgreSQL: wake-ups while ``LISTEN`` holds, polling when not.

Two processes share a fresh database: A stores work and drives nothing (as a ``web``
replica), B is `signoff serve`'s process (`build_service`) polling every 60 s while it
listens and every 0.1 s when it does not, its ``LISTEN`` connection through a `Gate`.
A run A starts is driven by B within seconds only if B was woken (by A's ``NOTIFY``) or
polls often (its ``LISTEN`` backend was terminated, and the gate refuses it a new one).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from pgtest import fetch, fresh_database
from sqlalchemy.engine import make_url
from test_storage_outage import Gate

from bot.bootstrap import Parts, Service, build_service
from bot.settings import Settings
from runtime import Agent, Runtime, ScriptedModel, final_reply, tool_call_reply
from runtime.store.sql import SQLStore
from runtime.worker import Worker

LONG = 60.0
"""B's interval while listening: far beyond every wait of these tests."""
SHORT = 0.1
"""B's interval while not listening."""
WITHIN = 15.0
"""A generous bound on what takes milliseconds (a loaded machine), far below `LONG`."""


def build_agent(ran: asyncio.Queue[str]) -> Agent:
    """An agent whose every run calls `note` once (no approval) and ends."""
    model = ScriptedModel(
        [
            reply
            for n in range(10)
            for reply in (tool_call_reply(("note", {"text": f"n{n}"})), final_reply("Noted."))
        ]
    )
    agent = Agent("notes", "Take notes.", model)

    @agent.tool(permission="allow")
    async def note(text: str) -> str:
        """Note something."""
        ran.put_nowait(text)
        return "noted"

    return agent


class Watching(Worker):
    """The serving worker, queueing each report of whether its process listens."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.reports: asyncio.Queue[bool] = asyncio.Queue()
        self.pace.watch(self.reports.put_nowait)

    async def until_listening(self, wanted: bool) -> None:
        while await asyncio.wait_for(self.reports.get(), timeout=WITHIN) is not wanted:
            pass


@dataclass
class Replicas:
    url: str
    a: Runtime
    b: Service
    gate: Gate
    ran: asyncio.Queue[str]

    @property
    def worker(self) -> Watching:
        assert isinstance(self.b.worker, Watching)
        return self.b.worker


@pytest.fixture
async def replicas() -> AsyncIterator[Replicas]:
    async with fresh_database() as url:
        ran: asyncio.Queue[str] = asyncio.Queue()
        parsed = make_url(url)
        gate = Gate(parsed.host or "127.0.0.1", parsed.port or 5432)
        await gate.open()
        listen_url = parsed.set(host="127.0.0.1", port=gate.port)
        a_store = SQLStore.from_url(url)
        b_store = SQLStore.from_url(url, listen_url=listen_url)
        a = Runtime(a_store, [build_agent(ran)])
        settings = Settings.model_validate(
            {
                "database_url": url,
                "operator_token": "wakeups-operator-0123456789",
                "cookie_secret": "wakeups-cookie-secret-0123456789abcdef",
                "poll_seconds": SHORT,
                "poll_seconds_listening": LONG,
                "workers": 2,
            }
        )
        b = await build_service(
            settings,
            agents=[build_agent(ran)],
            store=b_store,
            worker_type=Watching,
            parts=Parts(listen=False, deadlines=False, discord=False),
        )
        await b.start()
        try:
            yield Replicas(url, a, b, gate, ran)
        finally:
            await b.stop(grace_seconds=WITHIN)
            await a.aclose()
            await a_store.close()
            await b_store.close()
            await gate.shut()


async def test_a_run_made_ready_on_a_is_driven_by_b_at_once_while_b_listens(
    replicas: Replicas,
) -> None:
    await replicas.worker.until_listening(True)
    assert replicas.worker.pace.seconds == LONG
    started = await replicas.a.start("notes", "note one", wait=False)
    # B polls only every 60 s now: only A's NOTIFY can bring the run to it this soon.
    assert await asyncio.wait_for(replicas.ran.get(), timeout=WITHIN) == "n0"
    [[owner]] = await fetch(
        replicas.url,
        "SELECT data FROM events WHERE run_id = $1 AND kind = 'run_claimed'",
        started.run_id,
    )
    assert replicas.b.runtime.worker_id in owner


async def test_a_lost_listen_brings_polling_back_at_once(replicas: Replicas) -> None:
    await replicas.worker.until_listening(True)
    terminated = await fetch(
        replicas.url,
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
        "WHERE datname = current_database() AND query LIKE 'LISTEN%' "
        "AND pid <> pg_backend_pid()",
    )
    assert len(terminated) == 1
    await replicas.worker.until_listening(False)
    assert replicas.worker.pace.seconds == SHORT
    # B tries to listen again a second after the loss; the gate refuses it from now on,
    # so no NOTIFY reaches B: it finds A's run by polling, every 0.1 s.
    await replicas.gate.shut()
    await replicas.a.start("notes", "note two", wait=False)
    assert await asyncio.wait_for(replicas.ran.get(), timeout=WITHIN) == "n0"
    assert not replicas.worker.pace.listening


async def test_sqlite_never_listens_so_polling_stays_short(tmp_path: Path) -> None:
    store = SQLStore.sqlite(tmp_path / "signoff.db")
    reports: list[bool] = []
    stop = asyncio.Event()
    heard: list[frozenset[str]] = []
    task = asyncio.create_task(store.listen(heard.append, stop, on_listening=reports.append))
    try:
        await asyncio.sleep(0)
        stop.set()
        await asyncio.wait_for(task, timeout=WITHIN)
        assert reports == [] and heard == []
    finally:
        await store.close()
