"""bot: mcp_tokens and mcp_accesses, a person's MCP endpoint access

`mcp_tokens`: one row per token a person turned on with `/memory mcp on`: its SHA-256
(never the token), the one memory it reads (user, agent, channel) and its one scope,
when it expires and when it was revoked. `mcp_accesses`: every request made with one
(who, when, which tool, the outcome), which `/memory mcp` lists and the rate limit
counts. An erasure of the person deletes both (bot.mcp.access).

Revision ID: bot_0009
Revises: bot_0008
Create Date: 2026-11-27
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "bot_0009"
down_revision: str | None = "bot_0008"
branch_labels: Sequence[str] | None = None
depends_on: Sequence[str] | str | None = None


def upgrade() -> None:
    op.create_table(
        "mcp_tokens",
        sa.Column("id", sa.String(16), primary_key=True),
        sa.Column("token_sha256", sa.String(64), nullable=False, unique=True),
        sa.Column("user_id", sa.BigInteger, nullable=False),
        sa.Column("agent_id", sa.String(64), nullable=False),
        sa.Column("channel", sa.String(32), nullable=False),
        sa.Column("scope", sa.String(32), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
    )
    op.create_index("ix_mcp_tokens_user", "mcp_tokens", ["user_id", "agent_id"])
    op.create_table(
        "mcp_accesses",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True),
        sa.Column("token_id", sa.String(16), nullable=False),
        sa.Column("user_id", sa.BigInteger, nullable=False),
        sa.Column("tool", sa.String(32), nullable=False),
        sa.Column("outcome", sa.String(16), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_mcp_accesses_token_at", "mcp_accesses", ["token_id", "at"])
    op.create_index("ix_mcp_accesses_user", "mcp_accesses", ["user_id"])


def downgrade() -> None:
    op.drop_table("mcp_accesses")
    op.drop_table("mcp_tokens")
