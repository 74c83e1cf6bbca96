"""core: followups, followup_sources, followup_prefs (memory/followups/store.py)

A follow-up is the user's memory, not the channel's: it cites the messages that made it
(`followup_sources`), so forgetting those messages, erasing the owner, and export and
import reach it where the messages live (docs/CHAT.md "Follow-ups" says why it is core).
`followups` holds one row per follow-up: its owner, where it is delivered (channel, chat,
thread, the message it quotes), due time (UTC) and the zone it was set in, its text,
state, who made it, whether it is proactive, a version (bumped by every change, carried
by its buttons) and its delivery claim. `followup_prefs` holds per owner: time zone,
quiet hours, proactive ones off, and a pause (the channel refused delivery: blocked).

Revision ID: 0014_followups
Revises: 0013_group_consent
Create Date: 2026-11-27
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0014_followups"
down_revision: str | None = "0013_group_consent"
branch_labels: Sequence[str] | None = None
depends_on: Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "followups",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True),
        sa.Column("user_id", sa.BigInteger, nullable=False),
        sa.Column("agent_id", sa.String(128), nullable=False),
        sa.Column("session_id", sa.String(255), nullable=False),
        sa.Column("channel", sa.String(32), nullable=False),
        sa.Column("chat_id", sa.BigInteger),
        sa.Column("thread_id", sa.BigInteger),
        sa.Column("quote_message_id", sa.BigInteger),
        sa.Column("due_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("timezone", sa.String(64), nullable=False),
        sa.Column("text", sa.Text, nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("created_by", sa.String(16), nullable=False),
        sa.Column("proactive", sa.Boolean, nullable=False),
        sa.Column("version", sa.Integer, nullable=False),
        sa.Column("confirmed", sa.Boolean, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("claimed_at", sa.DateTime(timezone=True)),
        sa.Column("sent_at", sa.DateTime(timezone=True)),
    )
    # The delivery job's question: what is due now.
    op.create_index("ix_followups_due", "followups", ["state", "due_at"])
    op.create_index("ix_followups_owner", "followups", ["user_id", "agent_id"])
    op.create_table(
        "followup_sources",
        sa.Column(
            "followup_id",
            sa.BigInteger,
            sa.ForeignKey("followups.id", ondelete="CASCADE"),
            primary_key=True,
        ),
        sa.Column("message_id", sa.BigInteger, primary_key=True),
    )
    op.create_index("ix_followup_sources_message", "followup_sources", ["message_id"])
    op.create_table(
        "followup_prefs",
        sa.Column("user_id", sa.BigInteger, primary_key=True),
        sa.Column("agent_id", sa.String(128), primary_key=True),
        sa.Column("timezone", sa.String(64)),
        sa.Column("quiet", sa.String(11)),
        sa.Column("proactive", sa.Boolean, nullable=False),
        sa.Column("paused", sa.Boolean, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("followup_prefs")
    op.drop_index("ix_followup_sources_message", table_name="followup_sources")
    op.drop_table("followup_sources")
    op.drop_index("ix_followups_owner", table_name="followups")
    op.drop_index("ix_followups_due", table_name="followups")
    op.drop_table("followups")
