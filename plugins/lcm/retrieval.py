"""Search over messages and summaries, always through an index.

Scope (DESIGN §4: memory scope is the user): a session searches every conversation of its
(user, agent), current and archived, and nothing else; no query can reach another user's
rows because the conversation ids are part of the index lookup itself.

Modes and indexes:
- `full_text`, BM25-ranked. SQLite: FTS5 porter/unicode61 (`bm25()`); the query is the
  user's words, each quoted, so `AND`, `NEAR`, `-`, `*`, quotes or `col:x` are searched as
  words and never parsed. PostgreSQL: stored `to_tsvector('english', content)` in side
  tables (lcm_0002) with a GIN index; `websearch_to_tsquery` (accepts any input) decides
  what matches, and BM25 (k1 1.2, b 0.75, as FTS5) ranks it, computed in SQL: tf from the
  candidate's tsvector positions, document length stored beside it (lcm_0003).
  BM25 statistics on PostgreSQL (N, mean length, df of each query lexeme) are those of the
  user's own conversations, not of the whole table as in FTS5. Whole-table N and mean
  length would cost a pass over every user's rows per query, or a totals row that every
  insert of every replica updates (a hot row); and whole-table figures would let other
  users' writing move this user's scores, a side channel across the memory scope. The
  user's figures come from the indexes the search already uses (the conversation index,
  which carries the lengths, and the GIN index with the conversation filter), bounded by
  that user's history like the short substring fallback, and rank by what is rare in this
  user's memory, which is what recall is about. SQLite's FTS5 keeps whole-table figures;
  with one user (or users who write alike) the two agree.
- `substring`, literal and case-insensitive, newest first. SQLite: FTS5 trigram phrase
  query; PostgreSQL: pg_trgm GIN serving `ILIKE` with `%`, `_` and `\\` escaped.
  Patterns shorter than 3 characters have no trigram: they fall back to `LIKE` over the
  user's own conversations (an index range on conversation_id), bounded by that user's
  history rather than the whole table.
Empty or blank text finds nothing (an empty list, not an error).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import UTC, datetime

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from memory.errors import InvalidArgument
from memory.history import conversations
from memory.search_text import clean_query, fts5_string, like_pattern, query_terms, snippet
from memory.types import SearchMode, SearchQuery, SearchResult, SearchScope, Session

MAX_LIMIT = 200
TRIGRAM = 3
# The substring index is asked for this much of a longer pattern; the full pattern is
# then checked on the candidates (a 10 kB paste costs a 10 kB check, not 10k lookups).
MAX_INDEXED_PATTERN = 256


class _Source(enum.Enum):
    MESSAGES = ("message", "messages", "id", "created_at", "lcm_messages")
    SUMMARIES = ("summary", "summaries", "pk", "latest_at", "lcm_summaries")

    def __init__(self, label: str, table: str, rowid: str, stamp: str, fts: str) -> None:
        self.label = label
        self.table = table
        self.rowid = rowid
        self.stamp = stamp
        self.fts = fts


@dataclass
class _Hit:
    rowid: int
    score: float


async def owned_conversations(conn: AsyncConnection, user_id: int, agent_id: str) -> list[int]:
    rows = await conn.execute(
        sa.select(conversations.c.id).where(
            conversations.c.user_id == user_id, conversations.c.agent_id == agent_id
        )
    )
    return list(rows.scalars())


def _utc(value: datetime | str | None) -> datetime | None:
    if isinstance(value, str):  # raw SQL on SQLite returns the stored text
        value = datetime.fromisoformat(value)
    if value is not None and value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value


class Retrieval:
    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine
        self.sqlite = engine.dialect.name == "sqlite"

    async def search(self, session: Session, query: SearchQuery) -> list[SearchResult]:
        try:
            mode, scope = SearchMode(query.mode), SearchScope(query.scope)
        except ValueError as exc:
            raise InvalidArgument(f"bad search query: {exc}") from exc
        if query.limit < 1:
            raise InvalidArgument("search limit must be at least 1")
        limit = min(query.limit, MAX_LIMIT)
        text = clean_query(query.text)
        if not text:
            return []
        sources = {
            SearchScope.MESSAGES: [_Source.MESSAGES],
            SearchScope.SUMMARIES: [_Source.SUMMARIES],
            SearchScope.BOTH: [_Source.MESSAGES, _Source.SUMMARIES],
        }[scope]
        results: list[SearchResult] = []
        async with self.engine.connect() as conn:
            conv_ids = await owned_conversations(conn, session.user_id, session.agent_id)
            if not conv_ids:
                return []
            for source in sources:
                results += await self._search_source(conn, source, conv_ids, text, mode, limit)
        if mode == SearchMode.FULL_TEXT:
            results.sort(key=lambda r: r.score, reverse=True)
        else:
            floor = datetime.min.replace(tzinfo=UTC)
            results.sort(key=lambda r: r.timestamp or floor, reverse=True)
        return results[:limit]

    async def _search_source(
        self,
        conn: AsyncConnection,
        source: _Source,
        conv_ids: list[int],
        text: str,
        mode: SearchMode,
        limit: int,
    ) -> list[SearchResult]:
        if mode == SearchMode.FULL_TEXT:
            needles = query_terms(text)
            if not needles:
                return []
            if self.sqlite:
                hits = await _sqlite_full_text(conn, source, conv_ids, needles, limit)
            else:
                hits = await _pg_full_text(conn, source, conv_ids, text, limit)
            verify = None
        else:
            needles = [text]
            if self.sqlite and len(text) >= TRIGRAM:
                hits = await _sqlite_trigram(conn, source, conv_ids, text, limit)
                verify = text.casefold() if len(text) > MAX_INDEXED_PATTERN else None
            else:
                hits = await _like(conn, source, conv_ids, text, limit, ilike=not self.sqlite)
                verify = None
        return await _resolve(conn, source, hits, needles, verify, limit)


async def _resolve(
    conn: AsyncConnection,
    source: _Source,
    hits: list[_Hit],
    needles: list[str],
    verify: str | None,
    limit: int,
) -> list[SearchResult]:
    if not hits:
        return []
    ids = [h.rowid for h in hits]
    rows = (
        await conn.execute(
            sa.text(
                f"SELECT {source.rowid} AS rowid, id AS public_id, content, "
                f"{source.stamp} AS stamp FROM {source.table} WHERE {source.rowid} IN :ids"
            ).bindparams(sa.bindparam("ids", expanding=True)),
            {"ids": ids},
        )
    ).mappings()
    by_rowid = {r["rowid"]: r for r in rows}
    out = []
    for hit in hits:
        row = by_rowid.get(hit.rowid)
        if row is None or (verify is not None and verify not in row["content"].casefold()):
            continue
        out.append(
            SearchResult(
                source_type=source.label,
                source_id=str(row["public_id"]),
                content=snippet(row["content"], needles),
                score=hit.score,
                timestamp=_utc(row["stamp"]),
            )
        )
    return out[:limit]


def _scope_filter(conv_ids: list[int]) -> str:
    return "scope : (" + " OR ".join(fts5_string(f"<c{c}>") for c in conv_ids) + ")"


async def _sqlite_full_text(
    conn: AsyncConnection, source: _Source, conv_ids: list[int], terms: list[str], limit: int
) -> list[_Hit]:
    fts = f"{source.fts}_fts"
    match = f"{_scope_filter(conv_ids)} AND content : ({' '.join(fts5_string(t) for t in terms)})"
    rows = await conn.execute(
        sa.text(
            f"SELECT rowid, bm25({fts}, 0.0, 1.0) AS rank FROM {fts} "
            f"WHERE {fts} MATCH :match ORDER BY rank LIMIT :limit"
        ),
        {"match": match, "limit": limit},
    )
    # bm25() is lower-is-better; scores are reported higher-is-better.
    return [_Hit(r.rowid, -float(r.rank)) for r in rows]


async def _sqlite_trigram(
    conn: AsyncConnection, source: _Source, conv_ids: list[int], text: str, limit: int
) -> list[_Hit]:
    fts = f"{source.fts}_trgm"
    indexed = text[:MAX_INDEXED_PATTERN]
    match = f"{_scope_filter(conv_ids)} AND content : {fts5_string(indexed)}"
    # A cut pattern over-matches; fetch more candidates for the exact check.
    fetch = limit if indexed == text else limit * 10
    rows = await conn.execute(
        sa.text(
            f"SELECT rowid FROM {fts} WHERE {fts} MATCH :match ORDER BY rowid DESC LIMIT :limit"
        ),
        {"match": match, "limit": fetch},
    )
    return [_Hit(r.rowid, 1.0) for r in rows]


# BM25 as FTS5 computes it: k1 = 1.2, b = 0.75, an idf at or below zero counts as 1e-6.
# Statistics are the user's (see the module docstring). Every count goes through an index:
# N and avgdl through (conversation_id) INCLUDE (doclen); df per query lexeme through the
# GIN index and the conversation filter; tf from the candidates' stored tsvectors.
# A lexeme becomes a one-lexeme tsquery quoted, quotes and backslashes doubled.
# tsvector keeps at most 255 positions per lexeme: tf, and a length made of such
# repeats, stop there (FTS5 counts on); it changes nothing for chat-sized messages.
_PG_BM25 = r"""
WITH scope AS MATERIALIZED (
  SELECT count(*) AS n, greatest(avg(doclen), 1) AS avgdl FROM {side}
  WHERE conversation_id IN :convs),
