"""core: group consent (who wrote a group message; members who opted out)

- `message_origins.sender_id`: the channel's id of the person who wrote a stored user
  message (Telegram's user id), so `/memory forget mine` in a group finds what a member
  said there. NULL for messages stored before this revision and for the bot's own; an
  index on (sender_id) serves the member's lookup.
- `memory_optouts`: one row per (memory scope, agent, member) whose future messages in
  that scope are not stored (`/memory optout`; `/memory optin` deletes the row). The
  scope is the group's chat id (memory.storage.forgetting.shared_scope). memory/consent/.

Revision ID: 0013_group_consent
Revises: 0012_search_postings
Create Date: 2026-11-27
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0013_group_consent"
down_revision: str | None = "0012_search_postings"
branch_labels: Sequence[str] | None = None
depends_on: Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("message_origins", sa.Column("sender_id", sa.BigInteger, nullable=True))
    op.create_index("ix_message_origins_sender", "message_origins", ["sender_id"])
    op.create_table(
        "memory_optouts",
        sa.Column("user_id", sa.BigInteger, primary_key=True, autoincrement=False),
        sa.Column("agent_id", sa.String(128), primary_key=True),
        sa.Column("member_id", sa.BigInteger, primary_key=True, autoincrement=False),
        sa.Column("since", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("memory_optouts")
    op.drop_index("ix_message_origins_sender", table_name="message_origins")
    with op.batch_alter_table("message_origins") as batch:
        batch.drop_column("sender_id")
