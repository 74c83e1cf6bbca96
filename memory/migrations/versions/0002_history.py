"""core: lossless message history (conversations, messages, message_parts)

Revision ID: 0002_history
Revises: 0001_core
Create Date: 2026-11-26
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002_history"
down_revision: str | None = "0001_core"
branch_labels: Sequence[str] | None = None
depends_on: Sequence[str] | None = None

BigIntPK = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "conversations",
        sa.Column("id", BigIntPK, primary_key=True, autoincrement=True),
        sa.Column("session_id", sa.String(255), nullable=False, unique=True),
        sa.Column("agent_id", sa.String(128), nullable=False),
        sa.Column("user_id", sa.BigInteger, nullable=False),
        sa.Column("channel", sa.String(32), nullable=False, server_default=""),
        sa.Column("title", sa.String(200), nullable=False, server_default=""),
        sa.Column("archived", sa.Boolean, nullable=False, server_default=sa.false()),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_conversations_owner", "conversations", ["user_id", "agent_id"])
    op.create_table(
        "messages",
        sa.Column("id", BigIntPK, primary_key=True, autoincrement=True),
        sa.Column(
            "conversation_id",
            sa.BigInteger,
            sa.ForeignKey("conversations.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("seq", sa.BigInteger, nullable=False),
        sa.Column("role", sa.String(16), nullable=False),
        sa.Column("content", sa.Text, nullable=False, server_default=""),
        sa.Column("token_count", sa.Integer, nullable=False, server_default="0"),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.UniqueConstraint("conversation_id", "seq", name="uq_messages_conv_seq"),
    )
    op.create_index("ix_messages_conv_created", "messages", ["conversation_id", "created_at"])
    op.create_table(
        "message_parts",
        sa.Column("id", BigIntPK, primary_key=True, autoincrement=True),
        sa.Column(
            "message_id",
            sa.BigInteger,
            sa.ForeignKey("messages.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("ordinal", sa.Integer, nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("tool_call_id", sa.String(255)),
        sa.Column("tool_name", sa.String(255)),
        sa.Column("content", sa.Text, nullable=False, server_default=""),
        sa.UniqueConstraint("message_id", "ordinal", name="uq_message_parts_ord"),
    )


def downgrade() -> None:
    op.drop_table("message_parts")
    op.drop_index("ix_messages_conv_created", table_name="messages")
    op.drop_table("messages")
    op.drop_index("ix_conversations_owner", table_name="conversations")
    op.drop_table("conversations")
