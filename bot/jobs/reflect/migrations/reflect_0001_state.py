"""reflect: per-session watermarks (with review leases) and claimed cycle slots

Revision ID: reflect_0001
Revises:
Create Date: 2026-11-26
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "reflect_0001"
down_revision: str | None = None
branch_labels: Sequence[str] | None = ("reflect",)
# Candidates are found through the shared `conversations` table of core 0002_history.
depends_on: Sequence[str] | str | None = "0002_history"


def upgrade() -> None:
    op.create_table(
        "reflect_watermarks",
        sa.Column("session_id", sa.String(255), primary_key=True),
        sa.Column("agent_id", sa.String(128), nullable=False),
        sa.Column("user_id", sa.BigInteger, nullable=False),
        sa.Column("watermark", sa.DateTime(timezone=True), nullable=True),
        sa.Column("reviewed_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("attempted_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("failures", sa.Integer, nullable=False, server_default="0"),
        sa.Column("last_error", sa.Text, nullable=False, server_default=""),
        sa.Column("lease_token", sa.String(64), nullable=False, server_default=""),
        sa.Column("lease_until", sa.DateTime(timezone=True), nullable=True),
    )
    op.create_table(
        "reflect_slots",
        sa.Column("agent_id", sa.String(128), primary_key=True),
        sa.Column("slot", sa.BigInteger, primary_key=True, autoincrement=False),
        sa.Column("claimed_by", sa.String(255), nullable=False),
        sa.Column("claimed_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("reviewed", sa.Integer, nullable=False, server_default="0"),
        sa.Column("changes", sa.Integer, nullable=False, server_default="0"),
        sa.Column("failed", sa.Integer, nullable=False, server_default="0"),
    )


def downgrade() -> None:
    op.drop_table("reflect_slots")
    op.drop_table("reflect_watermarks")
