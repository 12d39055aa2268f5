"""Migration 0010 files every ticket open at the upgrade under its decider keys."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from alembic import command
from sqlalchemy import Connection, text

from runtime.domain.states import TicketStatus
from runtime.domain.tickets import Allow, ToolPermission
from runtime.store.records import viewer_keys
from runtime.store.sql import SQLStore, alembic_config

if TYPE_CHECKING:
    from conftest import Make


def _down_to(revision: str) -> Any:
    def move(conn: Connection) -> None:
        config = alembic_config()
        config.attributes["connection"] = conn
        command.downgrade(config, revision)

    return move


async def test_open_tickets_are_back_filled(empty_sql_url: str, make: Make) -> None:
    store = SQLStore.from_url(empty_sql_url)
    try:
        await store.migrate()
        async with store.transaction() as tx:
            await tx.insert_run(make.run("run_1", requester="U1"))
            for n, approvers in enumerate([(), ("U2", "group:ops"), ("*",), ("U2",)]):
                await tx.insert_ticket(
                    make.ticket(
                        f"t{n}",
                        target=ToolPermission(call_id=f"c{n}", tool="refund", args={}),
                        approvers=approvers,
                        four_eyes=n == 2,
                        created_at=make.at(n),
                    )
                )
            await tx.close_ticket(
                "t3", status=TicketStatus.DECIDED, at=make.at(9), decision=Allow(), decided_by="U2"
            )
        async with store.engine.begin() as conn:
            await conn.run_sync(_down_to("0009"))
    finally:
        await store.close()

    store = SQLStore.from_url(empty_sql_url)
    try:
        await store.migrate()
        async with store.engine.connect() as conn:
            rows = (
                await conn.execute(
                    text(
                        "SELECT ticket_id, decider, barred FROM ticket_deciders "
                        "ORDER BY ticket_id, decider"
                    )
                )
            ).all()
        assert [tuple(row) for row in rows] == [
            ("t0", "user:U1", None),
            ("t1", "group:ops", None),
            ("t1", "user:U2", None),
            ("t2", "any", "U1"),
        ]

        async def decidable(user: str, *groups: str) -> list[str]:
            async with store.transaction() as tx:
                found = await tx.decidable_tickets(deciders=viewer_keys(user, groups), viewer=user)
            return [t.ticket_id for t in found]

        assert await decidable("U1") == ["t0"]
        assert await decidable("U2") == ["t1", "t2"]
        assert await decidable("U5", "ops") == ["t1", "t2"]
    finally:
        await store.close()
