"""Initial schema: runs, tool calls, tickets, events, outbox, idempotency keys.

Revision ID: 0001
Revises:
Create Date: 2026-01-01 00:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_ID = 128
_NAME = 255
_ENUM = 32


def upgrade() -> None:
    """Create every table and index."""
    op.create_table(
        "runs",
        sa.Column("run_id", sa.String(_ID), nullable=False),
        sa.Column("thread_id", sa.String(_ID), nullable=False),
        sa.Column("agent", sa.String(_NAME), nullable=False),
        sa.Column("agent_version", sa.String(_NAME), nullable=False),
        sa.Column("status", sa.String(_ENUM), nullable=False),
        sa.Column("input", sa.Text(), nullable=False),
        sa.Column("requester", sa.String(_NAME), nullable=True),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.Column("updated_at", sa.BigInteger(), nullable=False),
        sa.Column("origin", sa.JSON(), nullable=False),
        sa.Column("messages", sa.JSON(), nullable=False),
        sa.Column("turns", sa.Integer(), nullable=False),
        sa.Column("prompt_tokens", sa.BigInteger(), nullable=False),
        sa.Column("completion_tokens", sa.BigInteger(), nullable=False),
        sa.Column("usage_incomplete", sa.Boolean(), nullable=False),
        sa.Column("model_attempt", sa.Integer(), nullable=False),
        sa.Column("model_in_flight", sa.Boolean(), nullable=False),
        sa.Column("batch", sa.Integer(), nullable=False),
        sa.Column("final_text", sa.Text(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("pause_requested", sa.Boolean(), nullable=False),
        sa.Column("cancel_requested", sa.Boolean(), nullable=False),
        sa.Column("lease_owner", sa.String(_NAME), nullable=True),
        sa.Column("lease_expires_at", sa.BigInteger(), nullable=True),
        sa.Column("fence", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("run_id", name="pk_runs"),
    )
    op.create_index("ix_runs_status_updated_at", "runs", ["status", "updated_at"])
    op.create_index("ix_runs_thread_id_created_at", "runs", ["thread_id", "created_at"])
    op.create_index("ix_runs_created_at", "runs", ["created_at"])

    op.create_table(
        "tool_calls",
        sa.Column("call_id", sa.String(_ID), nullable=False),
        sa.Column("run_id", sa.String(_ID), nullable=False),
        sa.Column("batch", sa.Integer(), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("model_call_id", sa.String(_NAME), nullable=False),
        sa.Column("tool", sa.String(_NAME), nullable=False),
        sa.Column("args", sa.JSON(), nullable=False),
        sa.Column("state", sa.String(_ENUM), nullable=False),
        sa.Column("replay_policy", sa.String(_ENUM), nullable=False),
        sa.Column("execution_key", sa.String(_NAME), nullable=False),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.Column("updated_at", sa.BigInteger(), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("result", sa.JSON(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("answer", sa.JSON(none_as_null=True), nullable=True),
        sa.Column("decided_by", sa.JSON(none_as_null=True), nullable=True),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.ForeignKeyConstraint(["run_id"], ["runs.run_id"], name="fk_tool_calls_run_id_runs"),
        sa.PrimaryKeyConstraint("call_id", name="pk_tool_calls"),
    )
    op.create_index("ix_tool_calls_run_id_batch_seq", "tool_calls", ["run_id", "batch", "seq"])
    op.create_index("ix_tool_calls_execution_key", "tool_calls", ["execution_key"], unique=True)

    op.create_table(
        "tickets",
        sa.Column("ticket_id", sa.String(_ID), nullable=False),
        sa.Column("correlation", sa.String(_NAME), nullable=False),
        sa.Column("run_id", sa.String(_ID), nullable=False),
        sa.Column("thread_id", sa.String(_ID), nullable=False),
        sa.Column("agent", sa.String(_NAME), nullable=False),
        sa.Column("agent_version", sa.String(_NAME), nullable=False),
        sa.Column("catalog_fingerprint", sa.String(_NAME), nullable=False),
        sa.Column("call_id", sa.String(_ID), nullable=True),
        sa.Column("target_kind", sa.String(_ENUM), nullable=False),
        sa.Column("target", sa.JSON(), nullable=False),
        sa.Column("requester", sa.String(_NAME), nullable=True),
        sa.Column("approvers", sa.JSON(), nullable=False),
        sa.Column("four_eyes", sa.Boolean(), nullable=False),
        sa.Column("deadline", sa.BigInteger(), nullable=True),
        sa.Column("status", sa.String(_ENUM), nullable=False),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.Column("decision", sa.JSON(none_as_null=True), nullable=True),
        sa.Column("decided_by", sa.String(_NAME), nullable=True),
        sa.Column("decided_at", sa.BigInteger(), nullable=True),
        sa.ForeignKeyConstraint(["run_id"], ["runs.run_id"], name="fk_tickets_run_id_runs"),
        sa.PrimaryKeyConstraint("ticket_id", name="pk_tickets"),
    )
    op.create_index("ix_tickets_run_id_created_at", "tickets", ["run_id", "created_at"])
    op.create_index("ix_tickets_status_deadline", "tickets", ["status", "deadline"])
    op.create_index("ix_tickets_status_created_at", "tickets", ["status", "created_at"])
    op.create_index("ix_tickets_call_id_status", "tickets", ["call_id", "status"])

    op.create_table(
        "events",
        sa.Column(
            "seq",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("run_id", sa.String(_ID), nullable=False),
        sa.Column("at", sa.BigInteger(), nullable=False),
        sa.Column("kind", sa.String(_NAME), nullable=False),
        sa.Column("data", sa.JSON(), nullable=False),
        sa.Column("actor", sa.String(_NAME), nullable=True),
        sa.ForeignKeyConstraint(["run_id"], ["runs.run_id"], name="fk_events_run_id_runs"),
        sa.PrimaryKeyConstraint("seq", name="pk_events"),
    )
    op.create_index("ix_events_run_id_seq", "events", ["run_id", "seq"])

    op.create_table(
        "outbox",
        sa.Column("outbox_id", sa.String(_ID), nullable=False),
        sa.Column("run_id", sa.String(_ID), nullable=False),
        sa.Column("kind", sa.String(_NAME), nullable=False),
        sa.Column("payload", sa.JSON(), nullable=False),
        sa.Column("destination", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.Column("next_attempt_at", sa.BigInteger(), nullable=False),
        sa.Column("ticket_id", sa.String(_ID), nullable=True),
        sa.Column("state", sa.String(_ENUM), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("platform_ref", sa.JSON(none_as_null=True), nullable=True),
        sa.Column("delivered_at", sa.BigInteger(), nullable=True),
        sa.ForeignKeyConstraint(["run_id"], ["runs.run_id"], name="fk_outbox_run_id_runs"),
        sa.PrimaryKeyConstraint("outbox_id", name="pk_outbox"),
    )
    op.create_index("ix_outbox_state_next_attempt_at", "outbox", ["state", "next_attempt_at"])
    op.create_index("ix_outbox_ticket_id_kind", "outbox", ["ticket_id", "kind"])
    op.create_index("ix_outbox_run_id_created_at", "outbox", ["run_id", "created_at"])

    op.create_table(
        "idempotency_keys",
        sa.Column("scope", sa.String(_NAME), nullable=False),
        sa.Column("key", sa.String(_NAME), nullable=False),
        sa.Column("fingerprint", sa.String(_NAME), nullable=False),
        sa.Column("run_id", sa.String(_ID), nullable=False),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("scope", "key", name="pk_idempotency_keys"),
    )


def downgrade() -> None:
    """Drop everything `upgrade` created."""
    for table in ("idempotency_keys", "outbox", "events", "tickets", "tool_calls", "runs"):
        op.drop_table(table)
