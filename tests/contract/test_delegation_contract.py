"""The store contract for delegation: child runs by parent and task key, on every store;
and migration 0006 keeps the rows written before it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest
from alembic import command
from sqlalchemy import Connection, text

from runtime.domain.states import RunStatus, TicketStatus
from runtime.domain.tickets import Child, ChildFinished
from runtime.store.base import DuplicateKey, Store
from runtime.store.records import RunRecord
from runtime.store.sql import SQLStore, alembic_config

if TYPE_CHECKING:
    from conftest import Make


def _child(make: Make, run_id: str, key: str, seconds: float, **changes: Any) -> RunRecord:
    values: dict[str, Any] = {
        "parent_run_id": "run_1",
        "parent_call_id": f"call_{key}",
        "task_key": key,
        "depth": 1,
        "lineage": [{"run_id": "run_1", "agent": "refunds"}],
        "agent": "billing",
        "created_at": make.at(seconds),
        "updated_at": make.at(seconds),
    }
    values.update(changes)
    return make.run(run_id, **values)


async def test_child_runs_round_trip_and_are_found_by_task_key(store: Store, make: Make) -> None:
    first = _child(make, "run_2", "refund-A1", 1)
    second = _child(make, "run_3", "refund-B2", 2, status=RunStatus.AWAITING)
    grandchild = _child(
        make,
        "run_4",
        "inner",
        3,
        parent_run_id="run_2",
        depth=2,
        lineage=[
            {"run_id": "run_1", "agent": "refunds"},
            {"run_id": "run_2", "agent": "billing"},
        ],
    )
    async with store.transaction() as tx:
        await tx.insert_run(make.run())
        await tx.insert_run(second)
        await tx.insert_run(first)
        await tx.insert_run(grandchild)
    async with store.transaction() as tx:
        assert await tx.child_run("run_1", "refund-A1") == first
        assert await tx.child_run("run_1", "refund-B2") == second
        assert await tx.child_run("run_1", "inner") is None
        assert await tx.child_run("run_2", "inner") == grandchild
        assert await tx.child_run("nope", "refund-A1") is None
        assert [r.run_id for r in await tx.child_runs("run_1")] == ["run_2", "run_3"]
        assert await tx.child_runs("run_4") == []
        top = await tx.get_run("run_1")
    assert top is not None
    assert (top.parent_run_id, top.task_key, top.depth, top.lineage) == (None, None, 0, [])


async def test_a_second_child_for_one_task_key_is_refused(store: Store, make: Make) -> None:
    async with store.transaction() as tx:
        await tx.insert_run(make.run())
        await tx.insert_run(_child(make, "run_2", "k", 1))
    with pytest.raises(DuplicateKey):
        async with store.transaction() as tx:
            await tx.insert_run(_child(make, "run_3", "k", 2))
    async with store.transaction() as tx:
        assert [r.run_id for r in await tx.child_runs("run_1")] == ["run_2"]
        assert await tx.get_run("run_3") is None
        # The same key under another parent is another task.
        await tx.insert_run(_child(make, "run_5", "k", 3, parent_run_id="run_2"))


async def test_child_tickets_keep_their_target_chain_and_answer(store: Store, make: Make) -> None:
    target = Child(call_id="call_1", child_run_id="run_2", task_key="k", agent="billing")
    async with store.transaction() as tx:
        await tx.insert_run(make.run())
        await tx.insert_ticket(make.ticket(target=target, chain=("ops", "refunds")))
    answer = ChildFinished(status="failed", error="no money")
    async with store.transaction() as tx:
        stored = await tx.get_ticket("tkt_1")
        assert stored is not None
        assert stored.target == target
        assert stored.chain == ("ops", "refunds")
        assert await tx.close_ticket(
            "tkt_1", status=TicketStatus.DECIDED, at=make.at(2), decision=answer
        )
    async with store.transaction() as tx:
        closed = await tx.get_ticket("tkt_1")
    assert closed is not None and closed.decision == answer


def _to(conn: Connection, revision: str) -> None:
    config = alembic_config()
    config.attributes["connection"] = conn
    command.upgrade(config, revision)


async def test_migration_0006_keeps_runs_and_tickets_written_before_it(
    empty_sql_url: str, make: Make
) -> None:
    store = SQLStore.from_url(empty_sql_url)
    try:
        async with store.engine.begin() as conn:
            await conn.run_sync(_to, "0004")
            columns = "run_id, thread_id, agent, agent_version, status, input, requester"
            await conn.execute(
                text(
                    "INSERT INTO runs ("
                    + columns
                    + ", created_at, updated_at, origin, messages, turns, prompt_tokens, "
                    "completion_tokens, usage_incomplete, model_attempt, model_in_flight, "
                    "batch, pause_requested, cancel_requested, fence) VALUES ("
                    "'run_old', 'th', 'refunds', 'v1', 'queued', 'hi', 'U1', 1, 1, '{}', "
                    "'[]', 0, 0, 0, false, 0, false, 0, false, false, 0)"
                )
            )
        await store.migrate()
        async with store.transaction() as tx:
            old = await tx.get_run("run_old")
            assert old is not None
            assert (old.parent_run_id, old.task_key, old.depth, old.lineage) == (None, None, 0, [])
            assert await tx.child_runs("run_old") == []
            await tx.insert_ticket(make.ticket(run_id="run_old"))
        async with store.transaction() as tx:
            ticket = await tx.get_ticket("tkt_1")
        assert ticket is not None and ticket.chain == ()
    finally:
        await store.close()
