"""core: per-conversation BM25 totals for the PostgreSQL message index

A ranked search needs, over the user's own rows, the number of rows, their mean length
and each query word's document frequency (memory/search/lexical.py). Counted per query,
they cost a pass over every row of the user (N, mean length) and one over every row
holding each word (df): 152 of 236 ms for a rare word at 100k messages. Kept here, per
conversation, by a trigger on `messages_search`, in the transaction of the write that
changes the index, so every replica reads the same figures the index holds:

- `messages_search_totals` (conversation_id, n, doclen): rows and their summed doclen;
- `messages_search_terms` (conversation_id, lexeme, df): the rows holding each lexeme
  (in the content or the context, as the index's tsquery matches either).

A lexeme whose last row goes is deleted, and so is a conversation's totals row: a
forgotten word leaves no trace here. Writes to one conversation are serialised by its
session lock; two conversations never share a row.

SQLite's FTS5 keeps its own whole-table totals: nothing to do there.

Revision ID: 0010_search_totals
Revises: 0009_search_words
Create Date: 2026-11-27
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0010_search_totals"
down_revision: str | None = "0009_search_words"
branch_labels: Sequence[str] | None = None
depends_on: Sequence[str] | None = None

_SYNC = """
CREATE FUNCTION messages_search_totals_sync() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP IN ('UPDATE', 'DELETE') THEN
    UPDATE messages_search_totals SET n = n - 1, doclen = doclen - OLD.doclen
    WHERE conversation_id = OLD.conversation_id;
    DELETE FROM messages_search_totals WHERE conversation_id = OLD.conversation_id AND n <= 0;
    UPDATE messages_search_terms t SET df = t.df - 1
    FROM unnest(tsvector_to_array(OLD.tsv)) AS l(lexeme)
    WHERE t.conversation_id = OLD.conversation_id AND t.lexeme = l.lexeme;
    DELETE FROM messages_search_terms
    WHERE conversation_id = OLD.conversation_id AND df <= 0
      AND lexeme = ANY (tsvector_to_array(OLD.tsv));
  END IF;
  IF TG_OP IN ('INSERT', 'UPDATE') THEN
    INSERT INTO messages_search_totals AS s (conversation_id, n, doclen)
    VALUES (NEW.conversation_id, 1, NEW.doclen)
    ON CONFLICT (conversation_id) DO UPDATE SET n = s.n + 1, doclen = s.doclen + EXCLUDED.doclen;
    INSERT INTO messages_search_terms AS t (conversation_id, lexeme, df)
    SELECT NEW.conversation_id, l.lexeme, 1 FROM unnest(tsvector_to_array(NEW.tsv)) AS l(lexeme)
    ON CONFLICT (conversation_id, lexeme) DO UPDATE SET df = t.df + 1;
  END IF;
  RETURN NULL;
END $$
"""


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute(
        "CREATE TABLE messages_search_totals (conversation_id BIGINT PRIMARY KEY, "
        "n BIGINT NOT NULL, doclen BIGINT NOT NULL)"
    )
    op.execute(
        "CREATE TABLE messages_search_terms (conversation_id BIGINT NOT NULL, "
        "lexeme TEXT NOT NULL, df BIGINT NOT NULL, PRIMARY KEY (conversation_id, lexeme))"
    )
    # Filled before the trigger exists, in this transaction: a write waits on the lock.
    op.execute("LOCK TABLE messages_search IN SHARE MODE")
    op.execute(
        "INSERT INTO messages_search_totals (conversation_id, n, doclen) "
        "SELECT conversation_id, count(*), sum(doclen) FROM messages_search "
        "GROUP BY conversation_id"
    )
    op.execute(
        "INSERT INTO messages_search_terms (conversation_id, lexeme, df) "
        "SELECT s.conversation_id, l.lexeme, count(*) FROM messages_search s "
        "CROSS JOIN LATERAL unnest(tsvector_to_array(s.tsv)) AS l(lexeme) "
        "GROUP BY s.conversation_id, l.lexeme"
    )
    op.execute(_SYNC)
    op.execute(
        "CREATE TRIGGER messages_search_totals_sync AFTER INSERT OR DELETE OR UPDATE "
        "ON messages_search FOR EACH ROW EXECUTE FUNCTION messages_search_totals_sync()"
    )


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute("DROP TRIGGER IF EXISTS messages_search_totals_sync ON messages_search")
    op.execute("DROP FUNCTION IF EXISTS messages_search_totals_sync()")
    op.execute("DROP TABLE IF EXISTS messages_search_terms")
    op.execute("DROP TABLE IF EXISTS messages_search_totals")
