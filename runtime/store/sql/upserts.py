"""The statements that need an engine's own ``INSERT ... ON CONFLICT``."""

from __future__ import annotations

import functools
import importlib
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Insert, bindparam

from runtime.errors import StorageError
from runtime.store.schema import leases, outbox_pacing, received_commands


@dataclass(frozen=True)
class Upserts:
    """The statements that need an engine's own ``INSERT ... ON CONFLICT``."""

    take_slot: Insert
    insert_lease: Insert
    insert_received: Insert


@functools.cache
def upserts_for(dialect: str) -> Upserts:
    if dialect not in ("postgresql", "sqlite"):
        raise StorageError(f"signoff's store runs on SQLite and PostgreSQL, not {dialect}")
    # Imported here: a process on one database never loads the other's dialect.
    module: Any = importlib.import_module(f"sqlalchemy.dialects.{dialect}")
    slot = module.insert(outbox_pacing).values(
        channel_key=bindparam("key"), next_at=bindparam("next_at")
    )
    key = [outbox_pacing.c.channel_key]
    lease = module.insert(leases).values(
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
        insert_received=module.insert(received_commands).on_conflict_do_nothing(
            index_elements=[received_commands.c.source, received_commands.c.delivery_id]
        ),
    )
