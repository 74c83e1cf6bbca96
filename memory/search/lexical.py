"""Lexical search over an indexed table: BM25 over any query term, and literal substrings.

One implementation for every provider and both databases. A `TextIndex` names the tables
that index one source (core's messages, lcm's summaries); the functions here query them.
Scope (the memory belongs to the user) is a list of the user's conversation ids, part
of every index lookup, so no query can reach another user's rows.

Ranked (`bm25`): the query's terms are its words minus English stop words
(memory/search/text.py); a row matches when it holds ANY of them, stemmed, and ranks by
BM25 (k1 1.2, b 0.75): more and rarer shared terms rank higher. A message's `context`
(the end of the message before it, see core revision 0004) is part of the row: a word
there counts CONTEXT_WEIGHT of one of the message's own, and the row's length is both
fields' (FTS5's weighted `bm25()`). Measured on bench/recall.py, this beat ranking the two
fields separately, each normalised by its own length (bench/RESULTS.md).
- SQLite: FTS5 `bm25()` with column weights, over Snowball stems (memory/search/stems.py);
  the terms are quoted, so `AND`, `NEAR`, `-`, `*` or `col:x` in user text are words,
  never operators. `bm25` computes the same doubles by MaxScore over the postings core
  revision 0011 keeps beside the FTS5 table (memory/search/sqlite_ranked.py); `bm25()`
  itself is `bm25_exhaustive`, and what the postings cannot rank.
- PostgreSQL: the same formula computed in SQL over the stored tsvectors (content at
  weight A, context at B); rows are found through the GIN index with an OR tsquery built
  from the terms' own lexemes, so no user text is parsed as tsquery syntax.
  N, mean length and df are the user's own rows': whole-table figures would let other
  users' writing move this user's scores, a side channel across the memory scope. FTS5
  keeps whole-table figures; for one user, or users who write alike, the two agree.
  tsvector keeps at most 255 positions per lexeme, so tf stops there (FTS5 counts on):
  nothing at chat sizes.

  Exact and pruned (issue 34): counting N, avgdl and df over the user's rows, and
  scoring every row holding any query word, cost 3.6 s of CPU at 1M messages, most of
  the rows scored holding only a speaker's name (every imported message starts with
  one). Core revision 0010 keeps the totals per conversation (rows, summed doclen,
  each lexeme's df), and 0011 a postings side table (per row and lexeme: its counts and
  the row's doclen) and each lexeme's bounds, all by a trigger in the transaction of the
  index's own write, so every replica reads what the index holds. `bm25` evaluates
  MaxScore over them (memory/search/pg_postings.py): a threshold from the rarest
  lexemes' rows, the essential lexemes' postings summed, the other lexemes probed only
  for rows that could still reach the `limit`-th score. The last candidates are scored
  with the exhaustive form's numeric SQL on the same inputs, so the top k is identical,
  ties included; `bm25_exhaustive` is that form, the reference
  tests/memory/test_bm25_exact.py and bench/search_scale.py check against.
  Chosen over a search library (tantivy, a side index on local disk) because the index
  must stay in the database's transactions and be shared by replicas.

Off the event loop: on SQLite (an inline driver, memory/storage/sqlite_inline.py) ranked
and literal lookups run on a worker thread (`off_loop`), so a long search does not stall
every other chat; PostgreSQL's driver already waits without blocking the loop.

Literal (`substring`): case-insensitive, newest first. SQLite: FTS5 trigram phrase query;
PostgreSQL: pg_trgm serving `ILIKE` with `%`, `_` and `\\` escaped. Patterns shorter
than 3 characters have no trigram: `LIKE` over the user's own conversations (an index
range on conversation_id), bounded by that user's history rather than the whole table.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime
from decimal import Decimal
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from memory.contract.types import SearchResult, as_utc
from memory.search import pg_postings, sqlite_ranked, stems
from memory.search.text import fts5_string, like_pattern, snippet
from memory.search.window import ANY_TIME, Window
from memory.storage.sqlite_inline import off_loop

K1, B = 1.2, 0.75
# A word of the previous message counts this much of one of the message's own (measured
# on bench/recall.py; see bench/RESULTS.md).
CONTEXT_WEIGHT = 0.5
TRIGRAM = 3
# The substring index is asked for this much of a longer pattern; the full pattern is
# then checked on the candidates (a 10 kB paste costs a 10 kB check, not 10k lookups).
MAX_INDEXED_PATTERN = 256


@dataclass(frozen=True)
class TextIndex:
    """How one source table is indexed (see core revision 0004 for messages)."""

    label: str  # SearchResult.source_type of its rows
    table: str
    rowid: str  # the key the indexes use
    stamp: str  # the row's time
    fts: str  # SQLite FTS5 over stems.index_text: scope, content[, context]
    trigram: str  # SQLite contentless FTS5 (trigram): scope, content
    pg_side: str  # PostgreSQL side table: key, conversation_id, tsv, doclen
    pg_key: str
    context: bool = False  # whether rows have a context field (FTS5 column, tsv weight B)
    # PostgreSQL tables of per-conversation totals (n, doclen) and lexeme df (revision 0009)
    pg_totals: str | None = None
    pg_terms: str | None = None
    # PostgreSQL postings (revision 0012): per row and lexeme, its counts and doclen
    pg_postings: str | None = None
    indexed: str = "TRUE"  # which rows of `table` the indexes hold (SQL, on `table`)
    # Where a row's time span starts when it has one (`stamp` is its end): a date-filtered
    # search finds the rows whose span overlaps the window (memory/search/window.py)
    start_stamp: str | None = None
    # SQLite: `fts` has postings, df and totals beside it (core revision 0011)
    postings: bool = False


MESSAGES = TextIndex(
    label="message",
    table="messages",
    rowid="id",
    stamp="created_at",
    fts="messages_fts",
    trigram="messages_trgm",
    pg_side="messages_search",
    pg_key="message_id",
    context=True,
    indexed="role <> 'tool'",
    pg_totals="messages_search_totals",
    pg_terms="messages_search_terms",
    postings=True,
    pg_postings="messages_search_postings",
)


@dataclass
class Hit:
    rowid: int
    score: float


def _utc(value: datetime | str | None) -> datetime | None:
    # Raw SQL on SQLite returns the stored text.
    return as_utc(datetime.fromisoformat(value) if isinstance(value, str) else value)


def _scope_filter(conv_ids: list[int]) -> str:
    return "scope : (" + " OR ".join(fts5_string(f"<c{c}>") for c in conv_ids) + ")"


async def bm25(
    conn: AsyncConnection,
    index: TextIndex,
    conv_ids: list[int],
    terms: list[str],
    limit: int,
    window: Window = ANY_TIME,
) -> list[Hit]:
    """Rows holding any of `terms`, best BM25 first (scores higher-is-better); of the
    `window` only when it is set, scored as without it (the window is no other corpus:
    N, lengths and df stay the user's), by the exhaustive form, which takes a filter."""
    if not terms or not conv_ids:
        return []
    async with off_loop(conn):
        if window:
            if conn.dialect.name == "sqlite":
                return await _sqlite_bm25(conn, index, conv_ids, terms, limit, window)
            return _hits(await _pg_rank(conn, index, conv_ids, terms, limit, window))
        if conn.dialect.name == "sqlite":
            if index.postings:
                top = await sqlite_ranked.ranked(
                    conn, index.fts, conv_ids, terms, limit, K1, B, CONTEXT_WEIGHT
                )
                if top is not None:
                    return [Hit(rowid, score) for rowid, score in top]
            return await _sqlite_bm25(conn, index, conv_ids, terms, limit)
        return await _pg_bm25(conn, index, conv_ids, terms, limit)


async def bm25_exhaustive(
    conn: AsyncConnection, index: TextIndex, conv_ids: list[int], terms: list[str], limit: int
) -> list[Hit]:
    """What `bm25` returns, computed by scoring every row holding any of `terms` and
    counting the totals anew: the reference the pruned evaluation is checked against."""
    if not terms or not conv_ids:
        return []
    async with off_loop(conn):
        if conn.dialect.name == "sqlite":
            return await _sqlite_bm25(conn, index, conv_ids, terms, limit)
        counted = replace(index, pg_totals=None, pg_terms=None, pg_postings=None)
        return _hits(await _pg_rank(conn, counted, conv_ids, terms, limit))


async def _sqlite_bm25(
    conn: AsyncConnection,
    index: TextIndex,
    conv_ids: list[int],
    terms: list[str],
    limit: int,
    window: Window = ANY_TIME,
) -> list[Hit]:
    columns = "{content context}" if index.context else "content"
    weights = f"0.0, 1.0, {CONTEXT_WEIGHT}" if index.context else "0.0, 1.0"
    words = stems.fts5_terms(terms)
    within = f"AND rowid IN ({window.rows(index)}) " if window else ""
    statement = sa.text(
        f"SELECT rowid, bm25({index.fts}, {weights}) AS rank FROM {index.fts} "
        # Ties newest first, as on PostgreSQL: a page is the head of a longer one, and
        # both databases list equal scores alike.
        f"WHERE {index.fts} MATCH :match {within}ORDER BY rank, rowid DESC LIMIT :limit"
    )
    if window:
        statement = window.bind(statement.bindparams(sa.bindparam("convs", expanding=True)))
    params: dict[str, Any] = {
        "match": f"{_scope_filter(conv_ids)} AND {columns} : ({words})",
        "limit": limit,
    }
    if window:
        params["convs"] = conv_ids
    rows = await conn.execute(statement, params)
    # bm25() is lower-is-better; scores are reported higher-is-better.
    return [Hit(r.rowid, -float(r.rank)) for r in rows]


# BM25 as FTS5 computes it: an idf at or below zero counts as 1e-6; a context occurrence
# (weight B) counts CONTEXT_WEIGHT in tf, as FTS5's column weights do. A lexeme becomes a
# one-lexeme tsquery quoted, quotes and backslashes doubled; their OR finds the candidates
# through the GIN index. `scope` (n, avgdl) and `idf` come either from counting the user's
# rows (the exhaustive form) or from the per-conversation totals (core revision 0010);
# both give the same numeric values, so the same scores.
_PG_TERMS = r"""
terms AS MATERIALIZED (
  SELECT lexeme, '''' || replace(replace(lexeme, '\', '\\'), '''', '''''') || '''' AS q
  FROM (SELECT DISTINCT lexeme FROM unnest(to_tsvector('english'::regconfig, :text))) t)"""
_PG_COUNTED = (
    r"""
scope AS MATERIALIZED (
  SELECT count(*) AS n, greatest(avg(doclen), 1) AS avgdl FROM {side}
  WHERE conversation_id IN :convs),"""
    + _PG_TERMS
    + r""",
idf AS MATERIALIZED (
  SELECT t.lexeme, d.df, greatest(ln((s.n - d.df + 0.5) / (d.df + 0.5)), 1e-6) AS idf
  FROM terms t CROSS JOIN scope s
  CROSS JOIN LATERAL (
    SELECT count(*) AS df FROM {side}
    WHERE conversation_id IN :convs AND tsv @@ t.q::tsquery) d)"""
)
# avg(doclen) is numeric sum / count: the same division as here.
_PG_KEPT = (
    r"""
scope AS MATERIALIZED (
  SELECT coalesce(sum(n), 0) AS n, greatest(sum(doclen) / sum(n), 1) AS avgdl
  FROM {totals} WHERE conversation_id IN :convs),"""
    + _PG_TERMS
    + r""",
idf AS MATERIALIZED (
  SELECT t.lexeme, d.df, greatest(ln((s.n - d.df + 0.5) / (d.df + 0.5)), 1e-6) AS idf
  FROM terms t CROSS JOIN scope s
  CROSS JOIN LATERAL (
    SELECT coalesce(sum(df), 0) AS df FROM {terms}
    WHERE conversation_id IN :convs AND lexeme = t.lexeme) d)"""
)
_PG_RANK = r"""
WITH {stats},
hits AS MATERIALIZED (
  SELECT {key} AS rowid, tsv, doclen FROM {side}
  WHERE conversation_id IN :convs{within}
    AND tsv @@ (SELECT string_agg(q, ' | ') FROM terms)::tsquery)
SELECT h.rowid, sum({score}) AS rank
FROM hits h CROSS JOIN scope s
CROSS JOIN LATERAL unnest(h.tsv) AS l(lexeme, positions, weights)
JOIN idf i ON i.lexeme = l.lexeme
CROSS JOIN LATERAL (
  SELECT coalesce(cardinality(l.weights), 1)
         - (1 - {ctx}) * coalesce(cardinality(array_positions(l.weights, 'B')), 0) AS tf) u
GROUP BY h.rowid
ORDER BY rank DESC, h.rowid DESC LIMIT :limit
"""
# One lexeme's share of a row's score (tf `u.tf`, idf `i.idf`, scope `s`), numeric: also
# the exact step of memory/search/pg_postings.py, which must give the same values.
_PG_SCORE = "i.idf * u.tf * ({k1} + 1) / (u.tf + {k1} * (1 - {b} + {b} * {doclen} / s.avgdl))"


def _pg_sql(template: str, index: TextIndex, window: Window = ANY_TIME) -> str:
    kept = index.pg_totals is not None and index.pg_terms is not None
    stats = (_PG_KEPT if kept else _PG_COUNTED).format(
        side=index.pg_side, totals=index.pg_totals, terms=index.pg_terms
    )
    return template.format(
        stats=stats,
        side=index.pg_side,
        key=index.pg_key,
        score=_PG_SCORE.format(k1=K1, b=B, doclen="h.doclen"),
        k1=K1,
        b=B,
        ctx=CONTEXT_WEIGHT,
        within=f"\n    AND {index.pg_key} IN ({window.rows(index)})" if window else "",
    )


async def _pg_rank(
    conn: AsyncConnection,
    index: TextIndex,
    conv_ids: list[int],
    terms: list[str],
    limit: int,
    window: Window = ANY_TIME,
) -> list[tuple[int, Decimal]]:
    """The best `limit` (rowid, score) by BM25 over all of `terms`, every row holding one
    (and in `window`) scored. Scores stay numeric: two rows whose scores differ in numeric
    may not as floats."""
    params: dict[str, Any] = {"text": " ".join(terms), "convs": conv_ids, "limit": limit}
    statement = sa.text(_pg_sql(_PG_RANK, index, window))
    rows = await conn.execute(
        window.bind(statement.bindparams(sa.bindparam("convs", expanding=True))), params
    )
    return [(int(r.rowid), Decimal(r.rank)) for r in rows]


async def _pg_bm25(
    conn: AsyncConnection, index: TextIndex, conv_ids: list[int], terms: list[str], limit: int
) -> list[Hit]:
    """Pruned over the postings side table where the index keeps one
    (memory/search/pg_postings.py), else every matching row scored."""
    if index.pg_postings is not None and index.pg_terms is not None:
        formula = pg_postings.Formula(
            k1=K1,
            b=B,
            context_weight=CONTEXT_WEIGHT,
            stats=_pg_sql("{stats}", index),
            exact=_PG_SCORE.format(k1=K1, b=B, doclen="p.doclen"),
            postings=index.pg_postings,
            terms=index.pg_terms,
        )
        return _hits(await pg_postings.bm25(conn, formula, conv_ids, terms, limit))
    return _hits(await _pg_rank(conn, index, conv_ids, terms, limit))


def _hits(scored: list[tuple[int, Decimal]]) -> list[Hit]:
    return [Hit(rowid, float(score)) for rowid, score in scored]


async def literal(
    conn: AsyncConnection,
    index: TextIndex,
    conv_ids: list[int],
    text: str,
    limit: int,
    window: Window = ANY_TIME,
) -> tuple[list[Hit], str | None]:
    """Rows containing `text` (case-insensitive), newest first, in `window` when it is
    set, and the pattern each candidate must still be checked against (None when the
    index was exact)."""
    if not text or not conv_ids:
        return [], None
    async with off_loop(conn):
        return await _literal(conn, index, conv_ids, text, limit, window)


async def _literal(
    conn: AsyncConnection,
    index: TextIndex,
    conv_ids: list[int],
    text: str,
    limit: int,
    window: Window,
) -> tuple[list[Hit], str | None]:
    if conn.dialect.name == "sqlite" and len(text) >= TRIGRAM:
        indexed = text[:MAX_INDEXED_PATTERN]
        match = f"{_scope_filter(conv_ids)} AND content : {fts5_string(indexed)}"
        # A cut pattern over-matches; fetch more candidates for the exact check.
        fetch = limit if indexed == text else limit * 10
        within = f"AND rowid IN ({window.rows(index)}) " if window else ""
        statement = sa.text(
            f"SELECT rowid FROM {index.trigram} WHERE {index.trigram} MATCH :match "
            f"{within}ORDER BY rowid DESC LIMIT :limit"
        )
        params: dict[str, Any] = {"match": match, "limit": fetch}
        if window:
            statement = window.bind(statement.bindparams(sa.bindparam("convs", expanding=True)))
            params["convs"] = conv_ids
        rows = await conn.execute(statement, params)
        verify = text.casefold() if indexed != text else None
        return [Hit(r.rowid, 1.0) for r in rows], verify
    op = "LIKE" if conn.dialect.name == "sqlite" else "ILIKE"
    # Materialized first, sorted after: with `ORDER BY id DESC LIMIT n` alone PostgreSQL
    # may walk the primary key backwards through every user's rows looking for n matches.
    statement = sa.text(
        f"WITH hits AS MATERIALIZED (SELECT {index.rowid} AS rowid FROM {index.table} "
        f"WHERE conversation_id IN :convs AND {index.indexed} "
        f"AND {window.condition(index)} "
        f"AND content {op} :pattern ESCAPE '\\') "
        f"SELECT rowid FROM hits ORDER BY rowid DESC LIMIT :limit"
    )
    rows = await conn.execute(
        window.bind(statement.bindparams(sa.bindparam("convs", expanding=True))),
        {"convs": conv_ids, "pattern": like_pattern(text), "limit": limit},
    )
    return [Hit(r.rowid, 1.0) for r in rows], None


async def resolve(
    conn: AsyncConnection,
    index: TextIndex,
    hits: list[Hit],
    needles: list[str],
    verify: str | None = None,
) -> list[SearchResult]:
    """`hits` as results, in their order: public id, snippet around a needle, time,
    and the session the row belongs to."""
    if not hits:
        return []
    by_rowid = {
        r["rowid"]: r for r in await _rows(conn, index, index.rowid, [h.rowid for h in hits])
    }
    out = []
    for hit in hits:
        row = by_rowid.get(hit.rowid)
        if row is None or (verify is not None and verify not in row["content"].casefold()):
            continue
        out.append(_result(index, row, hit.score, needles))
    return out


async def resolve_ids(
    conn: AsyncConnection,
    index: TextIndex,
    conv_ids: list[int],
    scored: list[tuple[str, float]],
    needles: list[str],
    window: Window = ANY_TIME,
) -> list[SearchResult]:
    """(public id, score) pairs of `index`'s rows as results, in their order; ids of rows
    that are gone, outside `conv_ids` (the user's) or `window`, or not ids at all are
    left out."""
    if index.rowid == "id":  # the public id is the key: only whole numbers can be one
        scored = [(i, s) for i, s in scored if i.isdigit() and len(i) <= 18]
    ids: list[int | str] = [int(i) if index.rowid == "id" else i for i, _ in scored]
    if not ids:
        return []
    rows = await _rows(conn, index, "id", ids, window)
    mine = set(conv_ids)
    by_id = {str(r["public_id"]): r for r in rows if r["conv"] in mine}
    return [_result(index, by_id[i], score, needles) for i, score in scored if i in by_id]


async def _rows(
    conn: AsyncConnection,
    index: TextIndex,
    column: str,
    values: list[Any],
    window: Window = ANY_TIME,
) -> list[sa.RowMapping]:
    statement = sa.text(
        f"SELECT t.{index.rowid} AS rowid, t.id AS public_id, t.content AS content, "
        f"t.{index.stamp} AS stamp, c.session_id AS session_id, "
        f"t.conversation_id AS conv, {'t.seq' if index.context else '0'} AS seq "
        f"FROM {index.table} t JOIN conversations c ON c.id = t.conversation_id "
        f"WHERE t.{column} IN :values AND {window.condition(index, 't.')}"
    )
    result = await conn.execute(
        window.bind(statement.bindparams(sa.bindparam("values", expanding=True))),
        {"values": values},
    )
    return list(result.mappings())


def _result(index: TextIndex, row: sa.RowMapping, score: float, needles: list[str]) -> SearchResult:
    return SearchResult(
        source_type=index.label,
        source_id=str(row["public_id"]),
        content=snippet(row["content"], needles),
        score=score,
        timestamp=_utc(row["stamp"]),
        session_id=row["session_id"],
    )
