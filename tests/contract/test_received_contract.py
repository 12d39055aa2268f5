"""The store contract for received chat commands, over every store."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

from runtime.store.base import Store
from runtime.store.records import ReceivedRecord

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def received(command_id: str, delivery_id: str, seconds: float = 0) -> ReceivedRecord:
    return ReceivedRecord(
        command_id=command_id,
        source="slack",
        delivery_id=delivery_id,
        ticket_id="tk_1",
        correlation="tok",
        answer={"kind": "deny", "reason": "no"},
        actor={"id": "U1", "groups": ["S1"], "operator": False, "platform": "slack"},
        received_at=T0 + timedelta(seconds=seconds),
        reply={"response_url": "http://127.0.0.1/r", "nested": {"a": [1, 2]}},
    )


async def test_received_commands_round_trip_in_order(store: Store) -> None:
    async with store.transaction() as tx:
        assert await tx.insert_received(received("rc_2", "d2", seconds=5))
        assert await tx.insert_received(received("rc_1", "d1", seconds=1))
    async with store.transaction() as tx:
        pending = await tx.pending_received(10)
    assert [p.command_id for p in pending] == ["rc_1", "rc_2"]
    assert pending[0] == received("rc_1", "d1", seconds=1)


async def test_a_second_delivery_is_not_stored(store: Store) -> None:
    async with store.transaction() as tx:
        assert await tx.insert_received(received("rc_1", "d1"))
    async with store.transaction() as tx:
        assert not await tx.insert_received(received("rc_2", "d1"))
    async with store.transaction() as tx:
        assert [p.command_id for p in await tx.pending_received(10)] == ["rc_1"]
    # The same delivery id from another platform is another delivery.
    async with store.transaction() as tx:
        assert await tx.insert_received(replace(received("rc_3", "d1"), source="discord"))


async def test_applied_commands_leave_the_pending_list(store: Store) -> None:
    async with store.transaction() as tx:
        await tx.insert_received(received("rc_1", "d1"))
        await tx.insert_received(received("rc_2", "d2", seconds=1))
    done = replace(
        received("rc_1", "d1"),
        state="refused",
        error_code="not_awaiting",
        error="already decided",
        applied_at=T0 + timedelta(seconds=9),
    )
    async with store.transaction() as tx:
        await tx.update_received(done)
    async with store.transaction() as tx:
        assert [p.command_id for p in await tx.pending_received(10)] == ["rc_2"]
        assert await tx.pending_received(0) == []