idf AS MATERIALIZED (
  SELECT t.lexeme, greatest(ln((s.n - d.df + 0.5) / (d.df + 0.5)), 1e-6) AS idf
  FROM (SELECT DISTINCT lexeme FROM unnest(to_tsvector('english'::regconfig, :text))) t
  CROSS JOIN scope s
  CROSS JOIN LATERAL (
    SELECT count(*) AS df FROM {side}
    WHERE conversation_id IN :convs AND tsv @@ (
      '''' || replace(replace(t.lexeme, '\', '\\'), '''', '''''') || '''')::tsquery) d),
hits AS MATERIALIZED (
  SELECT {key} AS rowid, tsv, doclen
  FROM {side}, websearch_to_tsquery('english'::regconfig, :text) AS q
  WHERE conversation_id IN :convs AND tsv @@ q)
SELECT h.rowid, coalesce((
  SELECT sum(i.idf * u.tf * (1.2 + 1) / (u.tf + 1.2 * (1 - 0.75 + 0.75 * h.doclen / s.avgdl)))
  FROM (SELECT lexeme, coalesce(array_length(positions, 1), 1) AS tf FROM unnest(h.tsv)) u
  JOIN idf i ON i.lexeme = u.lexeme), 0) AS rank
FROM hits h CROSS JOIN scope s
ORDER BY rank DESC, h.rowid DESC LIMIT :limit
"""


async def _pg_full_text(
    conn: AsyncConnection, source: _Source, conv_ids: list[int], text: str, limit: int
) -> list[_Hit]:
    side, key = (
        ("lcm_messages_tsv", "message_id")
        if source is _Source.MESSAGES
        else ("lcm_summaries_tsv", "summary_pk")
    )
    rows = await conn.execute(
        sa.text(_PG_BM25.format(side=side, key=key)).bindparams(
            sa.bindparam("convs", expanding=True)
        ),
        {"text": text, "convs": conv_ids, "limit": limit},
    )
    return [_Hit(r.rowid, float(r.rank)) for r in rows]


async def _like(
    conn: AsyncConnection,
    source: _Source,
    conv_ids: list[int],
    text: str,
    limit: int,
    *,
    ilike: bool,
) -> list[_Hit]:
    op = "ILIKE" if ilike else "LIKE"
    # Materialized first, sorted after: with `ORDER BY id DESC LIMIT n` alone PostgreSQL
    # may walk the primary key backwards through every user's rows looking for n matches.
    rows = await conn.execute(
        sa.text(
            f"WITH hits AS MATERIALIZED (SELECT {source.rowid} AS rowid FROM {source.table} "
            f"WHERE conversation_id IN :convs AND content {op} :pattern ESCAPE '\\') "
            f"SELECT rowid FROM hits ORDER BY rowid DESC LIMIT :limit"
        ).bindparams(sa.bindparam("convs", expanding=True)),
        {"convs": conv_ids, "pattern": like_pattern(text), "limit": limit},
    )
    return [_Hit(r.rowid, 1.0) for r in rows]
