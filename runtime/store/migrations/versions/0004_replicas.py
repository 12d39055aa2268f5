"""Several replicas: leased outbox deliveries and received commands, shared pacing,
named leases, and the record of applied revisions.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01 00:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Only adds nullable (or defaulted) columns and tables: the code of 0003 still runs.
backward_compatible = True

_ENUM = 32
_NAME = 255


def upgrade() -> None:
    """Add the lease columns and the pacing, lease and revision tables."""
    with op.batch_alter_table("outbox") as batch:
        batch.add_column(sa.Column("channel_key", sa.String(_NAME), nullable=True))
        batch.add_column(sa.Column("lease_owner", sa.String(_NAME), nullable=True))
        batch.add_column(sa.Column("lease_expires_at", sa.BigInteger(), nullable=True))
        batch.add_column(sa.Column("fence", sa.BigInteger(), nullable=False, server_default="0"))
    with op.batch_alter_table("received_commands") as batch:
        batch.add_column(sa.Column("lease_owner", sa.String(_NAME), nullable=True))
        batch.add_column(sa.Column("lease_expires_at", sa.BigInteger(), nullable=True))
    op.create_table(
        "outbox_pacing",
        sa.Column("channel_key", sa.String(_NAME), nullable=False),
        sa.Column("next_at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("channel_key", name="pk_outbox_pacing"),
    )
    op.create_table(
        "leases",
        sa.Column("name", sa.String(_NAME), nullable=False),
        sa.Column("owner", sa.String(_NAME), nullable=False),
        sa.Column("fence", sa.BigInteger(), nullable=False),
        sa.Column("expires_at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("name", name="pk_leases"),
    )
    op.create_table(
        "schema_revisions",
        sa.Column("revision", sa.String(_ENUM), nullable=False),
        sa.Column("down_revision", sa.String(_ENUM), nullable=True),
        sa.Column("backward_compatible", sa.Boolean(), nullable=False),
        sa.Column("applied_at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("revision", name="pk_schema_revisions"),
    )


def downgrade() -> None:
    """Drop them again."""
    op.drop_table("schema_revisions")
    op.drop_table("leases")
    op.drop_table("outbox_pacing")
    with op.batch_alter_table("received_commands") as batch:
        batch.drop_column("lease_expires_at")
        batch.drop_column("lease_owner")
    with op.batch_alter_table("outbox") as batch:
        batch.drop_column("fence")
        batch.drop_column("lease_expires_at")
        batch.drop_column("lease_owner")
        batch.drop_column("channel_key")
