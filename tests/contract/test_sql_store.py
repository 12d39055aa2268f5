"""What only the SQL store promises: several engines on one database, SQLite tuning,
error translation and exact time conversion."""

from __future__ import annotations

import asyncio
import json
import re
import threading
from dataclasses import replace
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

import aiosqlite
import pytest
from hypothesis import given
from hypothesis import strategies as st
from sqlalchemy import text

from runtime.domain.errors import StorageError
from runtime.domain.states import TicketStatus
from runtime.domain.tickets import Allow, Deny, ToolPermission
from runtime.store.sql import RECENT_MESSAGES, SQLStore, from_micros, to_micros

if TYPE_CHECKING:
    from conftest import Make


async def test_two_stores_racing_close_ticket_decide_once(sql_url: str, make: Make) -> None:
    # Two engines on one database, like two processes or replicas.
    first = SQLStore.from_url(sql_url, busy_timeout_ms=5000)
    second = SQLStore.from_url(sql_url, busy_timeout_ms=5000)
    tickets = [f"t{n}" for n in range(10)]
    try:
        async with first.transaction() as tx:
            await tx.insert_run(make.run())
            for n, ticket_id in enumerate(tickets):
                target = ToolPermission(call_id=f"call_{n}", tool="refund", args={})
                await tx.insert_ticket(make.ticket(ticket_id, target=target))

        async def decide(store: SQLStore, ticket_id: str, who: str) -> bool:
            async with store.transaction() as tx:
                ticket = await tx.get_ticket(ticket_id)
                assert ticket is not None
                return await tx.close_ticket(
                    ticket_id,
                    status=TicketStatus.DECIDED,
                    at=make.at(1),
                    decision=Allow() if who == "first" else Deny(reason=who),
                    decided_by=who,
                )

        for ticket_id in tickets:
            won = await asyncio.gather(
                decide(first, ticket_id, "first"), decide(second, ticket_id, "second")
            )
            assert sorted(won) == [False, True], ticket_id
            async with second.transaction() as tx:
                stored = await tx.get_ticket(ticket_id)
            assert stored is not None
            assert stored.decided_by == ("first" if won[0] else "second")
        assert first.commits + second.commits == 1 + len(tickets)
    finally:
        await first.close()
        await second.close()


async def test_two_stores_racing_claim_run_claim_once(sql_url: str, make: Make) -> None:
    stores = [SQLStore.from_url(sql_url, busy_timeout_ms=5000) for _ in range(3)]
    try:
        async with stores[0].transaction() as tx:
            await tx.insert_run(make.run())

        async def claim(store: SQLStore, owner: str) -> int | None:
            async with store.transaction() as tx:
                claimed = await tx.claim_run("run_1", owner=owner, now=make.t0, until=make.at(30))
            return None if claimed is None else claimed.fence

        fences = await asyncio.gather(*(claim(s, f"w{n}") for n, s in enumerate(stores)))
        assert sorted(fences, key=lambda f: f or 0) == [None, None, 1]
    finally:
        for store in stores:
            await store.close()


async def test_two_stores_racing_open_tickets_for_one_call(sql_url: str, make: Make) -> None:
    first = SQLStore.from_url(sql_url, busy_timeout_ms=5000)
    second = SQLStore.from_url(sql_url, busy_timeout_ms=5000)
    try:
        async with first.transaction() as tx:
            await tx.insert_run(make.run())

        async def open_ticket(store: SQLStore, ticket_id: str) -> bool:
            try:
                async with store.transaction() as tx:
                    await tx.insert_ticket(make.ticket(ticket_id))
            except ValueError:
                return False
            return True

        opened = await asyncio.gather(open_ticket(first, "a"), open_ticket(second, "b"))
        assert sorted(opened) == [False, True]
    finally:
        await first.close()
        await second.close()


@pytest.mark.parametrize(("synchronous", "level"), [("full", 2), ("normal", 1)])
async def test_sqlite_connections_are_tuned(tmp_path: Path, synchronous: str, level: int) -> None:
    store = SQLStore.sqlite(tmp_path / "t.db", busy_timeout_ms=1234, synchronous=synchronous)
    try:
        async with store.engine.connect() as conn:
            pragma = lambda name: conn.exec_driver_sql(f"PRAGMA {name}")  # noqa: E731
            assert (await pragma("journal_mode")).scalar() == "wal"
            assert (await pragma("busy_timeout")).scalar() == 1234
            assert (await pragma("synchronous")).scalar() == level
            assert (await pragma("foreign_keys")).scalar() == 1
    finally:
        await store.close()


