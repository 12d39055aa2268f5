"""The store contract for the database-wide figures metrics export, over every store."""

from __future__ import annotations

from datetime import timedelta

from runtime.domain.states import CallState, RunStatus, TicketStatus
from runtime.domain.tickets import Pause, ToolPermission
from runtime.store.base import Store
from runtime.store.ports.leases import Figures
from runtime.store.records import ReceivedRecord
from tests.contract.conftest import Make


def _received(command_id: str, make: Make) -> ReceivedRecord:
    return ReceivedRecord(
        command_id=command_id,
        source="slack",
        delivery_id=f"d-{command_id}",
        ticket_id="t1",
        correlation="tok",
        answer={"kind": "deny", "reason": "no"},
        actor={"id": "U1", "groups": [], "operator": False, "platform": "slack"},
        received_at=make.t0,
        reply={},
    )


async def test_an_empty_database_has_nothing_to_count(store: Store, make: Make) -> None:
    async with store.transaction() as tx:
        assert await tx.figures(make.at(0)) == Figures()


async def test_figures_count_each_kind_of_waiting_work(store: Store, make: Make) -> None:
    now = make.at(100)
    async with store.transaction() as tx:
        await tx.insert_run(make.run("q1"))
        await tx.insert_run(make.run("q2"))
        await tx.insert_run(make.run("aw", status=RunStatus.AWAITING))
        await tx.insert_run(
            make.run(
                "dead",
                status=RunStatus.RUNNING,
                lease_owner="w1",
                lease_expires_at=make.at(50),
            )
        )
        await tx.insert_run(
            make.run(
                "alive",
                status=RunStatus.RUNNING,
                lease_owner="w2",
                lease_expires_at=now + timedelta(seconds=30),
            )
        )
        await tx.insert_call(make.call("c1", run_id="aw", state=CallState.UNCERTAIN))
        await tx.insert_call(make.call("c2", run_id="aw", seq=1, state=CallState.COMPLETED))
        await tx.insert_ticket(
            make.ticket(
                "t1",
                run_id="aw",
                target=ToolPermission(call_id="c1", tool="refund", args={}),
                deadline=make.at(10),
            )
        )
        await tx.insert_ticket(
            make.ticket(
                "t2",
                run_id="aw",
                target=ToolPermission(call_id="c2", tool="refund", args={}),
                deadline=make.at(500),
            )
        )
        await tx.insert_ticket(make.ticket("t3", run_id="aw", target=Pause()))
        await tx.insert_ticket(make.ticket("t4", run_id="aw", target=Pause(), deadline=make.at(1)))
        await tx.close_ticket("t4", status=TicketStatus.EXPIRED, at=make.at(2))
        await tx.add_outbox(make.outbox("o1", run_id="aw"))
        await tx.add_outbox(make.outbox("o2", run_id="aw", state="failed"))
        await tx.add_outbox(make.outbox("o3", run_id="aw", state="delivered"))
        assert await tx.insert_received(_received("r1", make))
        assert await tx.insert_received(_received("r2", make))
    async with store.transaction() as tx:
        figures = await tx.figures(now)
    assert figures == Figures(
        open_tickets=3,
        overdue_tickets=1,
        outbox_pending=1,
        outbox_failed=1,
        received_pending=2,
        runs_queued=2,
        runs_lease_expired=1,
        uncertain_calls=1,
    )
