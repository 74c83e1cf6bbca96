"""bot: telegram_updates marks an answer whose sending failed for good

`undelivered` is set on a text update's row, at once, when its answer was stored but
Telegram could not be reached to send it (5xx or no connection past the delivery
retries). The next start sends the stored answer (`bot.channels.telegram.delivery.resume`); a row merely
not cleared yet (its answer went) stays false and is never sent again.

Revision ID: bot_0004
Revises: bot_0003
Create Date: 2026-11-27
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "bot_0004"
down_revision: str | None = "bot_0003"
branch_labels: Sequence[str] | None = None
depends_on: Sequence[str] | str | None = None


def upgrade() -> None:
    # A plain ADD COLUMN with a default: SQLite needs no table rebuild.
    op.add_column(
        "telegram_updates",
        sa.Column("undelivered", sa.Boolean, nullable=False, server_default=sa.false()),
    )


def downgrade() -> None:
    with op.batch_alter_table("telegram_updates") as batch:
        batch.drop_column("undelivered")
