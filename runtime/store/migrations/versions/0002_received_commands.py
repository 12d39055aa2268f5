"""Received commands: chat clicks stored durably before they are acknowledged.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-29 00:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_ID = 128
_NAME = 255
_ENUM = 32


def upgrade() -> None:
    """Create the received_commands table."""
    op.create_table(
        "received_commands",
        sa.Column("command_id", sa.String(_ID), nullable=False),
        sa.Column("source", sa.String(_ENUM), nullable=False),
        sa.Column("delivery_id", sa.String(_NAME), nullable=False),
        sa.Column("ticket_id", sa.String(_ID), nullable=False),
        sa.Column("correlation", sa.String(_NAME), nullable=False),
        sa.Column("answer", sa.JSON(), nullable=False),
        sa.Column("actor", sa.JSON(), nullable=False),
        sa.Column("reply", sa.JSON(), nullable=True),
        sa.Column("received_at", sa.BigInteger(), nullable=False),
        sa.Column("state", sa.String(_ENUM), nullable=False),
        sa.Column("error_code", sa.String(_ENUM), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("applied_at", sa.BigInteger(), nullable=True),
        sa.PrimaryKeyConstraint("command_id", name="pk_received_commands"),
        sa.UniqueConstraint(
            "source", "delivery_id", name="uq_received_commands_source_delivery_id"
        ),
    )
    op.create_index(
        "ix_received_commands_state_received_at", "received_commands", ["state", "received_at"]
    )


def downgrade() -> None:
    """Drop the received_commands table."""
    op.drop_table("received_commands")
