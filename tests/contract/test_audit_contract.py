"""The audit part of the store contract, over every store: events of every run in one
sequence order up to the horizon, finished top-level runs, and deleting pruned runs
with every row that names them. On PostgreSQL, a transaction that took a lower sequence
number and commits later is never skipped by a reader, which holds no writer up."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine

from runtime.domain.states import RunStatus
from runtime.domain.tickets import ToolPermission
from runtime.services.audit import AuditLog
from runtime.store.base import Store
from runtime.store.records import GrantRecord
from runtime.store.sql import SQLStore

if TYPE_CHECKING:
    from conftest import Make


def grant(make: Make, grant_id: str, run_id: str) -> GrantRecord:
    return GrantRecord(
        grant_id=grant_id,
        agent="refunds",
        agent_version="v1",
        catalog_fingerprint="fp1",
        tool="refund",
        scope="run",
        run_id=run_id,
        thread_id="thread_1",
        requester="U1",
        constraint=None,
        granted_by="U2",
        granted_by_name=None,
        platform="slack",
        ticket_id=None,
        created_at=make.at(0),
        expires_at=make.at(60),
    )


async def test_events_of_every_run_in_sequence_order_up_to_the_horizon(
    store: Store, make: Make
) -> None:
    async with store.transaction() as tx:
        await tx.insert_run(make.run("run_1"))
        await tx.insert_run(make.run("run_2", agent="deploys"))
        assert await tx.audit_horizon() == 0
        await tx.append_event(make.event("run_1", kind="a", at=make.at(1)))
        await tx.append_event(make.event("run_2", kind="b", at=make.at(2)))
        await tx.append_event(make.event("run_1", kind="c", at=make.at(3)))
    async with store.transaction() as tx:
        await tx.append_event(make.event("run_2", kind="d", at=make.at(4)))
    async with store.transaction() as tx:
        horizon = await tx.audit_horizon()
    async with store.transaction() as tx:
        every = await tx.audit_events(after=0, upto=horizon, limit=100)
        seqs = [item.event.seq for item in every]
        assert seqs == sorted(seqs) and len(set(seqs)) == 4 and seqs[-1] == horizon
        assert [(i.event.kind, i.event.run_id, i.agent) for i in every] == [
            ("a", "run_1", "refunds"),
            ("b", "run_2", "deploys"),
            ("c", "run_1", "refunds"),
            ("d", "run_2", "deploys"),
        ]
        assert every[0].event == make.event("run_1", kind="a", at=make.at(1), seq=seqs[0])
        page = await tx.audit_events(after=seqs[0], upto=horizon, limit=2)
        assert [i.event.kind for i in page] == ["b", "c"]
        assert [i.event.kind for i in await tx.audit_events(after=0, upto=seqs[1], limit=9)] == [
            "a",
            "b",
        ]
        timed = await tx.audit_events(
            after=0, upto=horizon, limit=9, since=make.at(2), until=make.at(4)
        )
        assert [i.event.kind for i in timed] == ["b", "c"]


async def test_finished_runs_are_top_level_finished_and_older_than_the_cut(
    store: Store, make: Make
) -> None:
    async with store.transaction() as tx:
        await tx.insert_run(make.run("r_a", status=RunStatus.DONE, updated_at=make.at(1)))
        await tx.insert_run(make.run("r_b", status=RunStatus.FAILED, updated_at=make.at(2)))
        await tx.insert_run(make.run("r_c", status=RunStatus.CANCELLED, updated_at=make.at(9)))
        await tx.insert_run(make.run("r_d", status=RunStatus.AWAITING, updated_at=make.at(1)))
        await tx.insert_run(
            make.run(
                "r_e",
                status=RunStatus.DONE,
                updated_at=make.at(1),
                parent_run_id="r_a",
                task_key="t",
                depth=1,
            )
        )
    async with store.transaction() as tx:
        found = await tx.finished_runs(before=make.at(5), after=None, limit=10)
        assert [r.run_id for r in found] == ["r_a", "r_b"]
        assert found[0] == make.run("r_a", status=RunStatus.DONE, updated_at=make.at(1))
        assert [
            r.run_id for r in await tx.finished_runs(before=make.at(5), after="r_a", limit=10)
        ] == ["r_b"]
        assert [
            r.run_id for r in await tx.finished_runs(before=make.at(10), after=None, limit=2)
        ] == [
            "r_a",
            "r_b",
        ]


async def test_deleting_runs_deletes_every_row_that_names_them(store: Store, make: Make) -> None:
    async with store.transaction() as tx:
        for run_id in ("run_1", "run_2"):
            messages = [{"role": "user", "content": f"m{i}"} for i in range(40)]
            await tx.insert_run(make.run(run_id, messages=messages))
            run = await tx.get_run(run_id)
            assert run is not None
            await tx.update_run(run)  # older transcript entries stored apart
            await tx.insert_call(make.call(f"call_{run_id}", run_id))
            await tx.insert_ticket(
                make.ticket(
                    f"tk_{run_id}",
                    run_id,
                    target=ToolPermission(call_id=f"call_{run_id}", tool="refund", args={}),
                    approvers=["U2", "group:ops"],
                )
            )
            await tx.append_event(make.event(run_id))
            await tx.add_outbox(make.outbox(f"ob_{run_id}", run_id))
            await tx.insert_grant(grant(make, f"gr_{run_id}", run_id))
    async with store.transaction() as tx:
        assert await tx.delete_runs(["run_1", "nope"]) == 1
        assert await tx.delete_runs([]) == 0
    async with store.transaction() as tx:
        assert await tx.get_run("run_1") is None
        assert await tx.get_call("call_run_1") is None
        assert await tx.get_ticket("tk_run_1") is None
        assert await tx.events("run_1") == []
        assert await tx.outbox_for_run("run_1") == []
        assert await tx.get_grant("gr_run_1") is None
        assert await tx.decidable_tickets(deciders=["user:U2"], viewer="U9", limit=9) != []
        assert [t.ticket_id for t in await tx.open_tickets()] == ["tk_run_2"]
        kept = await tx.get_run("run_2")
        assert kept is not None and len(kept.messages) == 40
        assert len(await tx.events("run_2")) == 1
        assert await tx.get_grant("gr_run_2") is not None
    # The run id may be used again: nothing of the old one is left behind.
    async with store.transaction() as tx:
        await tx.insert_run(make.run("run_1"))
        await tx.insert_call(make.call("call_run_1", "run_1"))


async def test_a_late_commit_with_a_lower_seq_is_never_skipped(sql_url: str, make: Make) -> None:
    """PostgreSQL: T1 takes a sequence number, T2 a higher one and commits first; a
    reader asking while T1 is open waits for it without holding anyone up (a third writer
    commits meanwhile), then hands out both, in order, and nothing above its horizon."""
    if not sql_url.startswith("postgresql"):
        return  # SQLite: one writer at a time, commits in sequence order
    first, second, third, reader = (SQLStore.from_url(sql_url) for _ in range(4))
    watcher = create_async_engine(sql_url)
    in_first = asyncio.Event()
    release = asyncio.Event()
    try:
        async with second.transaction() as tx:
            await tx.insert_run(make.run("run_1"))

        async def hold_first() -> int:
            async with first.transaction() as tx:
                await tx.append_event(make.event(kind="late"))
                [late] = await tx.events("run_1")  # written, not committed
                in_first.set()
                await release.wait()
            return late.seq

        holder = asyncio.create_task(hold_first())
        await asyncio.wait_for(in_first.wait(), 10)
        async with second.transaction() as tx:
            await tx.append_event(make.event(kind="early"))
        page = asyncio.create_task(AuditLog(reader).page(0, 100))

        async def reader_waits() -> bool:
            # The reader looks up whether the writers it found are done: it read the
            # sequence's last number, found T1 writing, and waits for it.
            async with watcher.connect() as conn:
                waiting = await conn.scalar(
                    text(
                        "SELECT count(*) FROM pg_stat_activity WHERE pid <> pg_backend_pid() "
                        "AND query LIKE '%virtualtransaction = ANY%'"
                    )
                )
            return bool(waiting)

        deadline = asyncio.get_running_loop().time() + 10
        while not await reader_waits():
            assert asyncio.get_running_loop().time() < deadline, "the reader never waited"
            assert not page.done(), "the reader answered while a lower seq was uncommitted"
            await asyncio.sleep(0.01)
        # The reader takes no lock: another writer inserts and commits while it waits.
        async with third.transaction() as tx:
            await tx.append_event(make.event(kind="meanwhile"))
        assert not page.done()
        release.set()
        late_seq = await holder
        found = await asyncio.wait_for(page, 10)
        kinds = [(e["kind"], e["seq"]) for e in found.events]
        assert [k for k, _ in kinds] == ["late", "early"]
        assert kinds[0][1] == late_seq < kinds[1][1] == found.next_after
        # The next page has the writer that came later.
        later = await AuditLog(reader).page(found.next_after, 100)
        assert [e["kind"] for e in later.events] == ["meanwhile"]
    finally:
        release.set()
        for store in (first, second, third, reader):
            await store.close()
        await watcher.dispose()


async def test_the_audit_log_pages_resume_by_sequence_number(store: Store, make: Make) -> None:
    async with store.transaction() as tx:
        await tx.insert_run(make.run("run_1"))
        for index in range(7):
            await tx.append_event(make.event(kind=f"e{index}"))
    log = AuditLog(store)
    seen: list[Any] = []
    after = 0
    while True:
        page = await log.page(after, 3)
        seen.extend(e["kind"] for e in page.events)
        if not page.events:
            break
        assert page.next_after > after
        after = page.next_after
    assert seen == [f"e{i}" for i in range(7)]
    assert (await log.page(after, 3)).next_after == after
    exported = [e["kind"] async for e in log.export(make.at(0), make.at(1))]
    assert exported == seen
    assert [e async for e in log.export(make.at(1))] == []
