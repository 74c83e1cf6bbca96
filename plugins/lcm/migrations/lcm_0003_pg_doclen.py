"""lcm: document lengths in the PostgreSQL tsvector side tables, for BM25

BM25 needs each document's length (tokens). `lcm_doclen(tsv)` counts it as the tsvector's
positions (what `to_tsvector` kept, stop words left out); the side tables get a `doclen`
column filled by the sync triggers and backfilled here. The conversation index becomes
`(conversation_id) INCLUDE (doclen)`, so a user's document count and mean length are read
from the index alone. No per-table totals row: every insert would update that one row.
SQLite: nothing to do (FTS5 keeps its own lengths).

Revision ID: lcm_0003
Revises: lcm_0002
Create Date: 2026-11-26
"""

from collections.abc import Sequence

from alembic import op

revision: str = "lcm_0003"
down_revision: str | None = "lcm_0002"
branch_labels: Sequence[str] | None = None
depends_on: Sequence[str] | None = None

# side table -> (source table, its key column, side table's key column)
_SIDES = {
    "lcm_messages_tsv": ("messages", "id", "message_id"),
    "lcm_summaries_tsv": ("summaries", "pk", "summary_pk"),
}
TSV = "to_tsvector('english'::regconfig, {})"


def _sync_function(side: str, key: str, side_key: str, *, doclen: bool) -> str:
    cols, values = "conversation_id, tsv", "NEW.conversation_id, v"
    if doclen:
        cols, values = cols + ", doclen", values + ", lcm_doclen(v)"
    sets = ", ".join(f"{c} = EXCLUDED.{c}" for c in cols.split(", "))
    return (
        f"CREATE OR REPLACE FUNCTION {side}_sync() RETURNS trigger LANGUAGE plpgsql AS $$ "
        f"DECLARE v tsvector := {TSV.format('NEW.content')}; "
        f"BEGIN INSERT INTO {side} ({side_key}, {cols}) VALUES (NEW.{key}, {values}) "
        f"ON CONFLICT ({side_key}) DO UPDATE SET {sets}; RETURN NEW; END $$"
    )


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    # Positions per lexeme; a lexeme stored without positions counts once.
    op.execute(
        "CREATE FUNCTION lcm_doclen(tsvector) RETURNS integer LANGUAGE sql IMMUTABLE "
        "PARALLEL SAFE AS $$ SELECT coalesce(sum(coalesce(array_length(positions, 1), 1)), 0)::integer "
        "FROM unnest($1) $$"
    )
    for side, (_source, key, side_key) in _SIDES.items():
        op.execute(f"ALTER TABLE {side} ADD COLUMN doclen integer")
        op.execute(f"UPDATE {side} SET doclen = lcm_doclen(tsv)")
        op.execute(f"ALTER TABLE {side} ALTER COLUMN doclen SET NOT NULL")
        op.execute(_sync_function(side, key, side_key, doclen=True))
        op.execute(f"DROP INDEX ix_{side}_conv")
        op.execute(f"CREATE INDEX ix_{side}_conv ON {side} (conversation_id) INCLUDE (doclen)")


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    for side, (_source, key, side_key) in _SIDES.items():
        op.execute(_sync_function(side, key, side_key, doclen=False))
        op.execute(f"DROP INDEX ix_{side}_conv")
        op.execute(f"ALTER TABLE {side} DROP COLUMN doclen")
        op.execute(f"CREATE INDEX ix_{side}_conv ON {side} (conversation_id)")
    op.execute("DROP FUNCTION lcm_doclen(tsvector)")
