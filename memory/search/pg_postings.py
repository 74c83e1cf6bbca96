"""PostgreSQL's pruned BM25 over the postings side table (core revision 0012).

`lexical.bm25` on PostgreSQL, when the index keeps postings: the same top k as
`lexical.bm25_exhaustive`, ties included, in two round trips (the query lexemes' df, idf
and kept bounds from the totals tables, then one statement). The statement:

1. threshold: the rows of the rarest lexemes (maxscore.Terms.first_cut) get partial
   scores from their postings; the POOL best are completed by probing their other
   lexemes; the k-th of these full scores, t0, is a lower bound of the k-th best score;
2. essential lexemes: MaxScore's, with bounds idf x (k1 + 1) in rarest-first order:
   those a row must hold one of to reach t0. Every posting of theirs is read (an
   index-only range per lexeme and conversation) and summed per row: a partial score;
3. the REFINE best partials are completed by probes, and the k-th full score among them
   (or t0) is the threshold t1; a row whose partial plus the other lexemes' kept bounds
   (most occurrences, shortest row: Lexeme.bound) cannot reach t1 is dropped, the rest
   are completed by probes, and those that can reach the k-th full score are scored
   exactly.

Why the loose bounds pick the essential lexemes and the tight ones only drop rows: an
everyday word (1-5% of rows) left out costs a probe for every row kept (about 8 postings
read in a range), so it is cheaper read in full; a speaker's name (most rows) is cheaper
probed, and its tight bound (a name is in a row once, and in its context once) keeps few
rows. Probes are subqueries per row on the whole primary key (lexeme first), so no plan
reads a lexeme's postings in full or a conversation's range instead.

Steps 1-3 use float8, as the bounds do (numeric there measured about the same: 25.2
against 24.6 ms for 75k postings; the time is the executor's per row); each comparison
that drops a row leaves it a margin (maxscore.SLACK) far above float8's rounding, so a
row is dropped only when its exact score is below the k-th. The
exact scores are the exhaustive form's numeric expression on the same numeric inputs
(lexical._PG_SCORE, given as Formula.exact), so the final order, ties by row id, is the
exhaustive one.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from memory.search import maxscore

# Rows of the threshold phase completed by probes: the k-th of their full scores is t0.
POOL = 100
# Rows of the essential lexemes' best partial scores completed by probes: the k-th of
# their full scores raises the threshold the other rows are dropped under.
REFINE = 1000

_RANK = r"""
WITH {stats},
q AS MATERIALIZED (
  SELECT lexeme, w, bound, suffix, ord
  FROM unnest(CAST(:lexemes AS text[]), CAST(:weights AS float8[]), CAST(:bounds AS float8[]),
              CAST(:suffix AS float8[]))
       WITH ORDINALITY AS q(lexeme, w, bound, suffix, ord)),
first AS MATERIALIZED (
  SELECT p.conversation_id AS conv, p.message_id AS id, sum({part}) AS part
  FROM {postings} p JOIN q ON q.lexeme = p.lexeme
  WHERE p.conversation_id = ANY (CAST(:scope AS bigint[]))
    AND p.lexeme = ANY (CAST(:first AS text[]))
  GROUP BY 1, 2 ORDER BY part DESC LIMIT {pool}),
first_full AS (
  SELECT f.part + {first_more} AS score FROM first f),
t0 AS (
  SELECT coalesce((SELECT score FROM first_full ORDER BY score DESC
                   OFFSET :limit - 1 LIMIT 1), 0) / {slack} AS t),
ess AS MATERIALIZED (
  SELECT array_agg(lexeme) FILTER (WHERE essential) AS lexemes,
         coalesce(array_agg(lexeme) FILTER (WHERE NOT essential), '{{}}') AS others,
         coalesce(sum(bound) FILTER (WHERE NOT essential), 0) AS rest
  FROM (SELECT lexeme, bound, ord = 1 OR suffix * {slack} >= (SELECT t FROM t0) AS essential
        FROM q) e),
acc AS MATERIALIZED (
  SELECT p.conversation_id AS conv, p.message_id AS id, {sum_part} AS part
  FROM {postings} p
  JOIN (SELECT * FROM q WHERE lexeme = ANY ((SELECT lexemes FROM ess)::text[])) q
    ON q.lexeme = p.lexeme
  WHERE p.conversation_id = ANY (CAST(:scope AS bigint[]))
  {group}),
top AS (
  SELECT a.part + {more} AS score
  FROM (SELECT * FROM acc ORDER BY part DESC LIMIT {refine}) a),
t1 AS (
  SELECT greatest((SELECT t FROM t0), coalesce((SELECT score FROM top ORDER BY score DESC
                   OFFSET :limit - 1 LIMIT 1), 0) / {slack}) AS t),
full_ AS MATERIALIZED (
  SELECT a.conv, a.id, a.part + {more} AS score
  FROM acc a
  WHERE (a.part + (SELECT rest FROM ess)) * {slack} >= (SELECT t FROM t1)),
t2 AS (
  SELECT coalesce((SELECT score FROM full_ ORDER BY score DESC
                   OFFSET :limit - 1 LIMIT 1), 0) / {slack} AS t),
cand AS MATERIALIZED (SELECT conv, id FROM full_ WHERE score >= (SELECT t FROM t2))
SELECT c.id AS rowid, (
  SELECT sum({exact}) FROM idf i
  JOIN {postings} p ON p.lexeme = i.lexeme AND p.conversation_id = c.conv AND p.message_id = c.id
  CROSS JOIN scope s
  CROSS JOIN LATERAL (SELECT p.n_all - (1 - {ctx}) * p.n_ctx AS tf) u) AS rank
