"""core: the message search index every provider shares

Search over the message history was lcm's (lcm_0001/0002/0003), so `simple` had no
ranked search over messages at all. The index now belongs to the history's owner, core,
and `memory/search/lexical.py` queries it for every provider; lcm_0004 drops lcm's copies.

What is indexed: every message but tool results (a tool result repeats what is stored
elsewhere, and earlier searches' results crowded out what was said), each with a little
of its neighbourhood: `context` holds the end of the previous user or assistant message
of its conversation (the question an answer answers, the remark a reply takes up), a
field that memory/search/lexical.py weighs below the message's own words.

- SQLite: `messages_fts`, FTS5 (porter, unicode61) over (scope, content, context), where
  `scope` is `<c{conversation_id}>` so a user's conversations filter inside the index. It
  keeps its own copy of the text: a contentless table forgets a row only when given the
  exact values it indexed, and a context is another row's text. `messages_trgm`,
  contentless FTS5 trigram over (scope, content), serves substring search.
- PostgreSQL: `messages_search` (message_id, conversation_id, tsv, doclen), where tsv is
  `to_tsvector('english', content)` at weight A followed by the context's at weight B,
  kept by a trigger, with a GIN index and `(conversation_id) INCLUDE (doclen)`; doclen
  counts both fields' tokens, stop words too, as FTS5 counts every token of a row. A pg_trgm GIN index on messages.content (tool results left out) serves
  substring search.

A message's context is read when the message is stored; a later edit of the previous
message does not change it (messages are not edited; imports write whole conversations).

Revision ID: 0004_search_index
Revises: 0003_parts_text_ids
Create Date: 2026-11-26
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0004_search_index"
down_revision: str | None = "0003_parts_text_ids"
branch_labels: Sequence[str] | None = None
depends_on: Sequence[str] | None = None

# Characters of the previous message kept as context: its end, where the question is.
CONTEXT_CHARS = 2000
_INDEXED = "role <> 'tool'"


def _previous(row: str, take: str) -> str:
    """The end of the message before `row` in its conversation (tool results and empty
    messages skipped), through the (conversation_id, seq) unique index."""
    return (
        f"(SELECT {take.format('p.content')} FROM messages p "
        f"WHERE p.conversation_id = {row}.conversation_id AND p.seq < {row}.seq "
        f"AND p.role <> 'tool' AND p.content <> '' ORDER BY p.seq DESC LIMIT 1)"
    )


def upgrade() -> None:
    dialect = op.get_bind().dialect.name
    if dialect == "sqlite":
        _sqlite_upgrade()
    elif dialect == "postgresql":
        _pg_upgrade()


def downgrade() -> None:
    dialect = op.get_bind().dialect.name
    if dialect == "sqlite":
        for trigger in ("fts_ai", "fts_ad", "fts_au", "trgm_ai", "trgm_ad", "trgm_au"):
            op.execute(f"DROP TRIGGER IF EXISTS messages_{trigger}")
        op.execute("DROP TABLE IF EXISTS messages_fts")
        op.execute("DROP TABLE IF EXISTS messages_trgm")
    elif dialect == "postgresql":
        op.execute("DROP TRIGGER IF EXISTS messages_search_sync ON messages")
        op.execute("DROP FUNCTION IF EXISTS messages_search_sync()")
        op.execute("DROP TABLE IF EXISTS messages_search")
        op.execute("DROP FUNCTION IF EXISTS mnemo_tsv_len(tsvector)")
        op.execute("DROP INDEX IF EXISTS ix_messages_trgm")


def _sqlite_upgrade() -> None:
    context = _previous("new", f"substr({{}}, -{CONTEXT_CHARS})")
    op.execute(
        "CREATE VIRTUAL TABLE messages_fts USING fts5(scope, content, context, "
        "tokenize='porter unicode61 remove_diacritics 2')"
    )
    add = (
        "INSERT INTO messages_fts(rowid, scope, content, context) "
        f"SELECT new.id, '<c' || new.conversation_id || '>', new.content, {context} "
        f"WHERE new.{_INDEXED};"
    )
    drop = "DELETE FROM messages_fts WHERE rowid = old.id;"
    op.execute(f"CREATE TRIGGER messages_fts_ai AFTER INSERT ON messages BEGIN {add} END")
    op.execute(f"CREATE TRIGGER messages_fts_ad AFTER DELETE ON messages BEGIN {drop} END")
    op.execute(
        "CREATE TRIGGER messages_fts_au AFTER UPDATE OF content, conversation_id, role "
        f"ON messages BEGIN {drop} {add} END"
    )
    op.execute(
        "INSERT INTO messages_fts(rowid, scope, content, context) "
        "SELECT m.id, '<c' || m.conversation_id || '>', m.content, "
        f"{_previous('m', f'substr({{}}, -{CONTEXT_CHARS})')} FROM messages m WHERE m.{_INDEXED}"
    )

    op.execute(
        "CREATE VIRTUAL TABLE messages_trgm USING fts5(scope, content, content='', "
        "tokenize='trigram')"
    )
    # A contentless table forgets a row only when given the exact values it indexed.
    add_trgm = (
        "INSERT INTO messages_trgm(rowid, scope, content) "
        f"SELECT new.id, '<c' || new.conversation_id || '>', new.content WHERE new.{_INDEXED};"
    )
    drop_trgm = (
        "INSERT INTO messages_trgm(messages_trgm, rowid, scope, content) "
        "SELECT 'delete', old.id, '<c' || old.conversation_id || '>', old.content "
        f"WHERE old.{_INDEXED};"
    )
    op.execute(f"CREATE TRIGGER messages_trgm_ai AFTER INSERT ON messages BEGIN {add_trgm} END")
    op.execute(f"CREATE TRIGGER messages_trgm_ad AFTER DELETE ON messages BEGIN {drop_trgm} END")
    op.execute(
        "CREATE TRIGGER messages_trgm_au AFTER UPDATE OF content, conversation_id, role "
        f"ON messages BEGIN {drop_trgm} {add_trgm} END"
    )
    op.execute(
        "INSERT INTO messages_trgm(rowid, scope, content) "
        f"SELECT id, '<c' || conversation_id || '>', content FROM messages WHERE {_INDEXED}"
    )


def _pg_upgrade() -> None:
    op.execute("CREATE EXTENSION IF NOT EXISTS pg_trgm")
    # The last position of a tsvector: of a 'simple' one, the number of tokens.
    op.execute(
        "CREATE FUNCTION mnemo_tsv_len(tsvector) RETURNS integer LANGUAGE sql IMMUTABLE "
        "PARALLEL SAFE AS $$ SELECT coalesce(max(p), 0)::integer "
        "FROM unnest($1) u, unnest(u.positions) p $$"
    )
    op.execute(
        "CREATE TABLE messages_search ("
        "message_id BIGINT PRIMARY KEY REFERENCES messages(id) ON DELETE CASCADE, "
        "conversation_id BIGINT NOT NULL, tsv tsvector NOT NULL, doclen integer NOT NULL)"
    )
    tsv = (
        "setweight(to_tsvector('english'::regconfig, {content}), 'A') || "
        "setweight(to_tsvector('english'::regconfig, {context}), 'B')"
    )
    # Tokens, stop words included, as FTS5 counts them: the 'simple' configuration keeps
    # every word ('english' leaves no position for trailing stop words).
    length = "mnemo_tsv_len(to_tsvector('simple'::regconfig, {}))"
    doclen = f"{length.format('{content}')} + {length.format('{context}')}"
    op.execute(
        "CREATE FUNCTION messages_search_sync() RETURNS trigger LANGUAGE plpgsql AS $$ "
        "DECLARE ctx text; BEGIN "
        f"IF NOT (NEW.{_INDEXED}) THEN "
        "DELETE FROM messages_search WHERE message_id = NEW.id; RETURN NEW; END IF; "
        f"ctx := coalesce({_previous('NEW', f'right({{}}, {CONTEXT_CHARS})')}, ''); "
        "INSERT INTO messages_search (message_id, conversation_id, tsv, doclen) "
        f"VALUES (NEW.id, NEW.conversation_id, {tsv.format(content='NEW.content', context='ctx')}, "
        f"{doclen.format(content='NEW.content', context='ctx')}) "
        "ON CONFLICT (message_id) DO UPDATE SET conversation_id = EXCLUDED.conversation_id, "
        "tsv = EXCLUDED.tsv, doclen = EXCLUDED.doclen; RETURN NEW; END $$"
    )
    op.execute(
        "CREATE TRIGGER messages_search_sync AFTER INSERT OR UPDATE OF content, "
        "conversation_id, role ON messages FOR EACH ROW EXECUTE FUNCTION messages_search_sync()"
    )
    op.execute(
        "INSERT INTO messages_search (message_id, conversation_id, tsv, doclen) "
        f"SELECT id, conversation_id, {tsv.format(content='content', context='ctx')}, "
        f"{doclen.format(content='content', context='ctx')} FROM ("
        "SELECT m.id, m.conversation_id, m.content, "
        f"coalesce({_previous('m', f'right({{}}, {CONTEXT_CHARS})')}, '') AS ctx "
        f"FROM messages m WHERE m.{_INDEXED}) AS rows"
    )
    op.execute(
        "CREATE INDEX ix_messages_search_conv ON messages_search (conversation_id) INCLUDE (doclen)"
    )
    op.execute("CREATE INDEX ix_messages_search_gin ON messages_search USING gin (tsv)")
    op.execute(
        f"CREATE INDEX ix_messages_trgm ON messages USING gin (content gin_trgm_ops) "
        f"WHERE {_INDEXED}"
    )
