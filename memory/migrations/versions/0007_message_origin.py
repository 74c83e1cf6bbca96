"""core: message_origins (where a stored message came from; memory/actions/origins.py)

One row per message a channel received with an address people can open again: for
Telegram the chat id, the message id in that chat and the forum topic (thread) id. A
cited message is shown from it as a link (supergroups) or a reply quoting it (private
chats). Deleted with its message (foreign key, and explicitly by memory/storage/forgetting.py).

Revision ID: 0007_message_origin
Revises: 0006_usage
Create Date: 2026-11-26
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007_message_origin"
down_revision: str | None = "0006_usage"
branch_labels: Sequence[str] | None = None
depends_on: Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "message_origins",
        sa.Column(
            "message_id",
            sa.BigInteger,
            sa.ForeignKey("messages.id", ondelete="CASCADE"),
            primary_key=True,
            autoincrement=False,
        ),
        sa.Column("channel", sa.String(32), nullable=False),
        sa.Column("chat_id", sa.BigInteger, nullable=False),
        sa.Column("channel_message_id", sa.BigInteger, nullable=False),
        sa.Column("thread_id", sa.BigInteger),
    )


def downgrade() -> None:
    op.drop_table("message_origins")
