"""Approve with edits: a tool call remembers an approver's change of its arguments.

Revision ID: 0008
Revises: 0006
Create Date: 2026-12-01 00:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Only adds a nullable column: the code of the revision before still runs.
backward_compatible = True


def upgrade() -> None:
    """Add ``tool_calls.edit``."""
    with op.batch_alter_table("tool_calls") as batch:
        batch.add_column(sa.Column("edit", sa.JSON(none_as_null=True), nullable=True))


def downgrade() -> None:
    """Drop it again."""
    with op.batch_alter_table("tool_calls") as batch:
        batch.drop_column("edit")
