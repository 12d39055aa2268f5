"""Received commands (chat clicks), stored before they are applied."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import bindparam, or_, select, update

from runtime.store.base import DuplicateKey
from runtime.store.records import ReceivedRecord
from runtime.store.schema import received_commands
from runtime.store.sql.convert import to_micros, without
from runtime.store.sql.executing import TransactionCore
from runtime.store.sql.rows import RECEIVED
from runtime.store.sql.wake import WAKE_RUNS

_PENDING_RECEIVED = (
    select(received_commands)
    .where(received_commands.c.state == "pending")
    .order_by(received_commands.c.received_at, received_commands.c.command_id)
    .limit(bindparam("limit"))
)
_UPDATE_RECEIVED = update(received_commands).where(
    received_commands.c.command_id == bindparam("b_command_id")
)


_CLAIM_RECEIVED = (
    update(received_commands)
    .where(
        received_commands.c.command_id.in_(
            select(received_commands.c.command_id)
            .where(
                received_commands.c.state == "pending",
                or_(
                    received_commands.c.lease_expires_at.is_(None),
                    received_commands.c.lease_expires_at <= bindparam("now"),
                ),
            )
            .order_by(received_commands.c.received_at, received_commands.c.command_id)
            .limit(bindparam("limit"))
            .with_for_update(skip_locked=True)
            .scalar_subquery()
        )
    )
    .values(lease_owner=bindparam("owner"), lease_expires_at=bindparam("until"))
    .returning(*received_commands.c)
)
_UPDATE_RECEIVED_PENDING = _UPDATE_RECEIVED.where(received_commands.c.state == "pending")


_RECEIVED_ID = select(received_commands.c.command_id).where(
    received_commands.c.command_id == bindparam("command_id")
)


class ReceivedStatements(TransactionCore):
    """The received commands part of `SQLTransaction`."""

    async def insert_received(self, item: ReceivedRecord) -> bool:
        """Store a received command; False if (source, delivery_id) was stored before."""
        statement = self._upserts().insert_received
        values = RECEIVED.values(item)
        if (await self._execute(statement, values, violation=DuplicateKey)).rowcount != 1:
            return False
        self.wrote = True
        self._wake.add(WAKE_RUNS)
        return True

    async def pending_received(self, limit: int) -> list[ReceivedRecord]:
        """Received commands not yet applied, oldest first."""
        result = await self._execute(_PENDING_RECEIVED, {"limit": limit})
        return [RECEIVED.record(row) for row in result]

    async def claim_received(
        self, now: datetime, limit: int, *, owner: str, until: datetime
    ) -> list[ReceivedRecord]:
        """Claim pending received commands, skipping those another process holds."""
        if limit <= 0:
            return []
        params = {
            "now": to_micros(now),
            "limit": limit,
            "owner": owner,
            "until": to_micros(until),
        }
        rows = (await self._execute(_CLAIM_RECEIVED, params)).all()
        if not rows:
            return []
        self.wrote = True
        claimed = [RECEIVED.record(row) for row in rows]
        claimed.sort(key=lambda r: (r.received_at, r.command_id))
        return claimed

    async def update_received(self, item: ReceivedRecord, *, only_pending: bool = False) -> bool:
        """Write a received command's state back (only while pending, if asked).

        Raises:
            ValueError: The command does not exist.
        """
        values = without(RECEIVED.values(item), "command_id")
        values["b_command_id"] = item.command_id
        statement = _UPDATE_RECEIVED_PENDING if only_pending else _UPDATE_RECEIVED
        if (await self._execute(statement, values)).rowcount != 1:
            if only_pending and await self._received_exists(item.command_id):
                return False
            raise ValueError(f"received command {item.command_id} does not exist")
        self.wrote = True
        return True

    async def _received_exists(self, command_id: str) -> bool:
        found = await self._execute(_RECEIVED_ID, {"command_id": command_id})
        return found.first() is not None