@pytest.mark.parametrize("via", ["store", "engine"])
async def test_sqlite_transactions_take_the_write_lock_at_begin(tmp_path: Path, via: str) -> None:
    path = tmp_path / "t.db"
    holder = SQLStore.sqlite(path)
    patient = SQLStore.sqlite(path, busy_timeout_ms=5000)
    hasty = SQLStore.sqlite(path, busy_timeout_ms=20)
    try:
        await holder.migrate()
        begun = asyncio.Event()
        release = asyncio.Event()

        async def hold() -> None:
            # Reads only, yet BEGIN IMMEDIATE holds the write lock until the end.
            if via == "store":
                async with holder.transaction() as tx:
                    await tx.count_runs()
                    begun.set()
                    await release.wait()
            else:
                async with holder.engine.begin() as conn:
                    await conn.execute(text("SELECT count(*) FROM runs"))
                    begun.set()
                    await release.wait()

        holding = asyncio.create_task(hold())
        await begun.wait()
        with pytest.raises(StorageError, match="locked"):
            async with hasty.transaction() as tx:
                await tx.count_runs()

        async def wait_then_read() -> dict[str, int]:
            async with patient.transaction() as tx:
                return await tx.count_runs()

        waiting = asyncio.create_task(wait_then_read())
        await asyncio.sleep(0.1)
        assert not waiting.done()
        release.set()
        assert await waiting == {}
        await holding
    finally:
        for store in (holder, patient, hasty):
            await store.close()


async def test_cancelled_while_waiting_for_the_lock_leaves_the_store_usable(
    tmp_path: Path, make: Make
) -> None:
    path = tmp_path / "t.db"
    holder = SQLStore.sqlite(path)
    waiter = SQLStore.sqlite(path, busy_timeout_ms=5000)
    try:
        await holder.migrate()
        begun = asyncio.Event()
        release = asyncio.Event()

        async def hold() -> None:
            async with holder.transaction() as tx:
                await tx.insert_run(make.run("held"))
                begun.set()
                await release.wait()

        holding = asyncio.create_task(hold())
        await begun.wait()

        async def write() -> None:
            async with waiter.transaction() as tx:
                await tx.insert_run(make.run("never"))

        writing = asyncio.create_task(write())
        await asyncio.sleep(0.1)
        writing.cancel()
        release.set()
        await holding
        with pytest.raises(asyncio.CancelledError):
            await writing
        async with waiter.transaction() as tx:
            await tx.insert_run(make.run("after"))
        async with holder.transaction() as tx:
            assert await tx.count_runs() == {"queued": 2}
            assert await tx.get_run("never") is None
    finally:
        await holder.close()
        await waiter.close()


async def test_one_process_queues_its_own_transactions(tmp_path: Path, make: Make) -> None:
    # A tiny busy timeout: only the in-process lock keeps these from failing.
    store = SQLStore.sqlite(tmp_path / "t.db", busy_timeout_ms=1)
    try:
        await store.migrate()

        async def write(n: int) -> None:
            async with store.transaction() as tx:
                await tx.insert_run(make.run(f"run_{n}"))
                await asyncio.sleep(0.005)
                await tx.append_event(make.event(f"run_{n}"))

        await asyncio.gather(*(write(n) for n in range(20)))
        async with store.transaction() as tx:
            assert await tx.count_runs() == {"queued": 20}
    finally:
        await store.close()


