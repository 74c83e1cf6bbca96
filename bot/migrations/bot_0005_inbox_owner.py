"""bot: telegram_inbox rows carry their owner and lease, and an unreadable mark

`owner` is the instance id of the process handling a parked row, `lease_until` when
its claim lapses unless that process renews it (`bot.channels.telegram.delivery.inbox` says why and how
long); a start takes only rows whose lease has lapsed (NULL: nobody's). Rows parked
before this migration have neither, so the next start takes them, as before.
`unreadable` marks a row whose JSON no longer reads as an Update: kept for an operator,
never replayed again.

Revision ID: bot_0005
Revises: bot_0004
Create Date: 2026-11-26
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "bot_0005"
down_revision: str | None = "bot_0004"
branch_labels: Sequence[str] | None = None
depends_on: Sequence[str] | str | None = None


def upgrade() -> None:
    # Plain ADD COLUMNs: nullable or with a default, so SQLite needs no table rebuild.
    op.add_column("telegram_inbox", sa.Column("owner", sa.Text, nullable=True))
    op.add_column(
        "telegram_inbox", sa.Column("lease_until", sa.DateTime(timezone=True), nullable=True)
    )
    op.add_column(
        "telegram_inbox",
        sa.Column("unreadable", sa.Boolean, nullable=False, server_default=sa.false()),
    )


def downgrade() -> None:
    with op.batch_alter_table("telegram_inbox") as batch:
        for column in ("unreadable", "lease_until", "owner"):
            batch.drop_column(column)
