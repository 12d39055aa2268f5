"""The statements that need an engine's own ``INSERT ... ON CONFLICT``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Insert, Table, bindparam

from runtime.store.schema import leases, outbox_pacing, received_commands


@dataclass(frozen=True)
class Upserts:
    """The statements that need an engine's own ``INSERT ... ON CONFLICT``."""

    take_slot: Insert
    insert_lease: Insert
    insert_received: Insert


def build_upserts(insert: Callable[[Table], Any]) -> Upserts:
    """The statements, made with a dialect's own `insert` (which has ``on_conflict_*``)."""
    slot = insert(outbox_pacing).values(channel_key=bindparam("key"), next_at=bindparam("next_at"))
    key = [outbox_pacing.c.channel_key]
    lease = insert(leases).values(
        name=bindparam("b_name"),
        owner=bindparam("b_owner"),
        fence=1,
        expires_at=bindparam("b_until"),
    )
    return Upserts(
        # A channel's slot is taken only when it is free: of two claims racing for it,
        # the second sees the first's row and updates nothing.
        take_slot=slot.on_conflict_do_update(
            index_elements=key,
            set_={"next_at": slot.excluded.next_at},
            where=outbox_pacing.c.next_at <= bindparam("now"),
        ),
        insert_lease=lease.on_conflict_do_nothing(index_elements=[leases.c.name]).returning(
            leases.c.fence
        ),
        # A delivery stored before inserts nothing, in the one statement (on PostgreSQL a
        # unique violation would abort the transaction it is part of).
        insert_received=insert(received_commands).on_conflict_do_nothing(
            index_elements=[received_commands.c.source, received_commands.c.delivery_id]
        ),
    )
