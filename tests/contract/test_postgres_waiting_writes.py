"""PostgreSQL: writes whose outcome the store does not read wait for the next statement.

What only this shows: a transaction whose writes all waited is one statement without
``BEGIN``; a waiting write goes with the next statement that must reach the server, or
first when that statement touches its table; a constraint it breaks fails the
transaction as a `ValueError` whichever statement carried it, and changes nothing; a
transaction that raises drops what waited; events keep their order past one
statement's worth.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import replace
from typing import TYPE_CHECKING

import asyncpg
import pytest
from pgtest import fresh_database

from runtime.domain.errors import LeaseLost, StorageError
from runtime.domain.states import CallState, RunStatus
from runtime.store.records import IdempotencyRecord
from runtime.store.sql import PoolOptions, SQLStore

if TYPE_CHECKING:
    from conftest import Make


@pytest.fixture
async def store() -> AsyncIterator[SQLStore]:
    async with fresh_database() as url:
        opened = SQLStore.from_url(url, pool=PoolOptions(size=1, max_overflow=0))
        try:
            assert opened.runs_directly
            yield opened
        finally:
            await opened.close()


async def prepared(store: SQLStore) -> list[str]:
    """The statements prepared on the store's one connection."""
    async with store.engine.connect() as conn:
        raw = (await conn.get_raw_connection()).driver_connection
        rows = await raw.fetch("SELECT statement FROM pg_prepared_statements")
    return [" ".join(row["statement"].split()) for row in rows]


async def counts(store: SQLStore) -> dict[str, int]:
    url = store.engine.url.set(drivername="postgresql").render_as_string(False)
    conn = await asyncpg.connect(url)
    try:
        return {
            table: int(await conn.fetchval(f"SELECT count(*) FROM {table}"))
            for table in ("runs", "tool_calls", "events", "outbox", "idempotency_keys")
        }
    finally:
        await conn.close()


async def test_a_transaction_whose_writes_all_wait_is_one_statement(
    store: SQLStore, make: Make
) -> None:
    async with store.transaction() as tx:
        await tx.insert_run(make.run())
        await tx.append_event(make.event())
        await tx.add_outbox(make.outbox())
        assert tx._direct is not None
        assert not tx._direct.begun
    assert tx._direct is not None and not tx._direct.begun  # no BEGIN, no COMMIT
    assert await counts(store) == {
        "runs": 1,
        "tool_calls": 0,
        "events": 1,
        "outbox": 1,
        "idempotency_keys": 0,
    }
    sent = await prepared(store)
    joined = [s for s in sent if s.startswith("WITH w0 AS (INSERT INTO runs")]
    assert len(joined) == 1
    assert "INSERT INTO events" in joined[0] and "INSERT INTO outbox" in joined[0]
    assert "pg_notify" in joined[0]  # a queued run wakes the other replicas
    assert not [s for s in sent if s.startswith(("INSERT INTO runs", "BEGIN"))]


async def test_a_read_of_another_table_leaves_the_writes_waiting(
    store: SQLStore, make: Make
) -> None:
    async with store.transaction() as tx:
        await tx.insert_run(make.run())
        assert await tx.get_ticket("tkt_none") is None  # tickets: nothing waits there
        assert tx._direct is not None and not tx._direct.begun
    assert (await counts(store))["runs"] == 1


async def test_a_read_of_a_waiting_write_s_table_sees_it(store: SQLStore, make: Make) -> None:
    async with store.transaction() as tx:
        await tx.insert_run(make.run())
        await tx.add_outbox(make.outbox())
        found = await tx.outbox_for_run("run_1")
        assert [item.outbox_id for item in found] == ["ob_1"]
        assert tx._direct is not None and tx._direct.begun
        fetched = await tx.get_run("run_1")
        assert fetched is not None and fetched.input == "refund order 42"
    assert (await counts(store))["outbox"] == 1


async def test_a_broken_constraint_of_the_last_statement_changes_nothing(
    store: SQLStore, make: Make
) -> None:
    async with store.transaction() as tx:
        await tx.insert_run(make.run())
        await tx.insert_call(make.call())
    before = await counts(store)
    with pytest.raises(ValueError, match="constraint violated"):
        async with store.transaction() as tx:
            await tx.append_event(make.event())
            await tx.add_outbox(make.outbox())
            await tx.insert_call(make.call())  # the same call id again
    assert await counts(store) == before
    async with store.transaction() as tx:  # the connection is fit for the next one
        assert await tx.get_call("call_1") is not None


