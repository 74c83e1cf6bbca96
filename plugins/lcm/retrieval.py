"""What lcm adds to search: its summaries, indexed like messages.

Messages are core's shared index (core revisions 0004, 0009); summaries have lcm's own
tables (on SQLite: lcm_0001's FTS5 trigram table, lcm_0006's FTS5 table over the shared
stemmer's tokens; on PostgreSQL: lcm_0002/0003's tsvector side table with document
lengths, and pg_trgm on the content). memory/search/recall.py searches both through
memory/search/lexical.py, so summaries rank on the same BM25 scale as messages.
"""

from __future__ import annotations

from memory.search.lexical import MESSAGES, TextIndex

SUMMARIES = TextIndex(
    label="summary",
    table="summaries",
    rowid="pk",
    stamp="latest_at",
    start_stamp="earliest_at",  # a summary spans its messages' times
    fts="lcm_summaries_fts",
    trigram="lcm_summaries_trgm",
    pg_side="lcm_summaries_tsv",
    pg_key="summary_pk",
)

INDEXES = (MESSAGES, SUMMARIES)
