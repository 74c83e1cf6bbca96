"""SQLite's ranked search, pruned: FTS5's `bm25()` scores, computed for few rows.

`bm25()` (memory/search/lexical.py) reads, for every query, each query term's whole
doclist and each scope phrase's to count rows, then scores every row holding any term
(at 1M messages most of them hold only a speaker's name). Here the same scores come
from the postings core revision 0011 keeps beside `messages_fts`: a term's df is one
lookup, its rows one key range, a row's counts one primary-key probe; MaxScore
(memory/search/maxscore.py) decides which rows can reach the top `limit`, in SQL so
that only those rows leave SQLite:

1. the rows of the rarest terms (up to maxscore.FIRST_ROWS) are estimated over those
   terms; the `limit`-th estimate is a floor under the `limit`-th score; rows whose
   estimate plus the other terms' bounds cannot reach it are left out, the others are
   scored in full; the `limit`-th score is the threshold;
2. if the commoner terms' bounds could still reach it, the rows of the terms `needed`
   (not scored yet) are estimated over those terms, then, if their estimate plus the
   bounds of the terms left could reach the threshold, over the terms left too (probing
   their postings), and those whose whole estimate reaches it are scored in full.

An estimate is the score's formula with its constants folded, differing from it by
rounding only (maxscore.SLACK covers that); no row is left out that could tie.

The scores are FTS5's own doubles: N, the mean length and df are the whole table's (as
bm25() counts them: every column's tokens, a row holding the term in the content or the
context), idf is computed as fts5_aux.c does, and each row's score is the same
expression summed in the same order (one term per query phrase, in the query's order).
So the top `limit`, ties by rowid newest first included, is bm25()'s; the exhaustive
bm25() stays the reference (tests/memory/test_bm25_exact.py, bench/search_scale.py).

Left to bm25() (`ranked` returns None): an index without postings (lcm's summaries), and
a query term of several tokens ("snake_case" is a phrase to FTS5, which postings do not
place), or of none.
"""

from __future__ import annotations

import json
import math
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from memory.search import maxscore, stems


def _contribution(k1: float, b: float, context_weight: float) -> str:
    """One phrase's part of a row's score, given its idf (`{idf}`) and the posting `p`,
    as fts5Bm25Function writes it: the frequency weighs each column's occurrences."""
    freq = f"(p.tf * 1.0 + p.ctf * {context_weight!r})"
    return (
        f"({{idf}} * (({freq} * ({k1!r} + 1.0)) / "
        f"({freq} + {k1!r} * (1 - {b!r} + {b!r} * p.dl / :avgdl))))"
    )


def _estimate(k1: float, b: float, context_weight: float) -> str:
    """The same value in fewer operations (`:c1`..`:c3` folding the constants), for
    pruning only: it differs from the exact one by rounding, which maxscore.SLACK covers."""
    freq = f"(p.tf + p.ctf * {context_weight!r})"
    return f"(q.w * {freq} / ({freq} * :c1 + :c2 + :c3 * p.dl))"


async def ranked(
    conn: AsyncConnection,
    fts: str,
    conv_ids: list[int],
    terms: list[str],
    limit: int,
    k1: float,
    b: float,
    context_weight: float,
) -> list[tuple[int, float]] | None:
    """The best `limit` (rowid, score) of `fts` (an FTS5 table with postings, core
    revision 0011) among the rows of `conv_ids` holding any of `terms`, as bm25() with
    column weights (0, 1, `context_weight`) ranks them; None when bm25() must (module doc)."""
    tokens = [stems.query_tokens(t) for t in terms]
    if any(len(t) != 1 for t in tokens):
        return None
    phrases = [t[0] for t in tokens]
    totals = (await conn.execute(sa.text(f"SELECT n, tokens FROM {fts}_totals"))).first()
    if totals is None:  # not kept: no revision 0011 (never after migrating)
        return None
    if not totals.n:
        return []
    n, avgdl = int(totals.n), totals.tokens / totals.n
    found = await conn.execute(
        sa.text(f"SELECT term, df FROM {fts}_terms WHERE term IN :terms").bindparams(
            sa.bindparam("terms", expanding=True)
        ),
        {"terms": sorted(set(phrases))},
    )
    df = {r.term: int(r.df) for r in found}
    idf = [_idf(n, df.get(p, 0)) for p in phrases]
    weight: dict[str, float] = {}
    for phrase, value in zip(phrases, idf, strict=True):
        if phrase in df:
            weight[phrase] = weight.get(phrase, 0.0) + value
    plan = maxscore.Terms.of([(t, df[t], w) for t, w in weight.items()], k1)
    if not plan.names:
        return []
    query = _Query(conn, fts, conv_ids, phrases, idf, limit)
    query.params.update(avgdl=avgdl, c1=1 / (k1 + 1), c2=k1 * (1 - b) / (k1 + 1))
    query.params["c3"] = k1 * b / avgdl / (k1 + 1)
    exact, estimate = _contribution(k1, b, context_weight), _estimate(k1, b, context_weight)
    query.prepare(exact, estimate)
    take = plan.first_cut(limit)
    top = await query.top(plan.names[:take], weight, sum(plan.bounds[take:]))
    while True:
        threshold = top[-1][1] if len(top) >= limit else None
        need = plan.needed(threshold)
        if need <= take:
            return top
        more = await query.top(
            plan.names[take:need], weight, sum(plan.bounds[need:]), threshold, plan.names[need:]
        )
        # Rows holding a term of both rounds may come twice, with the same score.
        merged = {rowid: score for rowid, score in top + more}
        top = sorted(merged.items(), key=lambda h: (h[1], h[0]), reverse=True)[:limit]
        take = need


