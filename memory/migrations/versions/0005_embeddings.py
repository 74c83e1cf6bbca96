"""core: embeddings (one vector per source item and model; memory/search/semantic/store.py)

Vectors are float32 bytes in a plain binary column, so stock PostgreSQL (no pgvector)
and SQLite hold them alike; similarity is computed in the process (memory/search/semantic/index.py).

Revision ID: 0005_embeddings
Revises: 0004_search_index
Create Date: 2026-11-28
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005_embeddings"
down_revision: str | None = "0004_search_index"
branch_labels: Sequence[str] | None = None
depends_on: Sequence[str] | None = None

BigIntPK = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "embeddings",
        sa.Column("id", BigIntPK, primary_key=True, autoincrement=True),
        sa.Column("source", sa.String(32), nullable=False),
        sa.Column("item_key", sa.String(255), nullable=False),
        sa.Column("item_id", sa.BigInteger),
        sa.Column("user_id", sa.BigInteger, nullable=False),
        sa.Column("agent_id", sa.String(128), nullable=False),
        sa.Column("model", sa.String(255), nullable=False),
        sa.Column("dim", sa.Integer, nullable=False),
        sa.Column("vector", sa.LargeBinary, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.UniqueConstraint("source", "item_key", "model", name="uq_embeddings_item"),
    )
    # A scope's vectors newer than the cache holds (memory/search/semantic/index.py).
    op.create_index(
        "ix_embeddings_scope", "embeddings", ["user_id", "agent_id", "model", "id", "dim"]
    )
    # The newest item embedded per source and model (memory/search/semantic/backlog.py).
    op.create_index("ix_embeddings_position", "embeddings", ["source", "model", "item_id"])


def downgrade() -> None:
    op.drop_index("ix_embeddings_position", table_name="embeddings")
    op.drop_index("ix_embeddings_scope", table_name="embeddings")
    op.drop_table("embeddings")
