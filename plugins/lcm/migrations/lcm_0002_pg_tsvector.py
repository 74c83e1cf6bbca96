"""lcm: stored tsvectors for full-text search on PostgreSQL

lcm_0001 indexed `to_tsvector('english', content)` as an expression. Measured (bench/
lcm_bench.py): when the planner reaches a user's rows through the conversation index, it
recomputes that tsvector for every row it checks and again for ts_rank, about 30 us a row.
The tsvector is now stored in side tables (`lcm_messages_tsv`, `lcm_summaries_tsv`: the
same role as SQLite's FTS5 tables), kept in sync by triggers, with a GIN index on it and a
btree on conversation_id; rows go with their message/summary (ON DELETE CASCADE).
SQLite: nothing to do.

Revision ID: lcm_0002
Revises: lcm_0001
Create Date: 2026-11-26
"""

from collections.abc import Sequence

from alembic import op

revision: str = "lcm_0002"
down_revision: str | None = "lcm_0001"
branch_labels: Sequence[str] | None = None
depends_on: Sequence[str] | None = None

# side table -> (source table, its key column, side table's key column)
_SIDES = {
    "lcm_messages_tsv": ("messages", "id", "message_id"),
    "lcm_summaries_tsv": ("summaries", "pk", "summary_pk"),
}
TSV = "to_tsvector('english'::regconfig, {})"


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    for side, (source, key, side_key) in _SIDES.items():
        op.execute(f"DROP INDEX IF EXISTS ix_lcm_{source}_tsv")
        op.execute(
            f"CREATE TABLE {side} ("
            f"{side_key} BIGINT PRIMARY KEY REFERENCES {source}({key}) ON DELETE CASCADE, "
            "conversation_id BIGINT NOT NULL, tsv tsvector NOT NULL)"
        )
        op.execute(f"CREATE INDEX ix_{side}_conv ON {side} (conversation_id)")
        op.execute(f"CREATE INDEX ix_{side}_gin ON {side} USING gin (tsv)")
        op.execute(
            f"CREATE FUNCTION {side}_sync() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
            f"INSERT INTO {side} ({side_key}, conversation_id, tsv) "
            f"VALUES (NEW.{key}, NEW.conversation_id, {TSV.format('NEW.content')}) "
            f"ON CONFLICT ({side_key}) DO UPDATE SET conversation_id = EXCLUDED.conversation_id, "
            "tsv = EXCLUDED.tsv; RETURN NEW; END $$"
        )
        op.execute(
            f"CREATE TRIGGER {side}_sync AFTER INSERT OR UPDATE OF content, conversation_id "
            f"ON {source} FOR EACH ROW EXECUTE FUNCTION {side}_sync()"
        )
        op.execute(
            f"INSERT INTO {side} ({side_key}, conversation_id, tsv) "
            f"SELECT {key}, conversation_id, {TSV.format('content')} FROM {source}"
        )


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    for side, (source, _key, _side_key) in _SIDES.items():
        op.execute(f"DROP TRIGGER IF EXISTS {side}_sync ON {source}")
        op.execute(f"DROP FUNCTION IF EXISTS {side}_sync()")
        op.execute(f"DROP TABLE IF EXISTS {side}")
        op.execute(
            f"CREATE INDEX ix_lcm_{source}_tsv ON {source} USING gin ({TSV.format('content')})"
        )
