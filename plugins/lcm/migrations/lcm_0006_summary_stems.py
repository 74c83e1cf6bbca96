"""lcm: summaries indexed with the stemmer PostgreSQL uses

Core revision 0009_search_words makes SQLite index Snowball English stems, as
PostgreSQL's `english` configuration does (memory/search/stems.py); summaries are ranked
on the same scale as messages, so `lcm_summaries_fts` is rebuilt the same way: FTS5's
`ascii` tokenizer over `mnemo_stems(content)` (the SQL function memory/storage/db.py
registers). It now keeps its own copy of the tokens, as core's `messages_fts` does, so a
row is forgotten by its rowid alone: a contentless table forgets a row only when given the
exact tokens it indexed, which a later stemmer could no longer give. PostgreSQL: nothing
to do.

Revision ID: lcm_0006
Revises: lcm_0005
Create Date: 2026-11-27
"""

from collections.abc import Sequence

from alembic import op

revision: str = "lcm_0006"
down_revision: str | None = "lcm_0005"
branch_labels: Sequence[str] | None = None
depends_on: Sequence[str] | None = ("0009_search_words",)

_FTS = "lcm_summaries_fts"
_TRIGGERS = tuple(f"{_FTS}_{suffix}" for suffix in ("ai", "ad", "au"))
_SCOPE = "'<c' || {}.conversation_id || '>'"


def upgrade() -> None:
    if op.get_bind().dialect.name != "sqlite":
        return
    _drop()
    op.execute(f"CREATE VIRTUAL TABLE {_FTS} USING fts5(scope, content, tokenize='ascii')")
    insert = (
        f"INSERT INTO {_FTS}(rowid, scope, content) "
        f"VALUES (new.pk, {_SCOPE.format('new')}, mnemo_stems(new.content));"
    )
    delete = f"DELETE FROM {_FTS} WHERE rowid = old.pk;"
    _triggers(insert, delete)
    op.execute(
        f"INSERT INTO {_FTS}(rowid, scope, content) "
        f"SELECT pk, {_SCOPE.format('summaries')}, mnemo_stems(content) FROM summaries"
    )


def downgrade() -> None:
    """lcm_0001's contentless porter index again."""
    if op.get_bind().dialect.name != "sqlite":
        return
    _drop()
    op.execute(
        f"CREATE VIRTUAL TABLE {_FTS} USING fts5(scope, content, content='', "
        "tokenize='porter unicode61 remove_diacritics 2')"
    )
    insert = (
        f"INSERT INTO {_FTS}(rowid, scope, content) "
        f"VALUES (new.pk, {_SCOPE.format('new')}, new.content);"
    )
    delete = (
        f"INSERT INTO {_FTS}({_FTS}, rowid, scope, content) "
        f"VALUES ('delete', old.pk, {_SCOPE.format('old')}, old.content);"
    )
    _triggers(insert, delete)
    op.execute(
        f"INSERT INTO {_FTS}(rowid, scope, content) "
        f"SELECT pk, {_SCOPE.format('summaries')}, content FROM summaries"
    )


def _drop() -> None:
    for trigger in _TRIGGERS:
        op.execute(f"DROP TRIGGER IF EXISTS {trigger}")
    op.execute(f"DROP TABLE IF EXISTS {_FTS}")


def _triggers(insert: str, delete: str) -> None:
    op.execute(f"CREATE TRIGGER {_FTS}_ai AFTER INSERT ON summaries BEGIN {insert} END")
    op.execute(f"CREATE TRIGGER {_FTS}_ad AFTER DELETE ON summaries BEGIN {delete} END")
    op.execute(
        f"CREATE TRIGGER {_FTS}_au AFTER UPDATE OF content, conversation_id ON summaries "
        f"BEGIN {delete} {insert} END"
    )
