"""bot: telegram_updates remembers where a stored message's answer is due

A text update's row (written with the user's message) now also says which session the
message went to and where to answer it (chat, forum topic, the message itself), and
`resume` is true until the turn ends without an answer to give later. A stop or crash
between storing the message and answering it leaves `resume` true, and the next start
answers it (`bot.channels.telegram.delivery.resume`). Rows of commands and older rows keep `resume` false.

Revision ID: bot_0002
Revises: bot_0001
Create Date: 2026-11-26
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "bot_0002"
down_revision: str | None = "bot_0001"
branch_labels: Sequence[str] | None = None
depends_on: Sequence[str] | str | None = None

_COLUMNS = ("session_id", "user_id", "chat_id", "thread_id", "message_id", "resume")


def upgrade() -> None:
    # Plain ADD COLUMNs: nullable or with a default, so SQLite needs no table rebuild.
    op.add_column("telegram_updates", sa.Column("session_id", sa.Text, nullable=True))
    op.add_column("telegram_updates", sa.Column("user_id", sa.BigInteger, nullable=True))
    op.add_column("telegram_updates", sa.Column("chat_id", sa.BigInteger, nullable=True))
    op.add_column("telegram_updates", sa.Column("thread_id", sa.BigInteger, nullable=True))
    op.add_column("telegram_updates", sa.Column("message_id", sa.BigInteger, nullable=True))
    op.add_column(
        "telegram_updates",
        sa.Column("resume", sa.Boolean, nullable=False, server_default=sa.false()),
    )


def downgrade() -> None:
    with op.batch_alter_table("telegram_updates") as batch:
        for column in reversed(_COLUMNS):
            batch.drop_column(column)
