"""PostgreSQL's pruned BM25 over the postings side table (core revision 0011).

`lexical.bm25` on PostgreSQL, when the index keeps postings: the same top k as
`lexical.bm25_exhaustive`, ties included, in two round trips (the query lexemes' df and
idf from the kept totals, then one statement). The statement:

1. threshold: the rows of the rarest lexemes (maxscore.Terms.first_cut) get partial
   scores from their postings; the `POOL` best of those are completed by probing their
   other lexemes' postings; the k-th of these full scores, t0, is a lower bound of the
   k-th best score;
2. essential lexemes: those a row must hold one of to reach t0 (MaxScore: the lexemes
   left out have bounds summing below t0). Every posting of the essential lexemes is
   read (an index-only range scan each) and summed per row: a partial score;
3. rows whose partial plus the left-out lexemes' bounds cannot reach the k-th partial
   (nor t0) are dropped; the rest are completed by probes, and those whose full score
   can reach the k-th full score are scored exactly.

Steps 1-3 use float8 (a numeric division per posting cost more than the rest of the
scan); each comparison that drops a row leaves it a margin (maxscore.SLACK) far above
float8's rounding, so a row is dropped only when its exact score is below the k-th. The
exact scores are the exhaustive form's numeric expression on the same numeric inputs
(lexical._PG_SCORE), so the final order, ties by row id, is the exhaustive one.

Why not only tighter bounds: speaker names (in most rows) and everyday words (1-5% of
rows) have bounds of idf x (k1 + 1) close to what they really give, so no bound prunes
them; what the postings change is each row's cost (a few index tuples, not its tsvector).
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from memory.search import lexical, maxscore

# Rows of the threshold phase completed by probes: the k-th of their full scores is t0.
POOL = 100

_RANK = r"""
WITH {stats},
q AS MATERIALIZED (
  SELECT lexeme, w, suffix, ord
  FROM unnest(CAST(:lexemes AS text[]), CAST(:bounds AS float8[]), CAST(:suffix AS float8[]))
       WITH ORDINALITY AS q(lexeme, w, suffix, ord)),
first AS MATERIALIZED (
  SELECT p.conversation_id AS conv, p.message_id AS id, sum({part}) AS part
  FROM {postings} p JOIN q ON q.lexeme = p.lexeme
  WHERE p.conversation_id = ANY (CAST(:scope AS bigint[]))
    AND p.lexeme = ANY (CAST(:first AS text[]))
  GROUP BY 1, 2 ORDER BY part DESC LIMIT {pool}),
first_full AS (
  SELECT f.part + coalesce((
    SELECT sum({part}) FROM {postings} p JOIN q ON q.lexeme = p.lexeme
    WHERE p.conversation_id = f.conv AND p.message_id = f.id
      AND p.lexeme = ANY (CAST(:others AS text[]))), 0) AS score
  FROM first f),
t0 AS (
  SELECT coalesce((SELECT score FROM first_full ORDER BY score DESC
                   OFFSET :limit - 1 LIMIT 1), 0) / {slack} AS t),
ess AS MATERIALIZED (
  SELECT array_agg(lexeme) FILTER (WHERE essential) AS lexemes,
         coalesce(array_agg(lexeme) FILTER (WHERE NOT essential), '{{}}') AS others,
         coalesce(max(suffix) FILTER (WHERE NOT essential), 0) AS rest
  FROM (SELECT lexeme, suffix, ord = 1 OR suffix * {slack} >= (SELECT t FROM t0) AS essential
        FROM q) e),
acc AS MATERIALIZED (
  SELECT p.conversation_id AS conv, p.message_id AS id, sum({part}) AS part
  FROM {postings} p
  JOIN (SELECT * FROM q WHERE lexeme = ANY ((SELECT lexemes FROM ess)::text[])) q
    ON q.lexeme = p.lexeme
  WHERE p.conversation_id = ANY (CAST(:scope AS bigint[]))
  GROUP BY 1, 2),
t1 AS (
  SELECT greatest((SELECT t FROM t0), coalesce((SELECT part FROM acc ORDER BY part DESC
                   OFFSET :limit - 1 LIMIT 1), 0) / {slack}) AS t),
