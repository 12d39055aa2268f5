"""Standing grants: the grants table.

Revision ID: 0007
Revises: 0004
Create Date: 2026-12-01 00:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Only adds a table: the code of the revision before still runs.
backward_compatible = True

_ID = 128
_NAME = 255
_ENUM = 32


def upgrade() -> None:
    """Add the grants table and its indexes."""
    op.create_table(
        "grants",
        sa.Column("grant_id", sa.String(_ID), nullable=False),
        sa.Column("agent", sa.String(_NAME), nullable=False),
        sa.Column("agent_version", sa.String(_NAME), nullable=False),
        sa.Column("catalog_fingerprint", sa.String(_NAME), nullable=False),
        sa.Column("tool", sa.String(_NAME), nullable=False),
        sa.Column("scope", sa.String(_ENUM), nullable=False),
        sa.Column("run_id", sa.String(_ID), nullable=False),
        sa.Column("thread_id", sa.String(_ID), nullable=False),
        sa.Column("requester", sa.String(_NAME), nullable=True),
        sa.Column("arg_constraint", sa.JSON(none_as_null=True), nullable=True),
        sa.Column("granted_by", sa.String(_NAME), nullable=False),
        sa.Column("granted_by_name", sa.String(_NAME), nullable=True),
        sa.Column("platform", sa.String(_ENUM), nullable=False),
        sa.Column("ticket_id", sa.String(_ID), nullable=True),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.Column("expires_at", sa.BigInteger(), nullable=True),
        sa.Column("revoked_at", sa.BigInteger(), nullable=True),
        sa.Column("revoked_by", sa.String(_NAME), nullable=True),
        sa.ForeignKeyConstraint(["run_id"], ["runs.run_id"], name="fk_grants_run_id_runs"),
        sa.PrimaryKeyConstraint("grant_id", name="pk_grants"),
    )
    op.create_index("ix_grants_run_id_created_at", "grants", ["run_id", "created_at"])
    op.create_index("ix_grants_thread_id_tool", "grants", ["thread_id", "tool"])
    op.create_index("ix_grants_granted_by", "grants", ["granted_by"])
    op.create_index("ix_grants_requester", "grants", ["requester"])
    op.create_index("ix_grants_created_at", "grants", ["created_at"])


def downgrade() -> None:
    """Drop the grants table."""
    op.drop_table("grants")
