"""Delegation: sub-agent runs linked to their parent, and the chain on their tickets.

Revision ID: 0006
Revises: 0007
Create Date: 2026-12-01 00:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Only adds nullable (or defaulted) columns and an index: the code before still runs.
backward_compatible = True

_ID = 128
_NAME = 255


def upgrade() -> None:
    """Add the parent link of runs and the chain of tickets."""
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("parent_run_id", sa.String(_ID), nullable=True))
        batch.add_column(sa.Column("parent_call_id", sa.String(_ID), nullable=True))
        batch.add_column(sa.Column("task_key", sa.String(_NAME), nullable=True))
        batch.add_column(sa.Column("depth", sa.Integer(), nullable=False, server_default="0"))
        batch.add_column(sa.Column("lineage", sa.JSON(none_as_null=True), nullable=True))
        batch.create_index(
            "ix_runs_parent_run_id_task_key", ["parent_run_id", "task_key"], unique=True
        )
    with op.batch_alter_table("tickets") as batch:
        batch.add_column(sa.Column("chain", sa.JSON(none_as_null=True), nullable=True))


def downgrade() -> None:
    """Drop them again."""
    with op.batch_alter_table("tickets") as batch:
        batch.drop_column("chain")
    with op.batch_alter_table("runs") as batch:
        batch.drop_index("ix_runs_parent_run_id_task_key")
        batch.drop_column("lineage")
        batch.drop_column("depth")
        batch.drop_column("task_key")
        batch.drop_column("parent_call_id")
        batch.drop_column("parent_run_id")
