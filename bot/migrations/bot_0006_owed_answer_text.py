"""bot: telegram_updates keeps the text of an answer owed to the user

`answer` is written with the `undelivered` mark: the answer was stored in the history
but Telegram did not take it (flood control, 5xx, no connection). The next start sends
every such answer from here, in order, each quoting its message (`bot.channels.telegram.delivery.resume`):
no model call, and no need to find an older answer in the history. Cleared (NULL) when
the answer went. Rows marked before this migration have none: the next start reads the
latest answer back from the history, as before.

Revision ID: bot_0006
Revises: bot_0005
Create Date: 2026-11-28
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "bot_0006"
down_revision: str | None = "bot_0005"
branch_labels: Sequence[str] | None = None
depends_on: Sequence[str] | str | None = None


def upgrade() -> None:
    # A nullable ADD COLUMN: SQLite needs no table rebuild.
    op.add_column("telegram_updates", sa.Column("answer", sa.Text, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("telegram_updates") as batch:
        batch.drop_column("answer")
