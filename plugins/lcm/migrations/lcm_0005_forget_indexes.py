"""lcm: indexes that deleting a message or a summary needs (forgetting, #19)

Deleting a row checks every foreign key that points at it (and cascades along it):
without an index on the referencing column that is a scan of the whole table per row
deleted. Nothing was deleted before forgetting existed; now a forget deletes messages
(referenced by `context_items.message_id` and `summary_messages.message_id`) and
summaries (referenced by `context_items.summary_id`): at 100k messages, deleting 120
rebuilt summaries took a second of scans of context_items (bench/RESULTS.md,
"Forgetting"). Partial where the column is mostly NULL.

Revision ID: lcm_0005
Revises: lcm_0004
Create Date: 2026-11-26
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "lcm_0005"
down_revision: str | None = "lcm_0004"
branch_labels: Sequence[str] | None = None
depends_on: Sequence[str] | None = None


def upgrade() -> None:
    op.create_index(
        "ix_context_items_message",
        "context_items",
        ["message_id"],
        sqlite_where=sa.text("message_id IS NOT NULL"),
        postgresql_where=sa.text("message_id IS NOT NULL"),
    )
    op.create_index(
        "ix_context_items_summary",
        "context_items",
        ["summary_id"],
        sqlite_where=sa.text("summary_id IS NOT NULL"),
        postgresql_where=sa.text("summary_id IS NOT NULL"),
    )
    op.create_index("ix_summary_messages_message", "summary_messages", ["message_id"])


def downgrade() -> None:
    op.drop_index("ix_summary_messages_message", table_name="summary_messages")
    op.drop_index("ix_context_items_summary", table_name="context_items")
    op.drop_index("ix_context_items_message", table_name="context_items")
