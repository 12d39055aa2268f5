"""What one person may decide, found by index: `decidable_tickets`, `list_runs(deciders=...)`
and the pages of both, over every store."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
from sqlalchemy import text

from runtime.domain.states import TicketStatus
from runtime.domain.tickets import Allow, Child, Pause, ToolPermission
from runtime.store.base import Store
from runtime.store.records import Position, viewer_keys
from runtime.store.sql import SQLStore

if TYPE_CHECKING:
    from conftest import Make


def _ask(call_id: str) -> ToolPermission:
    return ToolPermission(call_id=call_id, tool="refund", args={"order": 42})


async def _open(store: Store, make: Make, n: int, run_id: str, **ticket: object) -> list[str]:
    """A run of `run_id` with `n` open tickets, one second apart; their ids."""
    ids = [f"{run_id}_t{i:03d}" for i in range(n)]
    requester = ticket.pop("requester", "U1")
    async with store.transaction() as tx:
        await tx.insert_run(make.run(run_id, requester=requester))
        for i, ticket_id in enumerate(ids):
            await tx.insert_ticket(
                make.ticket(
                    ticket_id,
                    run_id,
                    target=_ask(f"{run_id}_c{i}"),
                    created_at=make.at(i),
                    requester=requester,
                    **ticket,
                )
            )
    return ids


async def _decidable(
    store: Store, user: str, *, groups: frozenset[str] = frozenset(), **options: object
) -> list[str]:
    async with store.transaction() as tx:
        found = await tx.decidable_tickets(
            deciders=viewer_keys(user, groups),
            viewer=user,
            **options,  # type: ignore[arg-type]
        )
    return [t.ticket_id for t in found]


async def test_tickets_are_found_under_every_kind_of_decider(store: Store, make: Make) -> None:
    await _open(store, make, 1, "r_default", requester="U1")
    await _open(store, make, 1, "r_user", approvers=("U2",))
    await _open(store, make, 1, "r_group", approvers=("group:finance",))
    await _open(store, make, 1, "r_any", approvers=("*",))
    await _open(store, make, 1, "r_req", requester="U3", approvers=("requester", "U9"))
    await _open(store, make, 1, "r_four", requester="U3", approvers=("*",), four_eyes=True)
    await _open(store, make, 1, "r_nobody", requester=None)

    # Tickets opened at the same time come in the order of their ids.
    assert await _decidable(store, "U1") == ["r_any_t000", "r_default_t000", "r_four_t000"]
    assert await _decidable(store, "U2") == ["r_any_t000", "r_four_t000", "r_user_t000"]
    assert await _decidable(store, "U7", groups=frozenset({"finance"})) == [
        "r_any_t000",
        "r_four_t000",
        "r_group_t000",
    ]
    # Four-eyes keeps the requester out even where "*" lets everyone else in.
    assert await _decidable(store, "U3") == ["r_any_t000", "r_req_t000"]
    assert await _decidable(store, "U9") == ["r_any_t000", "r_four_t000", "r_req_t000"]


async def test_closed_tickets_and_tickets_without_a_call_are_not_listed(
    store: Store, make: Make
) -> None:
    ids = await _open(store, make, 3, "run_1", approvers=("U2",))
    async with store.transaction() as tx:
        await tx.insert_ticket(
            make.ticket("pause", "run_1", target=Pause(), requester="U2", created_at=make.at(9))
        )
        assert await tx.close_ticket(
            ids[1], status=TicketStatus.DECIDED, at=make.at(5), decision=Allow(), decided_by="U2"
        )
        assert await tx.close_ticket(ids[2], status=TicketStatus.VOIDED, at=make.at(5))
    assert await _decidable(store, "U2") == [ids[0]]


async def test_pages_follow_the_position_and_stop_at_the_limit(store: Store, make: Make) -> None:
    mine = await _open(store, make, 7, "run_a", approvers=("U2",))
    anyone = await _open(store, make, 5, "run_b", approvers=("*",))
    await _open(store, make, 40, "run_c", approvers=("U5",))
    everything = sorted(mine + anyone, key=lambda t: (int(t[-3:]), t))
    seen: list[str] = []
    after: Position | None = None
    while True:
        async with store.transaction() as tx:
            page = await tx.decidable_tickets(
                deciders=viewer_keys("U2", ()), viewer="U2", limit=3, after=after
            )
        assert len(page) <= 3
        if not page:
            break
        seen.extend(t.ticket_id for t in page)
        after = Position(page[-1].created_at, page[-1].ticket_id)
    assert seen == everything
    # Everyone's listing pages the same way.
    async with store.transaction() as tx:
        first = await tx.open_tickets(limit=4)
        rest = await tx.open_tickets(
            limit=100, after=Position(first[-1].created_at, first[-1].ticket_id)
        )
    assert len(first) == 4 and len(first) + len(rest) == 52
    assert {t.ticket_id for t in first}.isdisjoint(t.ticket_id for t in rest)


async def test_runs_a_viewer_may_decide_are_listed_with_their_sub_agents(
    store: Store, make: Make
) -> None:
    async with store.transaction() as tx:
        await tx.insert_run(make.run("parent", requester="U1", created_at=make.at(1)))
        await tx.insert_run(
            make.run(
                "child",
                requester="U1",
                created_at=make.at(2),
                parent_run_id="parent",
                parent_call_id="c_delegate",
                task_key="look",
                depth=1,
                lineage=[{"run_id": "parent", "agent": "refunds"}],
            )
        )
        await tx.insert_run(
            make.run(
                "grandchild",
                requester="U1",
                created_at=make.at(3),
                parent_run_id="child",
                parent_call_id="c_deeper",
                task_key="deeper",
                depth=2,
                lineage=[
                    {"run_id": "parent", "agent": "refunds"},
                    {"run_id": "child", "agent": "refunds"},
                ],
            )
        )
        await tx.insert_run(make.run("other", requester="U1", created_at=make.at(4)))
        await tx.insert_run(make.run("waits", requester="U1", created_at=make.at(5)))
        await tx.insert_run(make.run("own", requester="U2", created_at=make.at(6)))
        await tx.insert_ticket(
            make.ticket("t_parent", "parent", target=_ask("c1"), approvers=("U2",))
        )
        await tx.insert_ticket(make.ticket("t_other", "other", target=_ask("c2")))
        # A ticket waiting on a sub-agent's run lets nobody see the run by itself.
        await tx.insert_ticket(
            make.ticket(
                "t_waits",
                "waits",
                target=Child(call_id="c3", child_run_id="grandchild", task_key="x", agent="a"),
                requester="U2",
            )
        )

    async def listed(user: str, **options: object) -> list[str]:
        async with store.transaction() as tx:
            found = await tx.list_runs(
                involving=user,
                deciders=viewer_keys(user, ()),
                **options,  # type: ignore[arg-type]
            )
        return [r.run_id for r in found]

    assert await listed("U2") == ["own", "grandchild", "child", "parent"]
    assert await listed("U2", limit=2) == ["own", "grandchild"]
    assert await listed("U2", limit=2, before=Position(make.at(3), "grandchild")) == [
        "child",
        "parent",
    ]
    assert await listed("U8") == []
    async with store.transaction() as tx:
        await tx.close_ticket(
            "t_parent",
            status=TicketStatus.DECIDED,
            at=make.at(9),
            decision=Allow(),
            decided_by="U7",
        )
    assert await listed("U2") == ["own"]


async def test_sqlite_finds_a_viewers_tickets_by_index(tmp_path: object, make: Make) -> None:
    from pathlib import Path

    assert isinstance(tmp_path, Path)
    store = SQLStore.sqlite(tmp_path / "plan.db")
    try:
        await store.migrate()
        async with store.engine.connect() as conn:
            plan = (
                await conn.execute(
                    text(
                        "EXPLAIN QUERY PLAN SELECT ticket_id, created_at FROM ticket_deciders "
                        "WHERE decider = :d AND (created_at > :t OR (created_at = :t AND "
                        "ticket_id > :i)) AND call_id IS NOT NULL "
                        "ORDER BY created_at, ticket_id LIMIT 10"
                    ),
                    {"d": "user:U2", "t": 0, "i": ""},
                )
            ).all()
        details = " ".join(str(row[-1]) for row in plan)
        assert "ix_ticket_deciders_decider_created_at_ticket_id" in details
        assert "TEMP B-TREE" not in details  # read in order: the LIMIT ends the scan
    finally:
        await store.close()


@pytest.mark.parametrize("approvers", [(), ("*",)])
async def test_a_viewer_who_may_decide_nothing_reads_nothing(
    store: Store, make: Make, approvers: tuple[str, ...]
) -> None:
    await _open(store, make, 30, "run_1", approvers=approvers or ("U5",))
    assert await _decidable(store, "U8", limit=5) == (
        [] if not approvers else [f"run_1_t{i:03d}" for i in range(5)]
    )