FROM cand c
ORDER BY rank DESC, c.id DESC LIMIT :limit
"""
# The rest of a row's float8 score, from the `others` lexemes: one primary-key probe per
# row and lexeme (a subquery per row, so no plan reads these lexemes' postings in full).
_MORE = """coalesce((
    SELECT sum({part}) FROM q JOIN {postings} p
      ON p.lexeme = q.lexeme AND p.conversation_id = {row}.conv AND p.message_id = {row}.id
    WHERE q.lexeme = ANY ({others})), 0)"""
# A posting's share of its row's score in float8: q.w is idf * (k1 + 1).
_PART = (
    "q.w * (p.n_all - {ctx1}::float8 * p.n_ctx) / ((p.n_all - {ctx1}::float8 * p.n_ctx) "
    "+ :c1 + :c2 * p.doclen)"
)


@dataclass(frozen=True)
class Formula:
    """What memory/search/lexical.py defines for one index, and this module follows."""

    k1: float
    b: float
    context_weight: float
    stats: str  # CTEs `scope` (n, avgdl), `terms`, `idf` over :text and :convs (expanding)
    exact: str  # a lexeme's numeric share of a row's score, over u.tf, i.idf, s.avgdl, p.doclen
    postings: str  # the postings table (revision 0012)
    terms: str  # the per-conversation df and bounds table (revisions 0010, 0012)


async def bm25(
    conn: AsyncConnection, formula: Formula, conv_ids: list[int], terms: list[str], limit: int
) -> list[tuple[int, Decimal]]:
    """The best `limit` (rowid, exact numeric score) by BM25 over `terms`."""
    plan = await conn.execute(
        sa.text(_PLAN.format(stats=formula.stats, terms=formula.terms)).bindparams(
            sa.bindparam("convs", expanding=True)
        ),
        {"text": " ".join(terms), "convs": conv_ids},
    )
    rows = [Lexeme(*r) for r in plan if r.df]
    if not rows:
        return []
    statement, params = ranking(formula, conv_ids, terms, limit, rows)
    return [(int(r.rowid), Decimal(r.rank)) for r in await conn.execute(statement, params)]


@dataclass(frozen=True)
class Lexeme:
    """A query lexeme in the user's scope, as _PLAN reads it."""

    name: str
    df: int
    idf: float
    avgdl: float
    max_a: int | None  # the most occurrences in a row's content, context, and the
    max_b: int | None  # shortest row holding it (None: not kept, no tighter bound)
    min_dl: int | None

    def bound(self, f: Formula) -> float:
        """The most a row can get from this lexeme: BM25's share at the highest tf and the
        shortest row (a share grows with tf and falls with the row's length); without
        kept figures, idf x (k1 + 1)."""
        if self.max_a is None or self.max_b is None or self.min_dl is None:
            return self.idf * (f.k1 + 1)
        tf = self.max_a + f.context_weight * self.max_b
        return self.idf * tf * (f.k1 + 1) / (tf + f.k1 * (1 - f.b + f.b * self.min_dl / self.avgdl))


def ranking(
    f: Formula, conv_ids: list[int], terms: list[str], limit: int, plan: list[Lexeme]
) -> tuple[sa.TextClause, dict[str, Any]]:
    """The ranking statement and its parameters, given the query's lexemes (df > 0)."""
    lexemes = maxscore.Terms.of([(x.name, x.df, x.idf) for x in plan], f.k1)
    suffix = [sum(lexemes.bounds[i:]) for i in range(len(lexemes.names))]
    first = lexemes.first_cut(limit)
    bound = {x.name: x.bound(f) for x in plan}
    part = _PART.format(ctx1=1 - f.context_weight)
    more = functools.partial(_MORE.format, part=part, postings=f.postings)
    sql = _RANK.format(
        stats=f.stats,
        first_more=more(row="f", others="CAST(:others AS text[])"),
        # One lexeme: a row has one posting, nothing to add up (hashing every row of a
        # common word cost more than reading it).
        sum_part=f"sum({part})" if len(plan) > 1 else part,
        group="GROUP BY 1, 2" if len(plan) > 1 else "",
        more=more(row="a", others="(SELECT others FROM ess)::text[]"),
        postings=f.postings,
        part=part,
        exact=f.exact,
        ctx=f.context_weight,
        slack=maxscore.SLACK,
        pool=POOL,
        refine=REFINE,
    )
    params: dict[str, Any] = {
        "text": " ".join(terms),
        "convs": conv_ids,
        "scope": conv_ids,
        "lexemes": lexemes.names,
        "weights": lexemes.bounds,
        "bounds": [bound[name] for name in lexemes.names],
        "suffix": suffix,
        "first": lexemes.names[:first],
        "others": lexemes.names[first:],
        "limit": limit,
        "c1": f.k1 * (1 - f.b),
        "c2": f.k1 * f.b / plan[0].avgdl,
    }
    return sa.text(sql).bindparams(sa.bindparam("convs", expanding=True)), params


# It also turns JIT off for the rest of the transaction: the ranking's estimated cost
# crosses jit_above_cost at 1M messages, and compiling cost 20-100 ms of CPU to save a
# few (set here, the ranking statement needs no round trip of its own).
_PLAN = (
    "WITH {stats} SELECT i.lexeme, i.df, i.idf::float8 AS idf, s.avgdl::float8 AS avgdl, "
    "m.max_a, m.max_b, m.min_dl FROM idf i CROSS JOIN scope s CROSS JOIN LATERAL ("
    "SELECT max(max_a) AS max_a, max(max_b) AS max_b, min(min_dl) AS min_dl FROM {terms} "
    "WHERE conversation_id IN :convs AND lexeme = i.lexeme) m "
    "CROSS JOIN (SELECT set_config('jit', 'off', true)) AS no_jit"
)
