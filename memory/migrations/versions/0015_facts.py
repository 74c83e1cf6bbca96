"""core: memory_facts and memory_fact_evidence (the profile as dated facts, issue #29)

`memory_facts`: one row per fact of a (user, agent), the key that groups what supersedes
it, the value, its state (current | superseded | retracted | reverted), when it was true
(valid_from, valid_to) and when it was the current fact of the memory (version_from,
version_to: memory_state.version, the counter profile, soul and rules share), who wrote
it (source, session_id) and what replaced it. `memory_fact_evidence`: the messages that
support a fact, deleted with the message (a forget rewrites the fact first:
memory/facts/forgetting.py).

Revision ID: 0015_facts
Revises: 0014_followups
Create Date: 2026-11-27
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0015_facts"
down_revision: str | None = "0014_followups"
branch_labels: Sequence[str] | None = None
depends_on: Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "memory_facts",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("user_id", sa.BigInteger, nullable=False),
        sa.Column("agent_id", sa.String(128), nullable=False),
        sa.Column("key", sa.String(64), nullable=False),
        sa.Column("value", sa.Text, nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("valid_from", sa.DateTime(timezone=True), nullable=False),
        sa.Column("valid_to", sa.DateTime(timezone=True)),
        sa.Column("version_from", sa.BigInteger, nullable=False),
        sa.Column("version_to", sa.BigInteger),
        sa.Column("source", sa.String(32), nullable=False),
        sa.Column("session_id", sa.String(255), nullable=False, server_default=""),
        sa.Column("replaced_by", sa.String(32)),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )
    # The current facts of a memory, and a key's current fact (every write asks both).
    op.create_index(
        "ix_memory_facts_owner_state_key", "memory_facts", ["user_id", "agent_id", "state", "key"]
    )
    # At most one current fact per key: a write that would leave two fails whole.
    op.create_index(
        "ux_memory_facts_current_key",
        "memory_facts",
        ["user_id", "agent_id", "key"],
        unique=True,
        sqlite_where=sa.text("state = 'current'"),
        postgresql_where=sa.text("state = 'current'"),
    )
    op.create_table(
        "memory_fact_evidence",
        sa.Column(
            "fact_id",
            sa.String(32),
            sa.ForeignKey("memory_facts.id", ondelete="CASCADE"),
            primary_key=True,
        ),
        sa.Column(
            "message_id",
            sa.BigInteger,
            sa.ForeignKey("messages.id", ondelete="CASCADE"),
            primary_key=True,
        ),
    )
    # What a forgotten message supported.
    op.create_index("ix_memory_fact_evidence_message", "memory_fact_evidence", ["message_id"])


def downgrade() -> None:
    op.drop_index("ix_memory_fact_evidence_message", table_name="memory_fact_evidence")
    op.drop_table("memory_fact_evidence")
    op.drop_index("ux_memory_facts_current_key", table_name="memory_facts")
    op.drop_index("ix_memory_facts_owner_state_key", table_name="memory_facts")
    op.drop_table("memory_facts")
