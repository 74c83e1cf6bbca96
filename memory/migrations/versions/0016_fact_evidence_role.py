"""core: memory_fact_evidence.role (what a cited message does for its fact)

`support`: the message says the fact (a set, a restatement, a merge); `retraction`: it
says the fact stopped (a `retract`). A forget tells them apart: a fact whose support is
all forgotten goes, a retraction whose messages are all forgotten never happened and
the fact reopens (memory/facts/forgetting.py). Rows written before this revision are
`support`: which of a retracted fact's messages said it stopped was not recorded.

Revision ID: 0016_fact_evidence_role
Revises: 0015_facts
Create Date: 2026-11-28
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0016_fact_evidence_role"
down_revision: str | None = "0015_facts"
branch_labels: Sequence[str] | None = None
depends_on: Sequence[str] | None = None


def upgrade() -> None:
    op.add_column(
        "memory_fact_evidence",
        sa.Column("role", sa.String(16), nullable=False, server_default="support"),
    )


def downgrade() -> None:
    with op.batch_alter_table("memory_fact_evidence") as batch:
        batch.drop_column("role")
