"""bot: people, the names the chat shows for a user or group id

One row per id a memory is kept under (a Telegram user, or a group's chat id): the
display name and @username the last update carried, so the operator console can say
"Alice (@alice)" instead of 1001. Written when they change (bot.conversation.people);
an erasure deletes the row.

Revision ID: bot_0008
Revises: bot_0007
Create Date: 2026-11-27
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "bot_0008"
down_revision: str | None = "bot_0007"
branch_labels: Sequence[str] | None = None
depends_on: Sequence[str] | str | None = None


def upgrade() -> None:
    op.create_table(
        "people",
        sa.Column("user_id", sa.BigInteger, primary_key=True),
        sa.Column("name", sa.String(256), nullable=False),
        sa.Column("username", sa.String(64), nullable=False, server_default=""),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("people")
