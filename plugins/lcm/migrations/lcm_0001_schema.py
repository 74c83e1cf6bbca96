"""lcm: summary DAG, context window and search indexes

Tables summaries, context_items, summary_messages, summary_parents (see
plugins/lcm/models.py), plus the search indexes over messages and summaries:

- SQLite: contentless FTS5 tables kept in sync by triggers, one with the porter stemmer
  (full_text, bm25-ranked) and one with the trigram tokenizer (substring). Each row has a
  `scope` column holding `<c{conversation_id}>`, so a search restricted to some
  conversations is answered by the index itself (`scope : ("<c1>" OR ...) AND ...`)
  instead of filtering every global hit. Contentless, because the text is already in
  messages/summaries: snippets are cut from there.
- PostgreSQL: GIN indexes on `to_tsvector('english', content)` (websearch_to_tsquery +
  ts_rank) and on `content gin_trgm_ops` (pg_trgm, serves ILIKE '%x%').

The messages table is core's; this branch only adds indexes and triggers to it, so a
deployment that runs another provider keeps the same raw history.

Revision ID: lcm_0001
Revises:
Create Date: 2026-11-26
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "lcm_0001"
down_revision: str | None = None
branch_labels: Sequence[str] | None = ("lcm",)
depends_on: Sequence[str] | None = "0002_history"

BigIntPK = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
SUMMARY_ID = sa.String(40)

# (fts table, tokenizer) pairs; every row is (rowid, scope, content).
_SQLITE_FTS = {
    "messages": (
        ("lcm_messages_fts", "porter unicode61 remove_diacritics 2"),
        ("lcm_messages_trgm", "trigram"),
    ),
    "summaries": (
        ("lcm_summaries_fts", "porter unicode61 remove_diacritics 2"),
        ("lcm_summaries_trgm", "trigram"),
    ),
}
_ROWID = {"messages": "id", "summaries": "pk"}


def upgrade() -> None:
    op.create_table(
        "summaries",
        sa.Column("pk", BigIntPK, primary_key=True, autoincrement=True),
        sa.Column("id", SUMMARY_ID, nullable=False, unique=True),
        sa.Column(
            "conversation_id",
            sa.BigInteger,
            sa.ForeignKey("conversations.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("depth", sa.Integer, nullable=False),
        sa.Column("content", sa.Text, nullable=False),
        sa.Column("token_count", sa.Integer, nullable=False),
        sa.Column("earliest_at", sa.DateTime(timezone=True)),
        sa.Column("latest_at", sa.DateTime(timezone=True)),
        sa.Column("descendant_count", sa.Integer, nullable=False),
        sa.Column("descendant_token_count", sa.BigInteger, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint("kind IN ('leaf', 'condensed')", name="ck_summaries_kind"),
    )
    op.create_index("ix_summaries_conversation", "summaries", ["conversation_id", "created_at"])
    op.create_table(
        "context_items",
        sa.Column(
            "conversation_id",
            sa.BigInteger,
            sa.ForeignKey("conversations.id", ondelete="CASCADE"),
            primary_key=True,
        ),
        sa.Column("ordinal", sa.BigInteger, primary_key=True),
        sa.Column("message_id", sa.BigInteger, sa.ForeignKey("messages.id", ondelete="CASCADE")),
        sa.Column("summary_id", SUMMARY_ID, sa.ForeignKey("summaries.id", ondelete="CASCADE")),
        sa.Column("token_count", sa.Integer, nullable=False),
        sa.CheckConstraint(
            "(message_id IS NULL) <> (summary_id IS NULL)", name="ck_context_items_one_ref"
        ),
    )
    op.create_table(
        "summary_messages",
        sa.Column(
            "summary_id",
            SUMMARY_ID,
            sa.ForeignKey("summaries.id", ondelete="CASCADE"),
            primary_key=True,
        ),
        sa.Column("ordinal", sa.Integer, primary_key=True),
        sa.Column(
            "message_id",
            sa.BigInteger,
            sa.ForeignKey("messages.id", ondelete="CASCADE"),
            nullable=False,
        ),
    )
    op.create_table(
        "summary_parents",
        sa.Column(
            "summary_id",
            SUMMARY_ID,
            sa.ForeignKey("summaries.id", ondelete="CASCADE"),
            primary_key=True,
        ),
        sa.Column("ordinal", sa.Integer, primary_key=True),
        sa.Column(
            "child_id",
            SUMMARY_ID,
            sa.ForeignKey("summaries.id", ondelete="CASCADE"),
            nullable=False,
        ),
    )
    # Parents of a summary (describe, the XML <parents>) are looked up by child.
    op.create_index("ix_summary_parents_child", "summary_parents", ["child_id"])

    dialect = op.get_bind().dialect.name
    if dialect == "sqlite":
        for source, indexes in _SQLITE_FTS.items():
            for fts, tokenizer in indexes:
                _sqlite_fts(source, fts, tokenizer)
    elif dialect == "postgresql":
        op.execute("CREATE EXTENSION IF NOT EXISTS pg_trgm")
        for source in ("messages", "summaries"):
            op.execute(
                f"CREATE INDEX ix_lcm_{source}_tsv ON {source} "
                f"USING gin (to_tsvector('english'::regconfig, content))"
            )
            op.execute(
                f"CREATE INDEX ix_lcm_{source}_trgm ON {source} USING gin (content gin_trgm_ops)"
            )


def _sqlite_fts(source: str, fts: str, tokenizer: str) -> None:
    rowid = _ROWID[source]
    scope_new = "'<c' || new.conversation_id || '>'"
    scope_old = "'<c' || old.conversation_id || '>'"
    op.execute(
        f"CREATE VIRTUAL TABLE {fts} USING fts5(scope, content, content='', tokenize='{tokenizer}')"
    )
    # A contentless table forgets a row only when given the exact values it indexed.
    insert = (
        f"INSERT INTO {fts}(rowid, scope, content) VALUES (new.{rowid}, {scope_new}, new.content);"
    )
    delete = (
        f"INSERT INTO {fts}({fts}, rowid, scope, content) "
        f"VALUES ('delete', old.{rowid}, {scope_old}, old.content);"
    )
    op.execute(f"CREATE TRIGGER {fts}_ai AFTER INSERT ON {source} BEGIN {insert} END")
    op.execute(f"CREATE TRIGGER {fts}_ad AFTER DELETE ON {source} BEGIN {delete} END")
    op.execute(
        f"CREATE TRIGGER {fts}_au AFTER UPDATE OF content, conversation_id ON {source} "
        f"BEGIN {delete} {insert} END"
    )
    # Rows written before this branch existed (e.g. by another provider).
    op.execute(
        f"INSERT INTO {fts}(rowid, scope, content) "
        f"SELECT {rowid}, '<c' || conversation_id || '>', content FROM {source}"
    )


def downgrade() -> None:
    dialect = op.get_bind().dialect.name
    if dialect == "sqlite":
        for indexes in _SQLITE_FTS.values():
            for fts, _ in indexes:
                for suffix in ("ai", "ad", "au"):
                    op.execute(f"DROP TRIGGER IF EXISTS {fts}_{suffix}")
                op.execute(f"DROP TABLE IF EXISTS {fts}")
    elif dialect == "postgresql":
        for source in ("messages", "summaries"):
            op.execute(f"DROP INDEX IF EXISTS ix_lcm_{source}_tsv")
            op.execute(f"DROP INDEX IF EXISTS ix_lcm_{source}_trgm")
    op.drop_index("ix_summary_parents_child", table_name="summary_parents")
    op.drop_table("summary_parents")
    op.drop_table("summary_messages")
    op.drop_table("context_items")
    op.drop_index("ix_summaries_conversation", table_name="summaries")
    op.drop_table("summaries")
