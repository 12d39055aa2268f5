"""Who may decide each open ticket, indexed: the ticket_deciders table.

One row per open ticket and decider key (``user:<id>``, ``group:<name>``, ``any``),
written with the ticket and deleted when it closes, so listing what one person may
decide reads their rows only. Every ticket open at the upgrade gets its rows here.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-02 10:00:00
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Not backward-compatible: the code before opens tickets without their rows, and this
# version would not list those tickets to the people who may decide them.
backward_compatible = False

_ID = 128
_NAME = 255
_ENUM = 32
_BATCH = 500

_tickets = sa.table(
    "tickets",
    sa.column("ticket_id", sa.String(_ID)),
    sa.column("run_id", sa.String(_ID)),
    sa.column("call_id", sa.String(_ID)),
    sa.column("target_kind", sa.String(_ENUM)),
    sa.column("requester", sa.String(_NAME)),
    sa.column("approvers", sa.JSON()),
    sa.column("four_eyes", sa.Boolean()),
    sa.column("status", sa.String(_ENUM)),
    sa.column("created_at", sa.BigInteger()),
)
_deciders = sa.table(
    "ticket_deciders",
    sa.column("ticket_id", sa.String(_ID)),
    sa.column("decider", sa.String(_NAME + 8)),
    sa.column("run_id", sa.String(_ID)),
    sa.column("created_at", sa.BigInteger()),
    sa.column("call_id", sa.String(_ID)),
    sa.column("target_kind", sa.String(_ENUM)),
    sa.column("barred", sa.String(_NAME)),
)


def _keys(requester: str | None, approvers: list[str]) -> list[str]:
    """The rule of `runtime.store.records.decider_keys` as of this revision."""
    entries = list(approvers) or (["requester"] if requester is not None else [])
    keys: list[str] = []
    for entry in entries:
        if entry == "*":
            key = "any"
        elif entry == "requester":
            if requester is None:
                continue
            key = f"user:{requester}"
        elif entry.startswith("group:"):
            key = entry
        else:
            key = f"user:{entry}"
        if key not in keys:
            keys.append(key)
    return keys


def upgrade() -> None:
    """Add ``ticket_deciders`` and fill it for every open ticket."""
    op.create_table(
        "ticket_deciders",
        sa.Column("ticket_id", sa.String(_ID), nullable=False),
        sa.Column("decider", sa.String(_NAME + 8), nullable=False),
        sa.Column("run_id", sa.String(_ID), nullable=False),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.Column("call_id", sa.String(_ID), nullable=True),
        sa.Column("target_kind", sa.String(_ENUM), nullable=False),
        sa.Column("barred", sa.String(_NAME), nullable=True),
        sa.ForeignKeyConstraint(
            ["ticket_id"], ["tickets.ticket_id"], name="fk_ticket_deciders_ticket_id_tickets"
        ),
        sa.PrimaryKeyConstraint("ticket_id", "decider", name="pk_ticket_deciders"),
    )
    op.create_index(
        "ix_ticket_deciders_decider_created_at_ticket_id",
        "ticket_deciders",
        ["decider", "created_at", "ticket_id"],
    )
    bind = op.get_bind()
    found = bind.execute(
        sa.select(
            _tickets.c.ticket_id,
            _tickets.c.run_id,
            _tickets.c.call_id,
            _tickets.c.target_kind,
            _tickets.c.requester,
            _tickets.c.approvers,
            _tickets.c.four_eyes,
            _tickets.c.created_at,
        ).where(_tickets.c.status == "open")
    ).all()
    rows: list[dict[str, Any]] = []
    for ticket in found:
        for key in _keys(ticket.requester, list(ticket.approvers or [])):
            rows.append(
                {
                    "ticket_id": ticket.ticket_id,
                    "decider": key,
                    "run_id": ticket.run_id,
                    "created_at": ticket.created_at,
                    "call_id": ticket.call_id,
                    "target_kind": ticket.target_kind,
                    "barred": ticket.requester if ticket.four_eyes else None,
                }
            )
    for start in range(0, len(rows), _BATCH):
        bind.execute(sa.insert(_deciders), rows[start : start + _BATCH])


def downgrade() -> None:
    """Drop it again."""
    op.drop_index("ix_ticket_deciders_decider_created_at_ticket_id", "ticket_deciders")
    op.drop_table("ticket_deciders")
