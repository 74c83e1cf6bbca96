"""core: forget_requests (pending `/memory forget` confirmations; memory/storage/forget_requests.py)

One row per forget preview awaiting its confirmation, under the random code the
confirmation names, so any replica can confirm it: the conversation (base session) and
owner it belongs to, what it would forget (message ids and the words forgotten by, or
everything), when it was asked, and where the preview with its buttons was shown (chat
and message id) so ending the request can take them off. A request ends by a
conditional UPDATE to `done` that clears what it held; the row goes once its buttons
are off.

Revision ID: 0008_forget_requests
Revises: 0007_message_origin
Create Date: 2026-11-27
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008_forget_requests"
down_revision: str | None = "0007_message_origin"
branch_labels: Sequence[str] | None = None
depends_on: Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "forget_requests",
        sa.Column("code", sa.String(16), primary_key=True),
        sa.Column("base_session_id", sa.String(255), nullable=False),
        sa.Column("user_id", sa.BigInteger, nullable=False),
        sa.Column("agent_id", sa.String(128), nullable=False),
        sa.Column("everything", sa.Boolean, nullable=False),
        sa.Column("message_ids", sa.Text),
        sa.Column("needles", sa.Text),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("chat_id", sa.BigInteger),
        sa.Column("shown_message_id", sa.BigInteger),
    )
    # A conversation's live request (confirm, cancel, supersede).
    op.create_index("ix_forget_requests_session", "forget_requests", ["base_session_id", "state"])
    # The previews of a chat whose buttons are due to go.
    op.create_index("ix_forget_requests_chat", "forget_requests", ["chat_id"])


def downgrade() -> None:
    op.drop_index("ix_forget_requests_chat", table_name="forget_requests")
    op.drop_index("ix_forget_requests_session", table_name="forget_requests")
    op.drop_table("forget_requests")
