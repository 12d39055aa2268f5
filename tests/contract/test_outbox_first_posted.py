"""A run's first message in a channel: `first_posted`, and migration 0011 filling it in
for notifications delivered before it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from alembic import command
from sqlalchemy import Connection

from runtime.store.base import Store
from runtime.store.records import OutboxRecord
from runtime.store.sql import SQLStore, alembic_config

if TYPE_CHECKING:
    from conftest import Make

SLACK_C1 = {"platform": "slack", "channel": "C1"}


def delivered(make: Make, outbox_id: str, second: float, **changes: Any) -> OutboxRecord:
    values: dict[str, Any] = {
        "state": "delivered",
        "platform_ref": {"channel": "C1", "ts": f"{second}"},
        "delivered_at": make.at(second),
        "created_at": make.at(second),
        "destination": SLACK_C1,
    }
    return make.outbox(outbox_id, **{**values, **changes})


async def first(store: Store, channel: str, run_id: str = "run_1") -> str | None:
    async with store.transaction() as tx:
        found = await tx.first_posted(run_id, channel)
    return None if found is None else found.outbox_id


async def test_the_oldest_delivered_message_in_the_channel_is_found(
    store: Store, make: Make
) -> None:
    async with store.transaction() as tx:
        await tx.insert_run(make.run("run_1"))
        await tx.insert_run(make.run("run_2"))
        for item in [
            make.outbox("ob_pending", created_at=make.at(0), destination=SLACK_C1),
            delivered(make, "ob_failed", 1, state="failed"),
            delivered(make, "ob_no_ref", 2, platform_ref=None),
            delivered(make, "ob_empty_ref", 3, platform_ref={}),
            delivered(
                make, "ob_other_channel", 4, destination={"platform": "slack", "channel": "C2"}
            ),
            delivered(make, "ob_other_run", 5, run_id="run_2"),
            delivered(make, "ob_later", 7),
            delivered(make, "ob_b", 6),
            delivered(make, "ob_a", 6),  # the same time: the smaller id first
            delivered(
                make, "ob_discord", 8, destination={"platform": "discord", "channel_id": "42"}
            ),
        ]:
            await tx.add_outbox(item)
    assert await first(store, "slack:C1") == "ob_a"
    assert await first(store, "slack:C2") == "ob_other_channel"
    assert await first(store, "slack:C1", "run_2") == "ob_other_run"
    assert await first(store, "discord:42") == "ob_discord"
    assert await first(store, "slack:C3") is None
    async with store.transaction() as tx:
        found = await tx.first_posted("run_1", "slack:C1")
    assert found == delivered(make, "ob_a", 6)


async def test_an_item_is_found_once_its_delivery_is_recorded(store: Store, make: Make) -> None:
    async with store.transaction() as tx:
        await tx.insert_run(make.run("run_1"))
        await tx.add_outbox(make.outbox("ob_1", destination=SLACK_C1))
    assert await first(store, "slack:C1") is None
    async with store.transaction() as tx:
        [item] = await tx.claim_outbox(make.at(1), 10, owner="p1", until=make.at(60))
        item.state = "delivered"
        item.platform_ref = {"channel": "C1", "ts": "1.0"}
        assert await tx.update_outbox(item, fence=item.fence)
    assert await first(store, "slack:C1") == "ob_1"


def _down_to(revision: str) -> Any:
    def move(conn: Connection) -> None:
        config = alembic_config()
        config.attributes["connection"] = conn
        command.downgrade(config, revision)

    return move


async def test_messages_delivered_before_the_upgrade_are_found(
    empty_sql_url: str, make: Make
) -> None:
    store = SQLStore.from_url(empty_sql_url)
    try:
        await store.migrate()
        async with store.transaction() as tx:
            await tx.insert_run(make.run("run_1"))
            await tx.add_outbox(make.outbox("ob_pending", created_at=make.at(0)))
            await tx.add_outbox(delivered(make, "ob_no_ref", 1, platform_ref=None))
            await tx.add_outbox(delivered(make, "ob_card", 2))
            await tx.add_outbox(
                delivered(make, "ob_elsewhere", 3, destination={"platform": "slack"})
            )
            await tx.add_outbox(delivered(make, "ob_discord", 4, destination={"channel_id": "42"}))
        async with store.engine.begin() as conn:
            await conn.run_sync(_down_to("0010"))
    finally:
        await store.close()

    store = SQLStore.from_url(empty_sql_url)
    try:
        await store.migrate()
        assert await first(store, "slack:C1") == "ob_card"
        assert await first(store, "console:42") == "ob_discord"
        async with store.transaction() as tx:
            items = {o.outbox_id: o for o in await tx.outbox_for_run("run_1")}
        assert [o for o, item in items.items() if item.posted_in is not None] == [
            "ob_card",
            "ob_discord",
        ]
    finally:
        await store.close()
