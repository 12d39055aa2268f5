"""Transcripts written by appending: the run_messages table.

A run's row keeps only its newest transcript entries (``runs.messages`` becomes
``runs.recent_messages``); older ones move to ``run_messages``, one row each, written
once (``runs.sealed_messages`` counts them). Existing transcripts stay where they are,
as the newest entries of their runs, and move the next time their run is written with
more than a few entries.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-02 00:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Not backward-compatible: the code before reads and rewrites ``runs.messages`` as the
# whole transcript. The column is renamed, so that code fails on every statement about
# a run instead of working on part of a transcript.
backward_compatible = False

_ID = 128

_runs = sa.table(
    "runs",
    sa.column("run_id", sa.String(_ID)),
    sa.column("recent_messages", sa.JSON()),
    sa.column("sealed_messages", sa.Integer()),
)
_run_messages = sa.table(
    "run_messages",
    sa.column("run_id", sa.String(_ID)),
    sa.column("seq", sa.Integer()),
    sa.column("message", sa.JSON()),
)


def upgrade() -> None:
    """Add ``run_messages`` and ``runs.sealed_messages``; rename ``runs.messages``."""
    op.create_table(
        "run_messages",
        sa.Column("run_id", sa.String(_ID), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("message", sa.JSON(), nullable=False),
        sa.ForeignKeyConstraint(["run_id"], ["runs.run_id"], name="fk_run_messages_run_id_runs"),
        sa.PrimaryKeyConstraint("run_id", "seq", name="pk_run_messages"),
    )
    op.add_column(
        "runs", sa.Column("sealed_messages", sa.Integer(), nullable=False, server_default="0")
    )
    op.execute("ALTER TABLE runs RENAME COLUMN messages TO recent_messages")


def downgrade() -> None:
    """Put every transcript back whole in ``runs.messages``; drop what upgrade added."""
    bind = op.get_bind()
    apart = bind.execute(
        sa.select(_runs.c.run_id, _runs.c.recent_messages).where(_runs.c.sealed_messages > 0)
    ).all()
    for run_id, recent in apart:
        older = bind.execute(
            sa.select(_run_messages.c.message)
            .where(_run_messages.c.run_id == run_id)
            .order_by(_run_messages.c.seq)
        ).scalars()
        bind.execute(
            sa.update(_runs)
            .where(_runs.c.run_id == run_id)
            .values(recent_messages=[*older, *recent], sealed_messages=0)
        )
    op.drop_table("run_messages")
    # Native on PostgreSQL and on SQLite since 3.35 (a table rebuild would have to
    # drop `runs`, which other tables refer to).
    op.execute("ALTER TABLE runs DROP COLUMN sealed_messages")
    op.execute("ALTER TABLE runs RENAME COLUMN recent_messages TO messages")
