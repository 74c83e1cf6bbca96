"""What lcm adds to search: its summaries, indexed like messages.

Messages are core's shared index (core revision 0004); summaries have lcm's own tables
(lcm_0001: FTS5 porter and trigram on SQLite; lcm_0002/0003: tsvector side table with
document lengths on PostgreSQL, and pg_trgm on the content). memory/search/recall.py searches
both through memory/search/lexical.py, so summaries rank on the same BM25 scale as messages.
"""

from __future__ import annotations

from memory.search.lexical import MESSAGES, TextIndex

SUMMARIES = TextIndex(
    label="summary",
    table="summaries",
    rowid="pk",
    stamp="latest_at",
    fts="lcm_summaries_fts",
    trigram="lcm_summaries_trgm",
    pg_side="lcm_summaries_tsv",
    pg_key="summary_pk",
)

INDEXES = (MESSAGES, SUMMARIES)
