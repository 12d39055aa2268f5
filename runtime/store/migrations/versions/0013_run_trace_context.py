"""The trace a run was started in: runs.trace_context.

The W3C trace context (``traceparent``, ``tracestate``) of the span a run was started
under when tracing is on, so every later stretch of the run, on any process, continues
that trace. Null for runs started with tracing off, and for every run before the upgrade.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-05 04:40:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Backward-compatible: the code before neither reads nor writes the nullable column.
backward_compatible = True


def upgrade() -> None:
    """Add ``runs.trace_context``."""
    # A plain ALTER on both engines: SQLite's batch mode would copy the whole runs table.
    op.add_column("runs", sa.Column("trace_context", sa.JSON(none_as_null=True), nullable=True))


def downgrade() -> None:
    """Drop it again."""
    # ALTER TABLE ... DROP COLUMN (SQLite 3.35 or newer): recreating runs, as SQLite's
    # batch mode does, would trip the foreign keys of the rows that name runs.
    op.execute("ALTER TABLE runs DROP COLUMN trace_context")
