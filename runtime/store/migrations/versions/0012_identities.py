"""One person across edges and step-up: identity links, link codes, and where a ticket
may be decided.

``identity_links`` links a platform's user id to a person; ``link_codes`` keeps the
one-time codes the console shows (by digest) until redeemed or expired;
``tickets.decide_in`` and ``tickets.sso`` say where a step-up ticket may be decided.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-05 02:20:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Not backward-compatible: the code before would let a step-up ticket be decided
# anywhere, ignoring its tickets.decide_in.
backward_compatible = False

_ID = 128
_NAME = 255
_ENUM = 32


def upgrade() -> None:
    """Add the identity tables and the ticket's step-up columns."""
    op.create_table(
        "identity_links",
        sa.Column("identity", sa.String(_NAME), nullable=False),
        sa.Column("person", sa.String(_NAME), nullable=False),
        sa.Column("source", sa.String(_ENUM), nullable=False),
        sa.Column("linked_at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("identity", name="pk_identity_links"),
    )
    op.create_index("ix_identity_links_person", "identity_links", ["person"])
    op.create_table(
        "link_codes",
        sa.Column("digest", sa.String(_ID), nullable=False),
        sa.Column("person", sa.String(_NAME), nullable=False),
        sa.Column("expires_at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("digest", name="pk_link_codes"),
    )
    op.create_index("ix_link_codes_expires_at", "link_codes", ["expires_at"])
    # Plain ALTER TABLE on both engines: SQLite's batch mode would copy the table, which
    # ticket_deciders refers to.
    op.add_column("tickets", sa.Column("decide_in", sa.JSON(none_as_null=True), nullable=True))
    op.add_column("tickets", sa.Column("sso", sa.Boolean(), nullable=True))


def downgrade() -> None:
    """Drop them again."""
    op.drop_column("tickets", "sso")
    op.drop_column("tickets", "decide_in")
    op.drop_index("ix_link_codes_expires_at", "link_codes")
    op.drop_table("link_codes")
    op.drop_index("ix_identity_links_person", "identity_links")
    op.drop_table("identity_links")
