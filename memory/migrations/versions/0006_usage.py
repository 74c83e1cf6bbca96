"""core: usage_records (what every model call cost; memory/storage/usage.py)

One row per model call: chat rounds, summaries, reflect, search and stored-item
embeddings, transcriptions; the tokens the server reported (or the estimate, flagged),
the model, the kind, the (user, agent, session) it was for and when. `id` is the
caller's (a random hex string), so writing a row again after an uncertain transaction
is harmless.

Revision ID: 0006_usage
Revises: 0005_embeddings
Create Date: 2026-11-26
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006_usage"
down_revision: str | None = "0005_embeddings"
branch_labels: Sequence[str] | None = None
depends_on: Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "usage_records",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("user_id", sa.BigInteger, nullable=False),
        sa.Column("agent_id", sa.String(128), nullable=False),
        sa.Column("session_id", sa.String(255), nullable=False),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("model", sa.String(255), nullable=False),
        sa.Column("prompt_tokens", sa.BigInteger, nullable=False),
        sa.Column("cached_tokens", sa.BigInteger, nullable=False),
        sa.Column("completion_tokens", sa.BigInteger, nullable=False),
        sa.Column("estimated", sa.Boolean, nullable=False),
    )
    # A user's tokens today and this month (limits, /memory status).
    op.create_index("ix_usage_user_at", "usage_records", ["user_id", "at"])
    # Reports over a period, and the background guard's window over everyone.
    op.create_index("ix_usage_at", "usage_records", ["at", "kind"])


def downgrade() -> None:
    op.drop_index("ix_usage_at", table_name="usage_records")
    op.drop_index("ix_usage_user_at", table_name="usage_records")
    op.drop_table("usage_records")