async def test_sqlite_statements_run_without_thread_round_trips(
    tmp_path: Path, make: Make, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = SQLStore.sqlite(tmp_path / "t.db")
    try:
        await store.migrate()
        writer = store.writer
        assert writer is not None
        hops: list[str] = []
        original = writer._submit

        def counting(fn: Any, *args: Any) -> Any:
            hops.append(getattr(fn, "__name__", "?"))
            return original(fn, *args)

        monkeypatch.setattr(writer, "_submit", counting)
        # Transactions one after another: each commit is made durable before the next
        # begins; the process is not busy with anything else, so it commits itself.
        for n in range(3):
            async with store.transaction() as tx:
                await tx.insert_run(make.run(f"run_{n}"))
                await tx.get_run(f"run_{n}")
                await tx.set_run_flags(f"run_{n}", pause=True)
        assert writer.syncs == 3
        assert hops == ["_commit"]  # the first; the task's next ones commit here
        hops.clear()

        # Several tasks at once: the statements still run here, the shared commits go to
        # the worker thread, one hop each.
        async def write(n: int) -> None:
            async with store.transaction() as tx:
                await tx.insert_run(make.run(f"more_{n}"))

        await asyncio.gather(*(write(n) for n in range(10)))
        assert hops == ["_commit"] * (writer.syncs - 3)
        assert 1 <= len(hops) < 10
        assert writer.commits == 13
        # Reading, and failing, make nothing durable.
        before = writer.syncs
        async with store.transaction() as tx:
            stored = await tx.get_run("run_1")
        with pytest.raises(ValueError):
            async with store.transaction() as tx:
                await tx.insert_run(make.run("run_1"))
        assert writer.syncs == before
        assert stored is not None and stored.pause_requested
    finally:
        await store.close()


async def test_transactions_one_after_another_let_other_tasks_run(
    tmp_path: Path, make: Make
) -> None:
    # A task writing transaction after transaction (the worker applying stored clicks)
    # must not starve the event loop: a request waiting to be answered meanwhile gets a
    # turn between every two of its commits, not only once it is done.
    store = SQLStore.sqlite(tmp_path / "t.db")
    try:
        await store.migrate()
        committed = 0
        seen: list[int] = []
        finished = asyncio.Event()

        async def write_many() -> None:
            nonlocal committed
            for n in range(40):
                async with store.transaction() as tx:
                    await tx.insert_run(make.run(f"run_{n}"))
                committed += 1
            finished.set()

        async def other_work() -> None:
            while not finished.is_set():
                seen.append(committed)
                await asyncio.sleep(0)

        await asyncio.gather(write_many(), other_work())
        # The other task saw (nearly) every intermediate count.
        assert len(set(seen)) >= 35, sorted(set(seen))
        assert store.writer is not None and store.writer.syncs == 40
    finally:
        await store.close()


async def test_a_transaction_cancelled_while_it_lets_others_run_still_commits(
    tmp_path: Path, make: Make
) -> None:
    store = SQLStore.sqlite(tmp_path / "t.db")
    try:
        await store.migrate()
        async with store.transaction() as tx:  # the connection is open from here on
            await tx.insert_run(make.run("warm"))
        wrote = asyncio.Event()

        async def write() -> None:
            async with store.transaction() as tx:
                await tx.insert_run(make.run("run_1"))
                wrote.set()

        task = asyncio.create_task(write())
        await wrote.wait()
        # The task is now between its writes and its commit, yielding the loop once.
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        # Its work was committed before the cancellation surfaced, and the store works.
        async with store.transaction() as tx:
            assert await tx.get_run("run_1") is not None
            await tx.insert_run(make.run("run_2"))
        async with store.transaction() as tx:
            assert await tx.count_runs() == {"queued": 3}
    finally:
        await store.close()


async def test_a_runs_row_keeps_only_its_newest_transcript_entries(
    sql_url: str, make: Make
) -> None:
    # Each write of a run writes at most RECENT_MESSAGES entries, whatever the length of
    # its transcript; the others are written once each, in rows of their own.
    store = SQLStore.from_url(sql_url)
    try:
        run = make.run(messages=[{"role": "user", "content": "go"}])
        async with store.transaction() as tx:
            await tx.insert_run(run)
        for n in range(40):
            run.messages.append({"role": "tool", "tool_call_id": f"c{n}", "content": "x" * n})
            async with store.transaction() as tx:
                await tx.update_run(run)
            async with store.engine.connect() as conn:
                sealed, recent = (
                    await conn.execute(text("SELECT sealed_messages, recent_messages FROM runs"))
                ).one()
                rows = (await conn.execute(text("SELECT count(*) FROM run_messages"))).scalar()
            recent = json.loads(recent) if isinstance(recent, str) else recent
            assert len(recent) <= RECENT_MESSAGES
            assert rows == sealed == run.messages_sealed
            assert sealed + len(recent) == len(run.messages) == n + 2
        assert run.messages_sealed > 2 * RECENT_MESSAGES
        async with store.transaction() as tx:
            assert await tx.get_run("run_1") == run
    finally:
        await store.close()


async def test_a_transcript_that_lost_entries_is_refused(sql_url: str, make: Make) -> None:
    store = SQLStore.from_url(sql_url)
    try:
        whole = [{"role": "user", "content": f"m{n}"} for n in range(20)]
        run = make.run(messages=list(whole))
        async with store.transaction() as tx:
            await tx.insert_run(run)
        del run.messages[5:]
        with pytest.raises(ValueError, match="only grows"):
            async with store.transaction() as tx:
                await tx.update_run(replace(run, turns=9))
        async with store.transaction() as tx:
            stored = await tx.get_run("run_1")
        assert stored is not None and stored.messages == whole and stored.turns == 0
    finally:
        await store.close()


async def test_foreign_keys_are_enforced(tmp_path: Path, make: Make) -> None:
    store = SQLStore.sqlite(tmp_path / "t.db")
    try:
        await store.migrate()
        with pytest.raises(ValueError, match="constraint"):
            async with store.transaction() as tx:
                await tx.insert_call(make.call(run_id="ghost"))
    finally:
        await store.close()


async def test_naive_datetimes_are_refused(tmp_path: Path, make: Make) -> None:
    store = SQLStore.sqlite(tmp_path / "t.db")
    try:
        await store.migrate()
        with pytest.raises(ValueError, match="timezone-aware"):
            async with store.transaction() as tx:
                await tx.insert_run(make.run(created_at=datetime(2026, 1, 1)))
    finally:
        await store.close()


async def test_values_json_cannot_encode_are_refused(tmp_path: Path, make: Make) -> None:
    store = SQLStore.sqlite(tmp_path / "t.db")
    try:
        await store.migrate()
        with pytest.raises(ValueError, match="JSON serializable"):
            async with store.transaction() as tx:
                await tx.insert_run(make.run(origin={"handle": object()}))
        async with store.transaction() as tx:
            assert await tx.count_runs() == {}
    finally:
        await store.close()


async def test_unmigrated_database_raises_storage_error(tmp_path: Path) -> None:
    store = SQLStore.sqlite(tmp_path / "t.db")
    try:
        with pytest.raises(StorageError, match="no such table") as caught:
            async with store.transaction() as tx:
                await tx.get_run("run_1")
        assert caught.value.__cause__ is not None
    finally:
        await store.close()


def _aiosqlite_threads() -> list[threading.Thread]:
    return [
        t
        for t in threading.enumerate()
        if getattr(t, "_target", None) is aiosqlite.core._connection_worker_thread
    ]


async def test_unopenable_database_raises_storage_error_naming_it(tmp_path: Path) -> None:
    # A directory where the file should be: SQLite cannot open it.
    store = SQLStore.sqlite(tmp_path)
    earlier = set(_aiosqlite_threads())  # other tests' stores, closing or closed
    try:
        with pytest.raises(StorageError, match=f"SQLite database {tmp_path}"):
            async with store.transaction():
                pass
        # aiosqlite's thread of the failed connection has ended before the error
        # surfaced: it must not outlive the event loop it reports to.
        assert set(_aiosqlite_threads()) - earlier == set()
        failed = f"migrating the SQLite database {tmp_path} failed: unable to open database file"
        with pytest.raises(StorageError, match=re.escape(failed)):
            await store.migrate()
        assert set(_aiosqlite_threads()) - earlier == set()
    finally:
        await store.close()


def test_sqlite_file_in_a_missing_directory_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="does not exist"):
        SQLStore.sqlite(tmp_path / "missing" / "t.db")


