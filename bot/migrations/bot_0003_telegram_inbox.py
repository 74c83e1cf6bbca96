"""bot: telegram_inbox, updates parked while they wait behind their chat's turn

Revision ID: bot_0003
Revises: bot_0002
Create Date: 2026-11-26
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "bot_0003"
down_revision: str | None = "bot_0002"
branch_labels: Sequence[str] | None = None
depends_on: Sequence[str] | str | None = None


def upgrade() -> None:
    op.create_table(
        "telegram_inbox",
        sa.Column("bot_id", sa.BigInteger, primary_key=True, autoincrement=False),
        sa.Column("update_id", sa.BigInteger, primary_key=True, autoincrement=False),
        sa.Column("payload", sa.Text, nullable=False),  # the update as Telegram's JSON
        sa.Column("parked_at", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("telegram_inbox")
