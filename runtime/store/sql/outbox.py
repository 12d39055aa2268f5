"""The outbox: notifications to deliver, claimed by one process at a time, paced per channel."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from sqlalchemy import bindparam, insert, or_, select, update

from runtime.store.records import OutboxRecord
from runtime.store.schema import outbox, outbox_pacing
from runtime.store.sql.convert import seconds, to_micros, without
from runtime.store.sql.executing import TransactionCore
from runtime.store.sql.rows import OUTBOX
from runtime.store.sql.wake import WAKE_OUTBOX

_INSERT_OUTBOX = insert(outbox)
_UPDATE_OUTBOX = update(outbox).where(outbox.c.outbox_id == bindparam("b_outbox_id"))
_DUE_OUTBOX = (
    select(outbox)
    .where(outbox.c.state == "pending", outbox.c.next_attempt_at <= bindparam("now"))
    .order_by(outbox.c.created_at, outbox.c.outbox_id)
    .limit(bindparam("limit"))
)
_OUTBOX_FOR_RUN = (
    select(outbox)
    .where(outbox.c.run_id == bindparam("run_id"))
    .order_by(outbox.c.created_at, outbox.c.outbox_id)
)
_FIRST_POSTED = (
    select(outbox)
    .where(outbox.c.run_id == bindparam("run_id"), outbox.c.posted_in == bindparam("channel"))
    .order_by(outbox.c.created_at, outbox.c.outbox_id)
    .limit(1)
)
_FIND_OUTBOX = (
    select(outbox)
    .where(outbox.c.ticket_id == bindparam("ticket_id"), outbox.c.kind == bindparam("kind"))
    .order_by(outbox.c.created_at, outbox.c.outbox_id)
    .limit(1)
)


_OUTBOX_FREE = or_(
    outbox.c.lease_expires_at.is_(None), outbox.c.lease_expires_at <= bindparam("now")
)
# Candidates for a claim, with their channel's pacing slot. FOR UPDATE SKIP LOCKED (on
# PostgreSQL; SQLite holds the write lock already) makes concurrent claims pass each
# other's rows by instead of waiting for them or taking them twice.
_OUTBOX_CANDIDATES = (
    select(outbox.c.outbox_id, outbox.c.channel_key, outbox_pacing.c.next_at)
    .select_from(
        outbox.outerjoin(outbox_pacing, outbox_pacing.c.channel_key == outbox.c.channel_key)
    )
    .where(outbox.c.state == "pending", outbox.c.next_attempt_at <= bindparam("now"), _OUTBOX_FREE)
    .order_by(outbox.c.created_at, outbox.c.outbox_id)
    .limit(bindparam("limit"))
    .with_for_update(of=outbox, skip_locked=True)
)
_CLAIM_OUTBOX = (
    update(outbox)
    .where(outbox.c.outbox_id.in_(bindparam("ids", expanding=True)))
    .values(
        lease_owner=bindparam("owner"),
        lease_expires_at=bindparam("until"),
        fence=outbox.c.fence + 1,
    )
    .returning(*outbox.c)
)
_UPDATE_OUTBOX_FENCED = _UPDATE_OUTBOX.where(
    outbox.c.fence == bindparam("b_fence"), outbox.c.state == "pending"
)


class OutboxStatements(TransactionCore):
    """The outbox part of `SQLTransaction`."""

    async def add_outbox(self, item: OutboxRecord) -> None:
        """Queue a notification; `ValueError` if its id exists (on PostgreSQL, from a later
        statement of the transaction: see `_write`)."""
        await self._write(_INSERT_OUTBOX, OUTBOX.values(item), table=outbox)
        self.wrote = True
        self._wake.add(WAKE_OUTBOX)

    async def due_outbox(self, now: datetime, limit: int) -> list[OutboxRecord]:
        """Pending notifications whose next attempt is due, oldest first."""
        params = {"now": to_micros(now), "limit": limit}
        return [OUTBOX.record(row) for row in await self._execute(_DUE_OUTBOX, params)]

    async def claim_outbox(
        self,
        now: datetime,
        limit: int,
        *,
        owner: str,
        until: datetime,
        pacing: Mapping[str, float] | None = None,
    ) -> list[OutboxRecord]:
        """Claim due notifications, skipping rows other claims hold; see the protocol."""
        if limit <= 0:
            return []
        intervals = pacing or {}
        at = to_micros(now)
        # Paced channels yield one item per claim: look further than `limit` rows.
        params = {"now": at, "limit": limit * 4 if intervals else limit}
        candidates = (await self._execute(_OUTBOX_CANDIDATES, params)).all()
        chosen: list[str] = []
        taken: set[str] = set()
        upserts = self._upserts()
        for row in candidates:
            if len(chosen) >= limit:
                break
            key = row.channel_key
            if key is not None:
                if key in taken or (row.next_at is not None and row.next_at > at):
                    continue
                interval = intervals.get(key.split(":", 1)[0])
                if interval is not None:
                    slot = {"key": key, "now": at, "next_at": to_micros(now + seconds(interval))}
                    if (await self._execute(upserts.take_slot, slot)).rowcount != 1:
                        continue  # another process took this channel's slot just now
                    taken.add(key)
            chosen.append(row.outbox_id)
        if not chosen:
            return []
        claim = {"ids": chosen, "owner": owner, "until": to_micros(until)}
        rows = (await self._execute(_CLAIM_OUTBOX, claim)).all()
        self.wrote = True
        claimed = [OUTBOX.record(row) for row in rows]
        claimed.sort(key=lambda o: (o.created_at, o.outbox_id))
        return claimed

    async def update_outbox(self, item: OutboxRecord, *, fence: int | None = None) -> bool:
        """Write a notification's delivery state back, compare-and-set on `fence` if given.

        Raises:
            ValueError: Without a fence, when the item does not exist.
        """
        values = without(OUTBOX.values(item), "outbox_id")
        values["b_outbox_id"] = item.outbox_id
        statement = _UPDATE_OUTBOX
        if fence is not None:
            values["b_fence"] = fence
            statement = _UPDATE_OUTBOX_FENCED
        if (await self._execute(statement, values)).rowcount != 1:
            if fence is not None:
                return False
            raise ValueError(f"outbox item {item.outbox_id} does not exist")
        self.wrote = True
        return True

    async def outbox_for_run(self, run_id: str) -> list[OutboxRecord]:
        """Every notification of a run, oldest first."""
        result = await self._execute(_OUTBOX_FOR_RUN, {"run_id": run_id})
        return [OUTBOX.record(row) for row in result]

    async def find_outbox(self, *, ticket_id: str, kind: str) -> OutboxRecord | None:
        """The first notification of `kind` about a ticket."""
        params = {"ticket_id": ticket_id, "kind": kind}
        row = (await self._execute(_FIND_OUTBOX, params)).first()
        return None if row is None else OUTBOX.record(row)

    async def first_posted(self, run_id: str, channel: str) -> OutboxRecord | None:
        """The run's first notification that left a message in `channel`; see the protocol."""
        params = {"run_id": run_id, "channel": channel}
        row = (await self._execute(_FIRST_POSTED, params)).first()
        return None if row is None else OUTBOX.record(row)
