"""A run's trace context: kept as inserted, never changed by a save, through every store,
and a run written before migration 0013 reads with none."""

from __future__ import annotations

from typing import TYPE_CHECKING

from alembic import command
from sqlalchemy import Connection, text

from runtime.domain.states import RunStatus
from runtime.store.base import Store
from runtime.store.sql import SQLStore, alembic_config

if TYPE_CHECKING:
    from conftest import Make

CONTEXT = {
    "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
    "tracestate": "vendor=opaque",
}


async def test_a_runs_trace_context_round_trips_and_survives_saves(
    store: Store, make: Make
) -> None:
    async with store.transaction() as tx:
        await tx.insert_run(make.run("run_1", trace_context=CONTEXT))
        await tx.insert_run(make.run("run_2", trace_context=None))
    async with store.transaction() as tx:
        run = await tx.get_run("run_1", for_update=True)
        assert run is not None and run.trace_context == CONTEXT
        # A save never changes what the run was started in.
        run.trace_context = {"traceparent": "00-" + "1" * 32 + "-" + "2" * 16 + "-01"}
        run.status = RunStatus.RUNNING
        await tx.update_run(run)
    async with store.transaction() as tx:
        saved = await tx.get_run("run_1")
        untraced = await tx.get_run("run_2")
    assert saved is not None and saved.status is RunStatus.RUNNING
    assert saved.trace_context == CONTEXT
    assert untraced is not None and untraced.trace_context is None


def _to(conn: Connection, revision: str) -> None:
    config = alembic_config()
    config.attributes["connection"] = conn
    command.upgrade(config, revision)


async def test_runs_written_before_0013_read_without_a_trace_context(
    empty_sql_url: str, make: Make
) -> None:
    store = SQLStore.from_url(empty_sql_url)
    try:
        async with store.engine.begin() as conn:
            await conn.run_sync(_to, "0012")
            await conn.execute(
                text(
                    "INSERT INTO runs (run_id, thread_id, agent, agent_version, status, input, "
                    "requester, created_at, updated_at, origin, recent_messages, turns, "
                    "prompt_tokens, completion_tokens, usage_incomplete, model_attempt, "
                    "model_in_flight, batch, pause_requested, cancel_requested, fence) VALUES ("
                    "'run_old', 'th', 'refunds', 'v1', 'queued', 'hi', 'U1', 1, 1, '{}', "
                    "'[]', 0, 0, 0, false, 0, false, 0, false, false, 0)"
                )
            )
        await store.migrate()
        async with store.transaction() as tx:
            old = await tx.get_run("run_old")
            await tx.insert_run(make.run("run_new", trace_context=CONTEXT))
        assert old is not None and old.trace_context is None
        async with store.transaction() as tx:
            new = await tx.get_run("run_new")
        assert new is not None and new.trace_context == CONTEXT
    finally:
        await store.close()