full_ AS MATERIALIZED (
  SELECT a.conv, a.id, a.part + coalesce(sum({part}), 0) AS score
  FROM acc a
  LEFT JOIN {postings} p
    ON p.conversation_id = a.conv AND p.message_id = a.id
   AND p.lexeme = ANY ((SELECT others FROM ess)::text[])
  LEFT JOIN q ON q.lexeme = p.lexeme
  WHERE (a.part + (SELECT rest FROM ess)) * {slack} >= (SELECT t FROM t1)
  GROUP BY a.conv, a.id, a.part),
t2 AS (
  SELECT coalesce((SELECT score FROM full_ ORDER BY score DESC
                   OFFSET :limit - 1 LIMIT 1), 0) / {slack} AS t),
cand AS MATERIALIZED (SELECT conv, id FROM full_ WHERE score >= (SELECT t FROM t2))
SELECT c.id AS rowid, sum({exact}) AS rank
FROM cand c JOIN {postings} p
  ON p.conversation_id = c.conv AND p.message_id = c.id
 AND p.lexeme = ANY (CAST(:lexemes AS text[]))
JOIN idf i ON i.lexeme = p.lexeme CROSS JOIN scope s
CROSS JOIN LATERAL (SELECT p.n_all - (1 - {ctx}) * p.n_ctx AS tf) u
GROUP BY c.id
ORDER BY rank DESC, c.id DESC LIMIT :limit
"""
# A posting's share of its row's score in float8: q.w is idf * (k1 + 1).
_PART = (
    "q.w * (p.n_all - {ctx1}::float8 * p.n_ctx) / ((p.n_all - {ctx1}::float8 * p.n_ctx) "
    "+ :c1 + :c2 * p.doclen)"
)


async def bm25(
    conn: AsyncConnection,
    index: lexical.TextIndex,
    conv_ids: list[int],
    terms: list[str],
    limit: int,
) -> list[tuple[int, Decimal]]:
    """The best `limit` (rowid, exact numeric score) of `index` by BM25 over `terms`."""
    plan = await conn.execute(
        sa.text(lexical._pg_sql(_PLAN, index)).bindparams(sa.bindparam("convs", expanding=True)),
        {"text": " ".join(terms), "convs": conv_ids},
    )
    rows = [(r.lexeme, int(r.df), float(r.idf), float(r.avgdl)) for r in plan if r.df]
    if not rows:
        return []
    statement, params = ranking(index, conv_ids, terms, limit, rows)
    return [(int(r.rowid), Decimal(r.rank)) for r in await conn.execute(statement, params)]


def ranking(
    index: lexical.TextIndex,
    conv_ids: list[int],
    terms: list[str],
    limit: int,
    plan: list[tuple[str, int, float, float]],
) -> tuple[sa.TextClause, dict[str, Any]]:
    """The ranking statement and its parameters, given the query lexemes' (lexeme, df,
    idf, avgdl) as _PLAN reads them (df > 0)."""
    lexemes = maxscore.Terms.of([(name, df, idf) for name, df, idf, _ in plan], lexical.K1)
    suffix = [sum(lexemes.bounds[i:]) for i in range(len(lexemes.names))]
    first = lexemes.first_cut(limit)
    k1, b = lexical.K1, lexical.B
    sql = _RANK.format(
        stats=lexical._pg_sql("{stats}", index),
        postings=index.pg_postings,
        part=_PART.format(ctx1=1 - lexical.CONTEXT_WEIGHT),
        exact=lexical._PG_SCORE.format(k1=k1, b=b, doclen="p.doclen"),
        ctx=lexical.CONTEXT_WEIGHT,
        slack=maxscore.SLACK,
        pool=POOL,
    )
    params: dict[str, Any] = {
        "text": " ".join(terms),
        "convs": conv_ids,
        "scope": conv_ids,
        "lexemes": lexemes.names,
        "bounds": lexemes.bounds,
        "suffix": suffix,
        "first": lexemes.names[:first],
        "others": lexemes.names[first:],
        "limit": limit,
        "c1": k1 * (1 - b),
        "c2": k1 * b / plan[0][3],
    }
    return sa.text(sql).bindparams(sa.bindparam("convs", expanding=True)), params


_PLAN = (
    "WITH {stats} SELECT i.lexeme, i.df, i.idf::float8 AS idf, s.avgdl::float8 AS avgdl "
    "FROM idf i CROSS JOIN scope s"
)