async def test_a_broken_constraint_joined_to_another_statement_is_a_value_error(
    store: SQLStore, make: Make
) -> None:
    async with store.transaction() as tx:
        await tx.insert_run(make.run())
        await tx.add_outbox(make.outbox())
    before = await counts(store)
    key = IdempotencyRecord("hook:refunds", "k-1", "sha-1", "run_1", make.t0)
    # The insert of the key refuses its own duplicates as DuplicateKey; the outbox row
    # that waited and went with it is the one refused here.
    with pytest.raises(ValueError, match="constraint violated") as refused:
        async with store.transaction() as tx:
            await tx.add_outbox(make.outbox())
            await tx.insert_idempotency(key)
    assert type(refused.value) is ValueError
    assert await counts(store) == before


async def test_an_update_of_a_missing_row_fails_what_went_with_it(
    store: SQLStore, make: Make
) -> None:
    async with store.transaction() as tx:
        await tx.insert_run(make.run())
    before = await counts(store)
    with pytest.raises(ValueError, match="call call_9 does not exist"):
        async with store.transaction() as tx:
            await tx.append_event(make.event())
            await tx.add_outbox(make.outbox())
            await tx.update_call(make.call("call_9"))  # never inserted
    assert await counts(store) == before  # the event and the outbox row rolled back too


async def test_an_update_that_must_change_a_row_waits_behind_other_statements(
    store: SQLStore, make: Make
) -> None:
    async with store.transaction() as tx:
        await tx.insert_run(make.run(status=RunStatus.RUNNING))
        await tx.insert_call(make.call())
    call = make.call(state=CallState.DISPATCHED, attempts=1)
    async with store.transaction() as tx:
        await tx.update_call(call)
        run = await tx.get_run("run_1")  # runs: another table, read at once
        assert run is not None
        await tx.update_run(run)
        await tx.append_event(make.event(kind="tool_dispatched"))
    sent = await prepared(store)
    assert any(s.startswith("WITH w0 AS (UPDATE tool_calls") and "count(*)" in s for s in sent)
    async with store.transaction() as tx:
        stored = await tx.get_call("call_1")
    assert stored is not None and stored.state is CallState.DISPATCHED


async def running_with_call(store: SQLStore, make: Make) -> None:
    """A running run at fence 3 with one proposed tool call."""
    async with store.transaction() as tx:
        await tx.insert_run(make.run(status=RunStatus.RUNNING, fence=3))
        await tx.insert_call(make.call())


async def test_a_fenced_run_update_carries_the_writes_that_must_change_a_row(
    store: SQLStore, make: Make
) -> None:
    await running_with_call(store, make)
    async with store.transaction() as tx:
        run = await tx.get_run("run_1")
        assert run is not None
        await tx.update_call(make.call(state=CallState.DISPATCHED, attempts=1))
        await tx.append_event(make.event(kind="tool_dispatched"))
        flags = await tx.update_run(replace(run, turns=2), fence=3)
        assert not flags.pause_requested
    sent = await prepared(store)
    carried = [s for s in sent if s.startswith("WITH w0 AS (UPDATE tool_calls")]
    assert any("INSERT INTO events" in s and "UPDATE runs" in s for s in carried)
    async with store.transaction() as tx:
        stored, call = await tx.get_run("run_1"), await tx.get_call("call_1")
        found = await tx.events("run_1")
    assert stored is not None and stored.turns == 2
    assert call is not None and call.state is CallState.DISPATCHED
    assert [event.kind for event in found] == ["tool_dispatched"]


