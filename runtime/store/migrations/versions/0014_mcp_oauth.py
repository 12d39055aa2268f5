"""Sign-ins to MCP servers that use OAuth: mcp_oauth.

One row per MCP server an operator signed in to: its OAuth client registration, tokens
and any sign-in under way, sealed (encrypted with ``SIGNOFF_SECRETS_KEY``) so the
database never holds a token in the clear. Every replica reads the same row.

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-05 05:10:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Backward-compatible: the code before never reads the new table.
backward_compatible = True

_NAME = 255


def upgrade() -> None:
    """Create ``mcp_oauth``."""
    op.create_table(
        "mcp_oauth",
        sa.Column("server", sa.String(_NAME), nullable=False),
        sa.Column("sealed", sa.Text(), nullable=False),
        sa.Column("updated_at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("server", name="pk_mcp_oauth"),
    )


def downgrade() -> None:
    """Drop it again."""
    op.drop_table("mcp_oauth")
