"""Where each delivered notification left its message, indexed: outbox.posted_in.

``platform:channel`` of the message a notification left, once delivered with a platform
reference (None otherwise), so a run's first message in a channel, which its later
messages there thread under, is one indexed row instead of a read of every notification
of the run. Every notification delivered before the upgrade gets it here.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-03 23:00:00
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Not backward-compatible: the code before delivers notifications without it, and this
# version would not find the messages those left (later messages of their runs would
# post outside the run's thread).
backward_compatible = False

_ID = 128
_NAME = 255
_ENUM = 32
_BATCH = 500

_outbox = sa.table(
    "outbox",
    sa.column("outbox_id", sa.String(_ID)),
    sa.column("destination", sa.JSON()),
    sa.column("state", sa.String(_ENUM)),
    sa.column("platform_ref", sa.JSON(none_as_null=True)),
    sa.column("posted_in", sa.String(_NAME)),
)


def _channel(destination: Mapping[str, Any]) -> str | None:
    """The rule of `runtime.store.records.channel_key` as of this revision."""
    channel = destination.get("channel") or destination.get("channel_id")
    if channel is None or channel == "":
        return None
    platform = destination.get("platform") or "console"
    return f"{platform}:{channel}"


def upgrade() -> None:
    """Add ``outbox.posted_in``, fill it for every delivered notification, index it."""
    with op.batch_alter_table("outbox") as batch:
        batch.add_column(sa.Column("posted_in", sa.String(_NAME), nullable=True))
    bind = op.get_bind()
    found = bind.execute(
        sa.select(_outbox.c.outbox_id, _outbox.c.destination, _outbox.c.platform_ref).where(
            _outbox.c.state == "delivered"
        )
    ).all()
    rows = [
        {"b_outbox_id": row.outbox_id, "b_posted_in": channel}
        for row in found
        if row.platform_ref and (channel := _channel(row.destination or {})) is not None
    ]
    fill = (
        sa.update(_outbox)
        .where(_outbox.c.outbox_id == sa.bindparam("b_outbox_id"))
        .values(posted_in=sa.bindparam("b_posted_in"))
    )
    for start in range(0, len(rows), _BATCH):
        bind.execute(fill, rows[start : start + _BATCH])
    op.create_index(
        "ix_outbox_run_id_posted_in_created_at", "outbox", ["run_id", "posted_in", "created_at"]
    )


def downgrade() -> None:
    """Drop it again."""
    op.drop_index("ix_outbox_run_id_posted_in_created_at", "outbox")
    with op.batch_alter_table("outbox") as batch:
        batch.drop_column("posted_in")
