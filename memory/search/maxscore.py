"""Which of a query's terms a row must hold to reach the top k: MaxScore's pruning
(Turtle and Flood, 1995), exact.

BM25 gives a row, for each term it holds, idf * tf * (k1 + 1) / (tf + k1 * (1 - b +
b * dl / avgdl)): less than idf * (k1 + 1) whatever tf and dl are (the denominator's
second part is at least k1 * (1 - b) > 0). So a row holding only terms of a set S scores
less than the sum of their bounds. Sort the terms rarest first (highest idf, highest
bound); once the k best rows among those holding one of the first m terms are known,
with the k-th at `threshold`, a row holding none of them scores below the sum of the
other terms' bounds; if that sum is at most `threshold`, no such row can enter the top
k, and the top k of the candidates, scored over every term, is the exact top k.

The common terms (speaker names, which every imported message starts with, everyday
words) have the lowest bounds, so they are the ones left out: their rows are only
scored when they also hold a rarer term. The first cut takes the rarest terms up to
FIRST_ROWS rows (and at least k); `needed` says if more must be taken.
"""

from __future__ import annotations

from dataclasses import dataclass

# Rows the first cut scores at most (unless k needs more): the candidates of the rarest
# terms, where the top k of a question usually is.
FIRST_ROWS = 2000
# The threshold and the bounds are floats rounded from the database's numbers: a bound
# sum must clear the threshold by this factor, so rounding never prunes a row wrongly.
SLACK = 1 + 1e-9


@dataclass(frozen=True)
class Terms:
    names: list[str]  # rarest first
    rows: list[int]  # rows holding each (document frequency)
    bounds: list[float]  # the most a row can get from each

    @classmethod
    def of(cls, terms: list[tuple[str, int, float]], k1: float) -> Terms:
        """`terms` as (name, rows holding it, idf), ordered rarest first."""
        ordered = sorted(terms, key=lambda t: (-t[2], t[1], t[0]))
        return cls(
            [t[0] for t in ordered], [t[1] for t in ordered], [t[2] * (k1 + 1) for t in ordered]
        )

    def first_cut(self, k: int) -> int:
        """How many of the rarest terms to score first: up to FIRST_ROWS rows, at least
        one term, and enough rows for `k` if the terms have them."""
        take, rows = 0, 0
        while take < len(self.names) and (
            take == 0 or rows < k or rows + self.rows[take] <= FIRST_ROWS
        ):
            rows += self.rows[take]
            take += 1
        return take

    def needed(self, threshold: float | None) -> int:
        """How many of the rarest terms a row must hold one of to possibly score at
        least `threshold`, the k-th best score so far (None: fewer than k rows: all)."""
        if threshold is None:
            return len(self.names)
        m, rest = len(self.names), 0.0
        while m > 0 and (rest + self.bounds[m - 1]) * SLACK < threshold:
            rest += self.bounds[m - 1]
            m -= 1
        return m
