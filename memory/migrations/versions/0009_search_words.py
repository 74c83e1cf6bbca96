"""core: one stemmer for both databases, and no hits without words of their own

Two changes to the message search index of 0004_search_index:

- SQLite indexes Snowball English stems, as PostgreSQL's `english` configuration does:
  `messages_fts` is rebuilt with FTS5's `ascii` tokenizer (it only splits at spaces)
  over `mnemo_stems(content)` and `mnemo_stems(context)`, the SQL function
  memory/storage/db.py registers on every SQLite connection (memory/search/stems.py: the
  tokens, and why). FTS5's porter stemmer disagreed with PostgreSQL ("octopuses" was
  `octopu`, "octopus" `octopus`), so the same question found other messages on each.
- Messages with no text of their own (an assistant's tool calls, stored with empty
  content) are no longer indexed on either database: they matched through their context
  alone (the message before them) and came back as empty hits.

The triggers stay the index's only writer; existing rows are indexed again here, in the
upgrade's transaction. A SQLite client without the function (the `sqlite3` shell) can
still read and delete messages (the index forgets a row by its rowid), not write them.
Indexing a message costs about 45 us more CPU (12 -> 56 us a row for the FTS5 insert of
its content and context, measured on the LoCoMo dev turns), about 1.5% of an append.

Revision ID: 0009_search_words
Revises: 0008_forget_requests
Create Date: 2026-11-27
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0009_search_words"
down_revision: str | None = "0008_forget_requests"
branch_labels: Sequence[str] | None = None
depends_on: Sequence[str] | None = None

CONTEXT_CHARS = 2000  # as 0004_search_index
# Which messages are indexed, of a row named {r}: before, and from this revision on.
_INDEXED = "{r}.role <> 'tool' AND trim({r}.content) <> ''"
_INDEXED_BEFORE = "{r}.role <> 'tool'"
_STEMS = "mnemo_stems({})"
_TRIGGERS = ("messages_fts_ai", "messages_fts_ad", "messages_fts_au")


def _previous(row: str, take: str) -> str:
    """The end of the message before `row` in its conversation (0004_search_index)."""
    return (
        f"(SELECT {take.format('p.content')} FROM messages p "
        f"WHERE p.conversation_id = {row}.conversation_id AND p.seq < {row}.seq "
        f"AND p.role <> 'tool' AND p.content <> '' ORDER BY p.seq DESC LIMIT 1)"
    )


def upgrade() -> None:
    dialect = op.get_bind().dialect.name
    if dialect == "sqlite":
        _sqlite_fts(_INDEXED, "ascii", _STEMS)
    elif dialect == "postgresql":
        _pg_indexed(_INDEXED)
        op.execute(
            "DELETE FROM messages_search s USING messages m "
            "WHERE m.id = s.message_id AND trim(m.content) = ''"
        )


def downgrade() -> None:
    dialect = op.get_bind().dialect.name
    if dialect == "sqlite":
        _sqlite_fts(_INDEXED_BEFORE, "porter unicode61 remove_diacritics 2", "{}")
    elif dialect == "postgresql":
        _pg_indexed(_INDEXED_BEFORE)
        # The rows left out come back through the trigger.
        op.execute(
            "UPDATE messages SET content = content WHERE role <> 'tool' AND trim(content) = ''"
        )


def _sqlite_fts(indexed: str, tokenizer: str, text: str) -> None:
    """`messages_fts` rebuilt: rows where `indexed`, `text` (a format of the SQL value)
    of their content and context, split by `tokenizer`."""
    for trigger in _TRIGGERS:
        op.execute(f"DROP TRIGGER IF EXISTS {trigger}")
    op.execute("DROP TABLE IF EXISTS messages_fts")
    op.execute(
        "CREATE VIRTUAL TABLE messages_fts USING fts5(scope, content, context, "
        f"tokenize='{tokenizer}')"
    )
    context = _previous("new", f"substr({{}}, -{CONTEXT_CHARS})")
    add = (
        "INSERT INTO messages_fts(rowid, scope, content, context) "
        f"SELECT new.id, '<c' || new.conversation_id || '>', {text.format('new.content')}, "
        f"{text.format(context)} WHERE {indexed.format(r='new')};"
    )
    drop = "DELETE FROM messages_fts WHERE rowid = old.id;"
    op.execute(f"CREATE TRIGGER messages_fts_ai AFTER INSERT ON messages BEGIN {add} END")
    op.execute(f"CREATE TRIGGER messages_fts_ad AFTER DELETE ON messages BEGIN {drop} END")
    op.execute(
        "CREATE TRIGGER messages_fts_au AFTER UPDATE OF content, conversation_id, role "
        f"ON messages BEGIN {drop} {add} END"
    )
    previous = _previous("m", f"substr({{}}, -{CONTEXT_CHARS})")
    op.execute(
        "INSERT INTO messages_fts(rowid, scope, content, context) "
        f"SELECT m.id, '<c' || m.conversation_id || '>', {text.format('m.content')}, "
        f"{text.format(previous)} FROM messages m "
        f"WHERE {indexed.format(r='m')}"
    )


def _pg_indexed(indexed: str) -> None:
    """The index trigger of 0004_search_index, keeping the rows where `indexed`."""
    tsv = (
        "setweight(to_tsvector('english'::regconfig, NEW.content), 'A') || "
        "setweight(to_tsvector('english'::regconfig, ctx), 'B')"
    )
    length = "mnemo_tsv_len(to_tsvector('simple'::regconfig, {}))"
    doclen = f"{length.format('NEW.content')} + {length.format('ctx')}"
    condition = indexed.format(r="NEW")
    op.execute(
        "CREATE OR REPLACE FUNCTION messages_search_sync() RETURNS trigger LANGUAGE plpgsql "
        "AS $$ DECLARE ctx text; BEGIN "
        f"IF NOT ({condition}) THEN "
        "DELETE FROM messages_search WHERE message_id = NEW.id; RETURN NEW; END IF; "
        f"ctx := coalesce({_previous('NEW', f'right({{}}, {CONTEXT_CHARS})')}, ''); "
        "INSERT INTO messages_search (message_id, conversation_id, tsv, doclen) "
        f"VALUES (NEW.id, NEW.conversation_id, {tsv}, {doclen}) "
        "ON CONFLICT (message_id) DO UPDATE SET conversation_id = EXCLUDED.conversation_id, "
        "tsv = EXCLUDED.tsv, doclen = EXCLUDED.doclen; RETURN NEW; END $$"
    )
