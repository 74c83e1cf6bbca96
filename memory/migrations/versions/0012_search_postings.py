"""core: per-lexeme postings for the PostgreSQL message index

A ranked search at 1M messages spent its time scoring candidate rows: each cost ~0.1 ms,
its whole tsvector unnested to find the query's few lexemes (bench/HISTORY.md, "Word
search at scale"). `messages_search_postings` holds one row per (row of messages_search,
lexeme): the conversation, the lexeme, the message, its occurrences in the content
and the context together, and in the context alone (weight B), and the row's doclen. Its primary key
(conversation_id, lexeme, message_id) INCLUDE (n_all, n_ctx, doclen) answers both of
memory/search/lexical.py's questions by index-only scans: a lexeme's rows in a user's
conversations (ordered by message), and one row's counts of one lexeme (a probe).

`messages_search_terms` (0010) gains each lexeme's bounds per conversation: the most
occurrences in a row's content (max_a) and context (max_b), and the shortest row holding
it (min_dl). They are only ever widened (a delete leaves them), so a stale value is still
a bound; memory/search/pg_postings.py prunes with them.

Kept by messages_search_totals_sync (0010), now also writing postings and bounds, in the
transaction of the index's own write: the trigger stays the only writer, and a forget,
an erase or an edit leaves postings, totals and index agreeing. A message indexed costs
about 14 more rows written (one per lexeme of its content and context).

Backfill: one INSERT ... SELECT over messages_search, the key built after it, then the
bounds, under a SHARE lock on messages_search (writes wait). At 1M messages (14.2M
postings, 1.6 GB with the key; messages_search is 0.37 GB): 71-74 s on 2 shared cores
at load 6-8 (bench/HISTORY.md, "Word search at scale"). Each message indexed afterwards
costs about 0.2 ms more server CPU (0.3 -> 0.5 ms through COPY with the triggers;
bench/postings_cost.py).

Revision ID: 0012_search_postings
Revises: 0011_sqlite_postings
Create Date: 2026-11-27
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0012_search_postings"
down_revision: str | None = "0011_sqlite_postings"
branch_labels: Sequence[str] | None = None
depends_on: Sequence[str] | None = None

# A lexeme's occurrences in the row: every position, and those of the context (weight B).
# A lexeme without positions counts once, as memory/search/lexical.py counts it.
_COUNTS = (
    "coalesce(cardinality(l.weights), 1)::smallint, "
    "coalesce(cardinality(array_positions(l.weights, 'B')), 0)::smallint"
)

_TOTALS = """
  IF TG_OP IN ('UPDATE', 'DELETE') THEN
    UPDATE messages_search_totals SET n = n - 1, doclen = doclen - OLD.doclen
    WHERE conversation_id = OLD.conversation_id;
    DELETE FROM messages_search_totals WHERE conversation_id = OLD.conversation_id AND n <= 0;
    UPDATE messages_search_terms t SET df = t.df - 1
    FROM unnest(tsvector_to_array(OLD.tsv)) AS l(lexeme)
    WHERE t.conversation_id = OLD.conversation_id AND t.lexeme = l.lexeme;
    DELETE FROM messages_search_terms
    WHERE conversation_id = OLD.conversation_id AND df <= 0
      AND lexeme = ANY (tsvector_to_array(OLD.tsv));{drop}
  END IF;
  IF TG_OP IN ('INSERT', 'UPDATE') THEN
    INSERT INTO messages_search_totals AS s (conversation_id, n, doclen)
    VALUES (NEW.conversation_id, 1, NEW.doclen)
    ON CONFLICT (conversation_id) DO UPDATE SET n = s.n + 1, doclen = s.doclen + EXCLUDED.doclen;
    {terms}{add}
  END IF;"""
_DROP = """
    DELETE FROM messages_search_postings
    WHERE conversation_id = OLD.conversation_id AND message_id = OLD.message_id
      AND lexeme = ANY (tsvector_to_array(OLD.tsv));"""
_ADD = f"""
    INSERT INTO messages_search_postings (conversation_id, lexeme, message_id, n_all, n_ctx, doclen)
    SELECT NEW.conversation_id, l.lexeme, NEW.message_id, {_COUNTS}, NEW.doclen
    FROM unnest(NEW.tsv) AS l(lexeme, positions, weights);"""

# 0010's df, and from here each lexeme's bounds: the most occurrences in a row's content
# (A) and context (B), the shortest row holding it. Only widened (a delete leaves them):
# a stale bound is still a bound.
_TERMS_0010 = """INSERT INTO messages_search_terms AS t (conversation_id, lexeme, df)
    SELECT NEW.conversation_id, l.lexeme, 1 FROM unnest(tsvector_to_array(NEW.tsv)) AS l(lexeme)
    ON CONFLICT (conversation_id, lexeme) DO UPDATE SET df = t.df + 1;"""
_B = "coalesce(cardinality(array_positions(l.weights, 'B')), 0)"
_TERMS = f"""INSERT INTO messages_search_terms AS t
      (conversation_id, lexeme, df, max_a, max_b, min_dl)
    SELECT NEW.conversation_id, l.lexeme, 1, coalesce(cardinality(l.weights), 1) - {_B}, {_B},
           NEW.doclen
    FROM unnest(NEW.tsv) AS l(lexeme, positions, weights)
    ON CONFLICT (conversation_id, lexeme) DO UPDATE SET df = t.df + 1,
      max_a = greatest(t.max_a, EXCLUDED.max_a), max_b = greatest(t.max_b, EXCLUDED.max_b),
      min_dl = least(t.min_dl, EXCLUDED.min_dl);"""


def _sync(drop: str, terms: str, add: str) -> str:
    return (
        "CREATE OR REPLACE FUNCTION messages_search_totals_sync() RETURNS trigger "
        "LANGUAGE plpgsql AS $$\nBEGIN"
        + _TOTALS.format(drop=drop, terms=terms, add=add)
        + "\n  RETURN NULL;\nEND $$"
    )


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    # n_all: all occurrences (content and context), n_ctx: the context's; see _COUNTS.
    # The key is built after the backfill: a sorted build, not 15M single inserts.
    op.execute(
        "CREATE TABLE messages_search_postings (conversation_id BIGINT NOT NULL, "
        "lexeme TEXT NOT NULL, message_id BIGINT NOT NULL, n_all SMALLINT NOT NULL, "
        "n_ctx SMALLINT NOT NULL, doclen INTEGER NOT NULL)"
    )
    op.execute("LOCK TABLE messages_search IN SHARE MODE")
    op.execute(
        "INSERT INTO messages_search_postings "
        "(conversation_id, lexeme, message_id, n_all, n_ctx, doclen) "
        f"SELECT s.conversation_id, l.lexeme, s.message_id, {_COUNTS}, s.doclen "
        "FROM messages_search s CROSS JOIN LATERAL unnest(s.tsv) AS l(lexeme, positions, weights)"
    )
    op.execute(
        "ALTER TABLE messages_search_postings ADD PRIMARY KEY "
        "(lexeme, conversation_id, message_id) INCLUDE (n_all, n_ctx, doclen)"
    )
    # Statistics now only when the backfill wrote rows: an empty table analyzed reads as
    # empty to the planner until autovacuum comes (probes became range scans).
    if op.get_bind().exec_driver_sql("SELECT 1 FROM messages_search_postings LIMIT 1").first():
        op.execute("ANALYZE messages_search_postings")
    for column in ("max_a", "max_b", "min_dl"):
        op.execute(f"ALTER TABLE messages_search_terms ADD COLUMN {column} INTEGER")
    op.execute(
        "UPDATE messages_search_terms t SET max_a = p.max_a, max_b = p.max_b, "
        "min_dl = p.min_dl FROM (SELECT conversation_id, lexeme, max(n_all - n_ctx) AS max_a, "
        "max(n_ctx) AS max_b, min(doclen) AS min_dl FROM messages_search_postings "
        "GROUP BY conversation_id, lexeme) p "
        "WHERE p.conversation_id = t.conversation_id AND p.lexeme = t.lexeme"
    )
    op.execute(_sync(_DROP, _TERMS, _ADD))


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute(_sync("", _TERMS_0010, ""))
    op.execute("DROP TABLE IF EXISTS messages_search_postings")
    for column in ("max_a", "max_b", "min_dl"):
        op.execute(f"ALTER TABLE messages_search_terms DROP COLUMN IF EXISTS {column}")