async def test_in_memory_sqlite(make: Make) -> None:
    store = SQLStore.from_url("sqlite://")
    try:
        await store.migrate()
        async with store.transaction() as tx:
            await tx.insert_run(make.run())
        async with store.transaction() as tx:
            assert await tx.get_run("run_1") == make.run()
        assert store.engine.dialect.driver == "aiosqlite"
    finally:
        await store.close()


def test_from_url_checks_sqlite_options(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="synchronous"):
        SQLStore.sqlite(tmp_path / "t.db", synchronous="off")
    with pytest.raises(ValueError, match="busy_timeout"):
        SQLStore.sqlite(tmp_path / "t.db", busy_timeout_ms=-1)


async def test_lease_lost_keeps_its_type_through_the_store(tmp_path: Path, make: Make) -> None:
    from runtime.domain.errors import LeaseLost

    store = SQLStore.sqlite(tmp_path / "t.db")
    try:
        await store.migrate()
        async with store.transaction() as tx:
            await tx.insert_run(make.run())
        with pytest.raises(LeaseLost):
            async with store.transaction() as tx:
                await tx.update_run(replace(make.run(), turns=1), fence=5)
    finally:
        await store.close()


async def test_sqlite_file_survives_reopening(tmp_path: Path, make: Make) -> None:
    path = tmp_path / "t.db"
    store = SQLStore.sqlite(path)
    await store.migrate()
    async with store.transaction() as tx:
        await tx.insert_run(make.run())
    await store.close()
    reopened = SQLStore.sqlite(path)
    try:
        assert await reopened.migrations_current()
        async with reopened.transaction() as tx:
            assert await tx.get_run("run_1") == make.run()
        async with reopened.engine.connect() as conn:
            assert (await conn.execute(text("SELECT count(*) FROM events"))).scalar() == 0
    finally:
        await reopened.close()


_offsets = st.builds(
    timezone, st.timedeltas(min_value=timedelta(hours=-23), max_value=timedelta(hours=23))
)


@given(
    st.datetimes(
        min_value=datetime(1900, 1, 1),
        max_value=datetime(9000, 1, 1),
        timezones=st.one_of(st.just(UTC), _offsets),
    )
)
def test_micros_round_trip_exactly(value: datetime) -> None:
    back = from_micros(to_micros(value))
    assert back == value
    assert back.tzinfo is UTC


@given(st.integers(min_value=-(2**55), max_value=2**55))
def test_micros_preserve_order(micros: int) -> None:
    assert to_micros(from_micros(micros)) == micros
    assert from_micros(micros) < from_micros(micros + 1)
