"""Listing what one person may decide reads a page's worth of the store, never every open
ticket: what the runtime asks the store for is recorded and bounded by the page."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import TYPE_CHECKING, Any

from runtime import Actor, Runtime
from runtime.domain.tickets import ToolPermission
from runtime.store.base import Store, Transaction

if TYPE_CHECKING:
    from conftest import Make


class Recorded:
    """A transaction that notes every listing call and how many rows it gave."""

    def __init__(self, inner: Transaction, calls: list[tuple[str, dict[str, Any], int]]) -> None:
        self._inner = inner
        self._calls = calls

    def __getattr__(self, name: str) -> Any:
        found = getattr(self._inner, name)
        if name not in ("open_tickets", "decidable_tickets", "list_runs"):
            return found

        async def call(**kwargs: Any) -> Any:
            result = await found(**kwargs)
            self._calls.append((name, kwargs, len(result)))
            return result

        return call


class RecordingStore:
    """A store whose transactions are `Recorded`."""

    def __init__(self, inner: Store) -> None:
        self.inner = inner
        self.calls: list[tuple[str, dict[str, Any], int]] = []

    async def migrate(self) -> None:
        await self.inner.migrate()

    def transaction(self) -> AbstractAsyncContextManager[Transaction]:
        @asynccontextmanager
        async def opened() -> AsyncIterator[Transaction]:
            async with self.inner.transaction() as tx:
                yield Recorded(tx, self.calls)  # type: ignore[misc]

        return opened()

    async def close(self) -> None:
        await self.inner.close()

    @property
    def commits(self) -> int:
        return self.inner.commits


async def _crowd(store: Store, make: Make, others: int, mine: int) -> None:
    """`others` open tickets only U5 may decide and `mine` that U2 may decide."""
    async with store.transaction() as tx:
        await tx.insert_run(make.run("crowd", requester="U5"))
        await tx.insert_run(make.run("mine", requester="U1", created_at=make.at(1)))
        for n in range(others):
            await tx.insert_ticket(
                make.ticket(
                    f"o{n:04d}",
                    "crowd",
                    target=ToolPermission(call_id=f"oc{n}", tool="refund", args={}),
                    requester="U5",
                    created_at=make.at(n),
                )
            )
        for n in range(mine):
            await tx.insert_call(make.call(f"mc{n}", "mine", seq=n))
            await tx.insert_ticket(
                make.ticket(
                    f"m{n:04d}",
                    "mine",
                    target=ToolPermission(call_id=f"mc{n}", tool="refund", args={}),
                    approvers=("U2",),
                    created_at=make.at(n),
                )
            )


async def test_a_viewer_who_may_decide_nothing_reads_no_open_ticket(
    store: Store, make: Make
) -> None:
    await _crowd(store, make, others=400, mine=0)
    recording = RecordingStore(store)
    runtime = Runtime(recording)
    stranger = Actor(id="U8")

    assert await runtime.open_tickets(limit=20, viewer=stranger) == []
    assert await runtime.list_runs(limit=20, viewer=stranger) == []
    assert [name for name, _, _ in recording.calls] == ["decidable_tickets", "list_runs"]
    assert all(rows == 0 for _, _, rows in recording.calls)
    assert all(kwargs["limit"] <= 21 for _, kwargs, _ in recording.calls)


async def test_a_page_reads_at_most_a_page_past_the_open_tickets_of_others(
    store: Store, make: Make
) -> None:
    await _crowd(store, make, others=300, mine=30)
    recording = RecordingStore(store)
    runtime = Runtime(recording)

    page = await runtime.ticket_page(10, viewer=Actor(id="U2"))
    assert [e.ticket.ticket_id for e in page.items] == [f"m{n:04d}" for n in range(10)]
    assert page.next_cursor is not None
    [(name, kwargs, rows)] = recording.calls
    assert name == "decidable_tickets" and kwargs["limit"] == 11 and rows == 11

    runs = await runtime.run_page(limit=10, viewer=Actor(id="U2"))
    assert [r.run_id for r in runs.items] == ["mine"] and runs.next_cursor is None
    assert recording.calls[-1][0] == "list_runs" and recording.calls[-1][1]["limit"] == 11