async def test_what_went_with_a_fenced_run_update_that_failed_changes_nothing(
    store: SQLStore, make: Make
) -> None:
    await running_with_call(store, make)
    before = await counts(store)
    run = make.run(status=RunStatus.RUNNING, fence=3, turns=7)
    with pytest.raises(LeaseLost):
        async with store.transaction() as tx:
            await tx.update_call(make.call(state=CallState.DISPATCHED))
            await tx.append_event(make.event(kind="tool_dispatched"))
            await tx.update_run(run, fence=2)  # the lease moved on
    with pytest.raises(ValueError, match="call call_9 does not exist"):
        async with store.transaction() as tx:
            await tx.update_call(make.call("call_9"))  # never inserted
            await tx.append_event(make.event(kind="tool_dispatched"))
            await tx.update_run(run, fence=3)
    # A caller that goes on past the failed update cannot commit what went with it: the
    # counts of its writes that must change a row came back with no row.
    with pytest.raises(StorageError, match="not checked"):
        async with store.transaction() as tx:
            await tx.update_call(make.call("call_9"))
            with pytest.raises(LeaseLost):
                await tx.update_run(run, fence=2)
    assert await counts(store) == before
    async with store.transaction() as tx:
        stored, call = await tx.get_run("run_1"), await tx.get_call("call_1")
    assert stored is not None and stored.turns != 7
    assert call is not None and call.state is CallState.PROPOSED


async def test_a_call_updated_while_its_insert_waits_is_inserted_as_updated(
    store: SQLStore, make: Make
) -> None:
    async with store.transaction() as tx:
        await tx.insert_run(make.run())
    proposed = make.call(args={"order": 42, "amount": 12.5})
    # What it was proposed with stays as inserted, whatever the record says later.
    later = make.call(
        state=CallState.AWAITING_DECISION,
        args={"order": 42, "amount": 10},
        tool="other",
        execution_key="key_other",
    )
    async with store.transaction() as tx:
        await tx.insert_call(proposed)
        # A ticket for a call of this transaction's own looks for no other open one.
        await tx.insert_ticket(make.ticket())
        await tx.update_call(later)
        assert tx._direct is not None and not tx._direct.begun  # nothing sent yet
    sent = await prepared(store)
    assert not any(s.startswith("UPDATE tool_calls") or "(UPDATE tool_calls" in s for s in sent)
    async with store.transaction() as tx:
        stored = await tx.get_call("call_1")
    assert stored is not None
    assert stored.state is CallState.AWAITING_DECISION
    assert stored.args == {"order": 42, "amount": 10}
    assert (stored.tool, stored.execution_key) == ("refund", "key_call_1")


async def test_a_call_updated_after_its_insert_went_is_updated(store: SQLStore, make: Make) -> None:
    async with store.transaction() as tx:
        await tx.insert_run(make.run())
    async with store.transaction() as tx:
        await tx.insert_call(make.call())
        assert [c.call_id for c in await tx.calls_for_run("run_1")] == ["call_1"]  # sent
        await tx.update_call(make.call(state=CallState.DISPATCHED, attempts=1))
        await tx.update_call(make.call(state=CallState.COMPLETED, attempts=1, result="ok"))
    sent = await prepared(store)
    assert any(s.startswith("WITH w0 AS (UPDATE tool_calls") for s in sent)
    async with store.transaction() as tx:
        stored = await tx.get_call("call_1")
    assert stored is not None and stored.state is CallState.COMPLETED
    assert stored.result == "ok"


async def test_a_transaction_that_raises_drops_what_waited(store: SQLStore, make: Make) -> None:
    with pytest.raises(RuntimeError, match="changed my mind"):
        async with store.transaction() as tx:
            await tx.insert_run(make.run())
            await tx.add_outbox(make.outbox())
            raise RuntimeError("changed my mind")
    assert await counts(store) == dict.fromkeys(
        ("runs", "tool_calls", "events", "outbox", "idempotency_keys"), 0
    )
    async with store.transaction() as tx:
        await tx.insert_run(make.run())
    assert (await counts(store))["runs"] == 1


async def test_events_keep_their_order_past_one_statement(store: SQLStore, make: Make) -> None:
    async with store.transaction() as tx:
        await tx.insert_run(make.run())
        for number in range(75):  # more than one multi-row INSERT holds
            await tx.append_event(make.event(kind=f"step_{number}"))
    async with store.transaction() as tx:
        found = await tx.events("run_1")
    assert [event.kind for event in found] == [f"step_{n}" for n in range(75)]
    assert [event.seq for event in found] == sorted(event.seq for event in found)


async def test_a_store_behind_a_pooler_writes_at_once(make: Make) -> None:
    async with fresh_database() as url:
        pooled = SQLStore.from_url(url, pooler="transaction", listen_url=url)
        try:
            assert not pooled.runs_directly
            async with pooled.transaction() as tx:
                assert tx._direct is None
                await tx.insert_run(make.run())
                assert tx.wrote
                assert await tx.get_run("run_1") is not None
        finally:
            await pooled.close()
