"""bot: telegram_updates, the Telegram updates already handled (redelivery de-duplication)

Revision ID: bot_0001
Revises:
Create Date: 2026-11-26
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "bot_0001"
down_revision: str | None = None
branch_labels: Sequence[str] | None = ("bot",)
# Rows are written in the same transaction as the history's messages (0002_history).
depends_on: Sequence[str] | str | None = "0002_history"


def upgrade() -> None:
    op.create_table(
        "telegram_updates",
        # Update ids are numbered per bot, so the bot's Telegram id is part of the key.
        sa.Column("bot_id", sa.BigInteger, primary_key=True, autoincrement=False),
        sa.Column("update_id", sa.BigInteger, primary_key=True, autoincrement=False),
        sa.Column("handled_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_telegram_updates_handled_at", "telegram_updates", ["handled_at"])


def downgrade() -> None:
    op.drop_index("ix_telegram_updates_handled_at", table_name="telegram_updates")
    op.drop_table("telegram_updates")