def _idf(n: int, df: int) -> float:
    # fts5Bm25GetData: an idf at or below zero (a term in over half the rows) is 1e-6.
    idf = math.log((n - df + 0.5) / (df + 0.5))
    return idf if idf > 0.0 else 1e-6


class _Query:
    """The SQL of one search: the rows of some terms, pruned, then scored exactly."""

    def __init__(
        self,
        conn: AsyncConnection,
        fts: str,
        conv_ids: list[int],
        phrases: list[str],
        idf: list[float],
        limit: int,
    ) -> None:
        self.conn, self.fts, self.phrases, self.idf = conn, fts, phrases, idf
        self.params: dict[str, Any] = {
            "convs": json.dumps(conv_ids),
            "all": json.dumps(sorted(set(phrases))),
            "limit": limit,
            "slack": maxscore.SLACK,
        }
        self.score, self.estimate = "", ""

    def prepare(self, exact: str, estimate: str) -> None:
        # One column per phrase, then their sum in the query's order, as bm25() adds.
        columns, total = [], "0.0"
        for i, (phrase, value) in enumerate(zip(self.phrases, self.idf, strict=True)):
            self.params[f"t{i}"], self.params[f"idf{i}"] = phrase, value
            part = exact.format(idf=f":idf{i}")
            columns.append(f"total(CASE WHEN p.term = :t{i} THEN {part} END) AS c{i}")
            total = f"({total} + s.c{i})"
        self.score = (
            f"SELECT s.id, {total} AS score FROM (SELECT c.id, {', '.join(columns)} "
            f"FROM candidates c CROSS JOIN json_each(:all) t CROSS JOIN {self.fts}_postings p "
            "WHERE p.term = t.value AND p.id = c.id GROUP BY c.id) s "
            "ORDER BY score DESC, s.id DESC LIMIT :limit"
        )
        self.estimate = estimate

    async def top(
        self,
        essential: list[str],
        weight: dict[str, float],
        rest: float,
        threshold: float | None = None,
        others: list[str] | None = None,
    ) -> list[tuple[int, float]]:
        """The best rows of the user's holding one of `essential` and able to reach the
        top, scored in full. Able: each row's estimate over `essential` (a term weighing
        its phrases' idf) plus `rest`, the most the other terms can add, reaches the
        higher of `threshold` and the `limit`-th best estimate (a floor: those rows score
        at least that); with `others` (the terms `rest` bounds), the row's estimate over
        them too, read from their postings, must then reach it instead of `rest`."""
        params = dict(self.params, rest=rest, threshold=threshold or 0.0)
        values = []
        for i, term in enumerate(essential):
            params[f"e{i}"], params[f"w{i}"] = term, weight[term]
            values.append(f"(:e{i}, :w{i})")
        refine, ctes = "", ""
        if others:
            more = []
            for i, term in enumerate(others):
                params[f"o{i}"], params[f"v{i}"] = term, weight[term]
                more.append(f"(:o{i}, :v{i})")
            refine = (
                "AND (parts.part + coalesce((SELECT sum(" + self.estimate + ") FROM r AS q "
                f"CROSS JOIN {self.fts}_postings p WHERE p.term = q.term AND p.id = parts.id), "
                "0.0)) * :slack >= floor.t "
            )
            ctes = f", r(term, w) AS (VALUES {', '.join(more)})"
        sql = (
            f"WITH q(term, w) AS (VALUES {', '.join(values)}){ctes}, "
            f"parts AS MATERIALIZED (SELECT p.id, sum({self.estimate}) AS part "
            f"FROM q CROSS JOIN {self.fts}_postings p WHERE p.term = q.term "
            "AND p.conv IN (SELECT value FROM json_each(:convs)) GROUP BY p.id), "
            "floor(t) AS (SELECT max(:threshold, coalesce((SELECT part FROM parts "
            "ORDER BY part DESC LIMIT 1 OFFSET :limit - 1), 0.0)) / :slack), "
            "candidates(id) AS (SELECT parts.id FROM parts, floor "
            f"WHERE (parts.part + :rest) * :slack >= floor.t {refine}) "
            f"{self.score}"
        )
        rows = await self.conn.execute(sa.text(sql), params)
        return [(int(r.id), float(r.score)) for r in rows]
