"""bot: chat_imports, how far each imported conversation got (`mnemo memory import-chat`)

One row per imported source conversation (a Telegram chat, a ChatGPT conversation),
keyed by the archived session it became, which already names the user, the agent and
the source. `last_seq`/`last_key` is the last source message stored: each batch's row
update is written in the transaction that stores the batch, so a killed import resumes
exactly after what committed, and a second import of the same file adds nothing.
`compacted`: the bot's background compaction has seen the session since.

In the bot's branch, not core: only the bot's import reads and writes it (an erasure
reaches it through the bot's erase hook, bot.chat_import.ledger).

Revision ID: bot_0007
Revises: bot_0006
Create Date: 2026-11-26
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "bot_0007"
down_revision: str | None = "bot_0006"
branch_labels: Sequence[str] | None = None
depends_on: Sequence[str] | str | None = None


def upgrade() -> None:
    op.create_table(
        "chat_imports",
        sa.Column("session_id", sa.String(255), primary_key=True),
        sa.Column("user_id", sa.BigInteger, nullable=False),
        sa.Column("agent_id", sa.String(128), nullable=False),
        sa.Column("source", sa.String(255), nullable=False),
        sa.Column("last_seq", sa.BigInteger, nullable=False),
        sa.Column("last_key", sa.String(255), nullable=False),
        sa.Column("messages", sa.BigInteger, nullable=False),
        sa.Column("compacted", sa.Boolean, nullable=False, server_default=sa.false()),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_chat_imports_owner", "chat_imports", ["user_id", "agent_id"])


def downgrade() -> None:
    op.drop_index("ix_chat_imports_owner", table_name="chat_imports")
    op.drop_table("chat_imports")
