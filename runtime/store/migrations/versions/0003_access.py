"""Access: indexes for what each user may see, revoked console sessions, and forgetting
webhook signatures once their time window has passed.

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01 00:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_NAME = 255


def upgrade() -> None:
    """Add the indexes and the revoked_sessions table."""
    op.create_index("ix_runs_requester_created_at", "runs", ["requester", "created_at"])
    op.create_index("ix_tickets_decided_by", "tickets", ["decided_by"])
    op.create_index(
        "ix_idempotency_keys_scope_created_at", "idempotency_keys", ["scope", "created_at"]
    )
    op.create_table(
        "revoked_sessions",
        sa.Column("session_id", sa.String(_NAME), nullable=False),
        sa.Column("expires_at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("session_id", name="pk_revoked_sessions"),
    )
    op.create_index("ix_revoked_sessions_expires_at", "revoked_sessions", ["expires_at"])


def downgrade() -> None:
    """Drop what `upgrade` added."""
    op.drop_table("revoked_sessions")
    op.drop_index("ix_idempotency_keys_scope_created_at", table_name="idempotency_keys")
    op.drop_index("ix_tickets_decided_by", table_name="tickets")
    op.drop_index("ix_runs_requester_created_at", table_name="runs")
