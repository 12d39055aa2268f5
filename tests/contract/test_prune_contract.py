"""Pruning over every store (`runtime.services.audit.Retention`): only run trees that
finished before the cut go, with every row; an open run, ticket, descendant,
notification to deliver or active grant keeps its whole tree; a tree that changed
after it was archived is kept; pruning twice is pruning once."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from runtime import ManualClock
from runtime.domain.states import RunStatus, TicketStatus
from runtime.domain.tickets import Allow, ToolPermission
from runtime.services.audit import Retention, RunArchive
from runtime.store.base import Store, Transaction
from runtime.store.records import GrantRecord

if TYPE_CHECKING:
    from conftest import Make

DONE = RunStatus.DONE


def grant(make: Make, grant_id: str, run_id: str, expires: float) -> GrantRecord:
    return GrantRecord(
        grant_id=grant_id,
        agent="refunds",
        agent_version="v1",
        catalog_fingerprint="fp1",
        tool="refund",
        scope="thread",
        run_id=run_id,
        thread_id="thread_1",
        requester="U1",
        constraint=None,
        granted_by="U2",
        granted_by_name="Ana",
        platform="slack",
        ticket_id=f"tk_{run_id}",
        created_at=make.at(0),
        expires_at=make.at(expires),
    )


async def full_run(tx: Transaction, make: Make, run_id: str, **changes: Any) -> None:
    """A finished run with a decided call, a closed ticket, events, a delivered
    notification and an expired grant."""
    values: dict[str, Any] = {"status": DONE, "updated_at": make.at(10)}
    values.update(changes)
    await tx.insert_run(make.run(run_id, **values))
    await tx.insert_call(make.call(f"call_{run_id}", run_id))
    await tx.insert_ticket(
        make.ticket(
            f"tk_{run_id}",
            run_id,
            target=ToolPermission(call_id=f"call_{run_id}", tool="refund", args={"order": 1}),
        )
    )
    await tx.close_ticket(
        f"tk_{run_id}",
        status=TicketStatus.DECIDED,
        at=make.at(5),
        decision=Allow(),
        decided_by="U2",
    )
    await tx.append_event(make.event(run_id, kind="run_started"))
    await tx.append_event(make.event(run_id, kind="run_done"))
    await tx.add_outbox(make.outbox(f"ob_{run_id}", run_id, state="delivered"))
    await tx.insert_grant(grant(make, f"gr_{run_id}", run_id, expires=20))


async def seed(store: Store, make: Make) -> None:
    async with store.transaction() as tx:
        await full_run(tx, make, "r_old")
        await full_run(tx, make, "r_old_child", parent_run_id="r_old", task_key="t1", depth=1)
        await full_run(tx, make, "r_open", status=RunStatus.AWAITING)
        await full_run(tx, make, "r_ticket")
        await tx.insert_ticket(make.ticket("tk_still_open", "r_ticket"))
        await full_run(tx, make, "r_parent")
        await full_run(
            tx,
            make,
            "r_busy_child",
            status=RunStatus.RUNNING,
            parent_run_id="r_parent",
            task_key="t1",
            depth=1,
        )
        await full_run(tx, make, "r_pending")
        await tx.add_outbox(make.outbox("ob_pending", "r_pending"))
        await full_run(tx, make, "r_granted")
        await tx.insert_grant(grant(make, "gr_active", "r_granted", expires=10_000))
        await full_run(tx, make, "r_new", updated_at=make.at(500))
        await full_run(tx, make, "r_late_child_root")
        await full_run(
            tx,
            make,
            "r_late_child",
            parent_run_id="r_late_child_root",
            task_key="t1",
            depth=1,
            updated_at=make.at(500),
        )


async def candidates(retention: Retention, make: Make) -> list[RunArchive]:
    return [found async for found in retention.candidates(make.at(100), batch=2)]


async def test_only_whole_finished_trees_before_the_cut_are_pruned(
    store: Store, make: Make
) -> None:
    await seed(store, make)
    retention = Retention(store, ManualClock(make.at(1000)))
    found = await candidates(retention, make)
    assert [(a.run_id, a.run_ids) for a in found] == [("r_old", ("r_old", "r_old_child"))]
    [archive] = found
    header, *lines = archive.lines
    assert header == {"archive": 1, "run_id": "r_old", "run_ids": ["r_old", "r_old_child"]}
    tables: dict[str, list[Any]] = {}
    for line in lines:
        tables.setdefault(line["table"], []).append(line["row"])
    assert {k: len(v) for k, v in tables.items()} == {
        "runs": 2,
        "calls": 2,
        "tickets": 2,
        "events": 4,
        "outbox": 2,
        "grants": 2,
    }
    run = tables["runs"][0]
    assert run["run_id"] == "r_old" and run["status"] == "done"
    assert run["messages"] == [{"role": "user", "content": "refund order 42"}]
    assert tables["calls"][0]["args"] == {"order": 42, "amount": 12.5}
    assert tables["tickets"][0]["status"] == "decided"
    assert tables["tickets"][0]["decision"]["kind"] == "allow"
    assert [e["kind"] for e in tables["events"]] == ["run_started", "run_done"] * 2
    assert tables["grants"][0]["grant_id"] == "gr_r_old"

    assert await retention.delete(archive, make.at(100))
    assert await candidates(retention, make) == []
    assert not await retention.delete(archive, make.at(100))  # already gone
    async with store.transaction() as tx:
        for run_id in ("r_old", "r_old_child"):
            assert await tx.get_run(run_id) is None
            assert await tx.events(run_id) == []
        kept = [
            "r_open",
            "r_ticket",
            "r_parent",
            "r_busy_child",
            "r_pending",
            "r_granted",
            "r_new",
            "r_late_child_root",
            "r_late_child",
        ]
        for run_id in kept:
            assert await tx.get_run(run_id) is not None, run_id
            assert len(await tx.events(run_id)) == 2
        assert (await tx.get_ticket("tk_still_open")) is not None


async def test_a_tree_that_changed_after_its_archive_is_kept(store: Store, make: Make) -> None:
    await seed(store, make)
    retention = Retention(store, ManualClock(make.at(1000)))
    [archive] = await candidates(retention, make)
    async with store.transaction() as tx:
        await tx.append_event(make.event("r_old_child", kind="late_note"))
    assert not await retention.delete(archive, make.at(100))
    async with store.transaction() as tx:
        assert await tx.get_run("r_old") is not None
    # Archived again as it now reads, it goes.
    [again] = await candidates(retention, make)
    assert any(line.get("row", {}).get("kind") == "late_note" for line in again.lines)
    assert await retention.delete(again, make.at(100))


async def test_a_tree_that_reopened_is_kept(store: Store, make: Make) -> None:
    await seed(store, make)
    retention = Retention(store, ManualClock(make.at(1000)))
    [archive] = await candidates(retention, make)
    async with store.transaction() as tx:
        await tx.insert_ticket(
            make.ticket(
                "tk_new",
                "r_old_child",
                target=ToolPermission(call_id="call_new", tool="refund", args={}),
            )
        )
    assert not await retention.delete(archive, make.at(100))
    assert await candidates(retention, make) == []
