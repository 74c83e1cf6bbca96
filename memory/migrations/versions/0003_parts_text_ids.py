"""core: message_parts.tool_call_id and tool_name become TEXT

Both hold strings the model chooses: a tool call's id is opaque (some providers send ids
far longer than 255 characters) and its function name is whatever the model asked for,
even a tool that does not exist. On PostgreSQL a VARCHAR(255) refused such a row and the
assistant's whole turn was lost. Every other VARCHAR of the history holds our own values
(role, kind, session and agent ids, channel) or text we cut first (title).

PostgreSQL: VARCHAR -> TEXT is binary-coercible, so the table is not rewritten, and
message_parts has no index or trigger on these columns. SQLite does not enforce VARCHAR
lengths, so nothing is done there: rebuilding the table (batch mode) would buy nothing
and only copy every row.

Revision ID: 0003_parts_text_ids
Revises: 0002_history
Create Date: 2026-11-27
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003_parts_text_ids"
down_revision: str | None = "0002_history"
branch_labels: Sequence[str] | None = None
depends_on: Sequence[str] | None = None

_COLUMNS = ("tool_call_id", "tool_name")


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    for column in _COLUMNS:
        op.alter_column(
            "message_parts",
            column,
            type_=sa.Text(),
            existing_type=sa.String(255),
            existing_nullable=True,
        )


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    # Longer values cannot go back into VARCHAR(255): they are cut rather than failing
    # the downgrade (a call and its result are cut alike, so they still pair up).
    for column in _COLUMNS:
        op.alter_column(
            "message_parts",
            column,
            type_=sa.String(255),
            existing_type=sa.Text(),
            existing_nullable=True,
            postgresql_using=f"left({column}, 255)",
        )
