"""core: postings beside SQLite's message index, for a pruned exact BM25

FTS5 exposes a row's term counts only through `bm25()` or by reading a term's whole
doclist, and `bm25()` reads every query term's doclist (and each scope phrase's) to count
its rows before scoring a single one: 405 ms of CPU at 1M messages (bench/HISTORY.md,
"Word search at scale"). memory/search/sqlite_ranked.py instead evaluates the same
scores by MaxScore over three tables kept here, in the transaction of every index write:

- `messages_fts_postings` (term, id, conv, tf, ctf, dl): each token a query can match of
  each row of `messages_fts` (the STOP token left out), its count in the content and in
  the context, the row's conversation and length (every column's tokens, as bm25()
  counts them). Keyed by (term, id): a term's rows are one range, a row's count one probe.
- `messages_fts_terms` (term, df): the rows holding each term, as bm25() counts them
  (the whole table, either column); a term whose last row goes is deleted.
- `messages_fts_totals` (n, tokens): rows and tokens of the whole table, bm25()'s N and
  mean length.

The tokens are read back from the `messages_fts` row just written, by the SQL function
`mnemo_postings` (memory/search/stems.py: FTS5's `ascii` tokenizer over the stored
stems), so they are the index's own. The message triggers of 0009_search_words stay the
only writers: they now write the postings and totals too (before forgetting a row of
`messages_fts`, they read its tokens to forget its postings), and a trigger on the
postings keeps df.

Cost (bench/HISTORY.md, "Word search at scale, SQLite pruned"): the backfill takes 6.6 s
of CPU at 100k messages (61 s at 1M) and the database grows by about 40%; a message's
insert costs 110 -> 330 us of CPU in an import's batches, 183 -> 721 us alone at 1M
messages (each posting is a B-tree insert at its term's place, where FTS5 appends).
PostgreSQL: nothing to do (its postings are the GIN index; 0010 keeps its totals).

Revision ID: 0011_sqlite_postings
Revises: 0010_search_totals
Create Date: 2026-11-27
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0011_sqlite_postings"
down_revision: str | None = "0010_search_totals"
branch_labels: Sequence[str] | None = None
depends_on: Sequence[str] | None = None

CONTEXT_CHARS = 2000  # as 0004_search_index
_INDEXED = "new.role <> 'tool' AND trim(new.content) <> ''"  # as 0009_search_words
_TRIGGERS = ("messages_fts_ai", "messages_fts_ad", "messages_fts_au")
_PREVIOUS = (
    f"(SELECT substr(p.content, -{CONTEXT_CHARS}) FROM messages p "
    "WHERE p.conversation_id = new.conversation_id AND p.seq < new.seq "
    "AND p.role <> 'tool' AND p.content <> '' ORDER BY p.seq DESC LIMIT 1)"
)
_FTS_ADD = (
    "INSERT INTO messages_fts(rowid, scope, content, context) "
    "SELECT new.id, '<c' || new.conversation_id || '>', mnemo_stems(new.content), "
    f"mnemo_stems({_PREVIOUS}) WHERE {_INDEXED};"
)
_FTS_DROP = "DELETE FROM messages_fts WHERE rowid = old.id;"
# A row's postings, from its tokens as `messages_fts` holds them.
_POSTINGS = (
    "messages_fts f, json_each(mnemo_postings(f.scope, f.content, f.context)) j "
    "WHERE f.rowid = {}.id"
)
_POSTINGS_ADD = (
    "INSERT INTO messages_fts_postings (term, id, conv, tf, ctf, dl) "
    "SELECT json_extract(j.value, '$[0]'), f.rowid, new.conversation_id, "
    "json_extract(j.value, '$[1]'), json_extract(j.value, '$[2]'), "
    f"json_extract(j.value, '$[3]') FROM {_POSTINGS.format('new')};"
    "UPDATE messages_fts_totals SET n = n + 1, tokens = tokens + d.dl FROM "
    "(SELECT mnemo_doclen(scope, content, context) AS dl FROM messages_fts "
    "WHERE rowid = new.id) d;"
)
_POSTINGS_DROP = (
    "DELETE FROM messages_fts_postings WHERE id = old.id AND term IN "
    f"(SELECT json_extract(j.value, '$[0]') FROM {_POSTINGS.format('old')});"
    "UPDATE messages_fts_totals SET n = n - 1, tokens = tokens - d.dl FROM "
    "(SELECT mnemo_doclen(scope, content, context) AS dl FROM messages_fts "
    "WHERE rowid = old.id) d;"
)


def _message_triggers(add: str, drop: str) -> None:
    for trigger in _TRIGGERS:
        op.execute(f"DROP TRIGGER IF EXISTS {trigger}")
    op.execute(f"CREATE TRIGGER messages_fts_ai AFTER INSERT ON messages BEGIN {add} END")
    op.execute(f"CREATE TRIGGER messages_fts_ad AFTER DELETE ON messages BEGIN {drop} END")
    op.execute(
        "CREATE TRIGGER messages_fts_au AFTER UPDATE OF content, conversation_id, role "
        f"ON messages BEGIN {drop} {add} END"
    )


def upgrade() -> None:
    if op.get_bind().dialect.name != "sqlite":
        return
    op.execute(
        "CREATE TABLE messages_fts_postings (term TEXT NOT NULL, id INTEGER NOT NULL, "
        "conv INTEGER NOT NULL, tf INTEGER NOT NULL, ctf INTEGER NOT NULL, "
        "dl INTEGER NOT NULL, PRIMARY KEY (term, id)) WITHOUT ROWID"
    )
    op.execute(
        "CREATE TABLE messages_fts_terms (term TEXT PRIMARY KEY, df INTEGER NOT NULL) WITHOUT ROWID"
    )
    op.execute(
        "CREATE TABLE messages_fts_totals (id INTEGER PRIMARY KEY CHECK (id = 0), "
        "n INTEGER NOT NULL, tokens INTEGER NOT NULL)"
    )
    # Filled from the index as it is, in this transaction (it holds the write lock), in
    # key order so the b-tree is appended to.
    op.execute(
        "INSERT INTO messages_fts_postings (term, id, conv, tf, ctf, dl) "
        "SELECT json_extract(j.value, '$[0]') AS term, f.rowid, m.conversation_id, "
        "json_extract(j.value, '$[1]'), json_extract(j.value, '$[2]'), "
        "json_extract(j.value, '$[3]') FROM messages_fts f JOIN messages m ON m.id = f.rowid, "
        "json_each(mnemo_postings(f.scope, f.content, f.context)) j ORDER BY term, f.rowid"
    )
    op.execute(
        "INSERT INTO messages_fts_terms (term, df) "
        "SELECT term, count(*) FROM messages_fts_postings GROUP BY term"
    )
    op.execute(
        "INSERT INTO messages_fts_totals (id, n, tokens) SELECT 0, count(*), "
        "coalesce(sum(mnemo_doclen(scope, content, context)), 0) FROM messages_fts"
    )
    op.execute(
        "CREATE TRIGGER messages_fts_postings_ai AFTER INSERT ON messages_fts_postings "
        "BEGIN INSERT INTO messages_fts_terms (term, df) VALUES (new.term, 1) "
        "ON CONFLICT (term) DO UPDATE SET df = df + 1; END"
    )
    op.execute(
        "CREATE TRIGGER messages_fts_postings_ad AFTER DELETE ON messages_fts_postings "
        "BEGIN UPDATE messages_fts_terms SET df = df - 1 WHERE term = old.term; "
        "DELETE FROM messages_fts_terms WHERE term = old.term AND df <= 0; END"
    )
    _message_triggers(_FTS_ADD + _POSTINGS_ADD, _POSTINGS_DROP + _FTS_DROP)


def downgrade() -> None:
    if op.get_bind().dialect.name != "sqlite":
        return
    _message_triggers(_FTS_ADD, _FTS_DROP)
    for table in ("messages_fts_postings", "messages_fts_terms", "messages_fts_totals"):
        op.execute(f"DROP TABLE IF EXISTS {table}")
