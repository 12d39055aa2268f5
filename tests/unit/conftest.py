"""Shared fixtures for the runtime unit tests.

The tests talk to the runtime only through `runtime_factory` and the `store` fixture, so
another suite can run the same bodies over a different store by overriding `store`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from pgtest import close_databases

from runtime import (
    Agent,
    ManualClock,
    MemoryStore,
    Runtime,
    SequentialIds,
    Store,
)

RuntimeFactory = Callable[..., Runtime]


def pytest_sessionfinish() -> None:
    """Drop the PostgreSQL databases the SQL variants of these tests made."""
    close_databases()


Snapshot = Callable[[str], Awaitable[dict[str, Any]]]


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def ids() -> SequentialIds:
    return SequentialIds()


@pytest.fixture
def store() -> Store:
    return MemoryStore()


@pytest.fixture
def runtime_factory(store: Store, clock: ManualClock, ids: SequentialIds) -> RuntimeFactory:
    """Build runtimes over one store, one manual clock and one id source.

    Every runtime made by one factory shares the store, so a "fresh process" is just a
    second call.
    """

    def make(*agents: Agent, **options: Any) -> Runtime:
        return Runtime(store, agents, clock=clock, ids=ids, **options)

    return make


@pytest.fixture
def snapshot(store: Store) -> Snapshot:
    """Everything the store holds about one run, as comparable plain data."""

    async def take(run_id: str) -> dict[str, Any]:
        async with store.transaction() as tx:
            run = await tx.get_run(run_id)
            calls = await tx.calls_for_run(run_id)
            tickets = await tx.tickets_for_run(run_id)
            events = await tx.events(run_id)
            outbox = await tx.outbox_for_run(run_id)
        return {
            "run": dataclasses.asdict(run) if run is not None else None,
            "calls": [dataclasses.asdict(c) for c in calls],
            "tickets": [t.model_dump() for t in tickets],
            "events": [dataclasses.asdict(e) for e in events],
            "outbox": [dataclasses.asdict(o) for o in outbox],
        }

    return take
