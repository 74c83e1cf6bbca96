"""simple: compact markers (simple_compactions)

Revision ID: simple_0001
Revises:
Create Date: 2026-11-26
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "simple_0001"
down_revision: str | None = None
branch_labels: Sequence[str] | None = ("simple",)
depends_on: Sequence[str] | None = "0002_history"

BigIntPK = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "simple_compactions",
        sa.Column("id", BigIntPK, primary_key=True, autoincrement=True),
        sa.Column(
            "conversation_id",
            sa.BigInteger,
            sa.ForeignKey("conversations.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("through_seq", sa.BigInteger, nullable=False),
        sa.Column("summary", sa.Text, nullable=False),
        sa.Column("archive_name", sa.String(200), nullable=False),
        sa.Column("archived_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("messages_compacted", sa.Integer, nullable=False, server_default="0"),
        sa.Column("source_tokens", sa.Integer, nullable=False, server_default="0"),
    )
    op.create_index("ix_simple_compactions_conv", "simple_compactions", ["conversation_id", "id"])


def downgrade() -> None:
    op.drop_index("ix_simple_compactions_conv", table_name="simple_compactions")
    op.drop_table("simple_compactions")
