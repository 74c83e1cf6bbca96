"""core: shared stores (memory_state, memory_changelog, session_snapshots)

Revision ID: 0001_core
Revises:
Create Date: 2026-11-26
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001_core"
down_revision: str | None = None
branch_labels: Sequence[str] | None = ("core",)
depends_on: Sequence[str] | None = None

BigIntPK = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "memory_state",
        sa.Column("user_id", sa.BigInteger, primary_key=True),
        sa.Column("agent_id", sa.String(128), primary_key=True),
        sa.Column("profile", sa.Text, nullable=False, server_default=""),
        sa.Column("soul", sa.Text, nullable=False, server_default=""),
        sa.Column("constraints", sa.Text, nullable=False, server_default="[]"),
        sa.Column("version", sa.BigInteger, nullable=False, server_default="0"),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_table(
        "memory_changelog",
        sa.Column("id", BigIntPK, primary_key=True, autoincrement=True),
        sa.Column("user_id", sa.BigInteger, nullable=False),
        sa.Column("agent_id", sa.String(128), nullable=False),
        sa.Column("session_id", sa.String(255), nullable=False, server_default=""),
        sa.Column("scope", sa.String(32), nullable=False),
        sa.Column("action", sa.String(32), nullable=False),
        sa.Column("source", sa.String(32), nullable=False),
        sa.Column("version_before", sa.BigInteger),
        sa.Column("version_after", sa.BigInteger),
        sa.Column("before_text", sa.Text, nullable=False, server_default=""),
        sa.Column("after_text", sa.Text, nullable=False, server_default=""),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index(
        "ix_memory_changelog_owner", "memory_changelog", ["user_id", "agent_id", "scope", "id"]
    )
    op.create_table(
        "session_snapshots",
        sa.Column("session_id", sa.String(255), primary_key=True),
        sa.Column("user_id", sa.BigInteger, nullable=False),
        sa.Column("agent_id", sa.String(128), nullable=False),
        sa.Column("version", sa.BigInteger, nullable=False, server_default="0"),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("session_snapshots")
    op.drop_index("ix_memory_changelog_owner", table_name="memory_changelog")
    op.drop_table("memory_changelog")
    op.drop_table("memory_state")
