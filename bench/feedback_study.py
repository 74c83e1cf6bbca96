"""Would pseudo-relevance feedback (RM3-style query expansion) lift lexical and hybrid
recall? A study on LoCoMo dev, not the product: the lexical ranking is a numpy replica of
the product's BM25 (k1 1.2, b 0.75, FTS5 porter terms, the previous message as a field at
weight 0.5, statistics per conversation), fused with all-MiniLM-L6-v2 cosines by the
product's `memory.search.fusion.fuse`. The vectors come from bench/hybrid_cache.py.

Feedback: the first pass's `fb` best turns give their words, each weighed by its share of
its turn times log(N / df) in the conversation; the `terms` best words not in the query
are searched again at weight `alpha`, added to the first pass's scores (BM25 is a sum
over terms, so this is one query with the new terms weighed `alpha`). Feedback from the
fused list (words and meaning) is measured too. Selecting the words by their share alone,
without df, is measured as well. FTS5's porter index holds stop words, so the replica's
feedback words may be stop words ("we", "my"); PostgreSQL's english tsvector drops them,
so the product could search them on SQLite only: `words, no stop words` is what both
databases could do.

Parameters are picked by leaving one conversation out (chosen on four, scored on the
fifth), so the pooled figure is what the method gives on conversations it was not tuned
on.

    python -m bench.feedback_study
"""

from __future__ import annotations

import argparse
import math
import sqlite3
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import numpy as np

from bench import hybrid_cache
from bench.fusion_study import Signals, fused
from bench.recall import Conversation, default_data, load_locomo, recall_at
from memory.search.lexical import CONTEXT_WEIGHT, K1, B
from memory.search.stopwords import STOP_WORDS
from memory.search.text import query_terms, ranked_terms

CONTEXT_CHARS = 2000  # as core revision 0004 indexes the previous message
GRID = [(3, 10, 0.4), (3, 20, 0.3), (3, 15, 0.3), (5, 20, 0.3)]  # (fb, terms, alpha)
WEIGHTS = (0.3, 0.4)  # meaning weight of the fusion


class Porter:
    """FTS5's own porter tokenizer, read back through fts5vocab, so terms match SQLite's."""

    def __init__(self) -> None:
        self.db = sqlite3.connect(":memory:")
        self.db.execute("CREATE VIRTUAL TABLE t USING fts5(x, tokenize='porter unicode61')")
        self.db.execute("CREATE VIRTUAL TABLE v USING fts5vocab(t, instance)")

    def __call__(self, text: str) -> list[str]:
        self.db.execute("DELETE FROM t")
        self.db.execute("INSERT INTO t(rowid, x) VALUES (1, ?)", (text,))
        return [r[0] for r in self.db.execute("SELECT term FROM v ORDER BY offset")]


class Index:
    """One conversation's turns as bags of terms (content and the previous turn's end)."""

    def __init__(self, conv: Conversation, tok: Porter) -> None:
        texts = [t.content for t in conv.turns]
        self.texts = texts
        self.content = [Counter(tok(x)) for x in texts]
        self.prev = [Counter()] + [Counter(tok(x[-CONTEXT_CHARS:])) for x in texts[:-1]]
        self.dl = np.array(
            [
                sum(c.values()) + sum(p.values())
                for c, p in zip(self.content, self.prev, strict=True)
            ],
            float,
        )
        self.df: Counter[str] = Counter()
        for c in self.content:
            self.df.update(c.keys())

    def bm25(self, terms: list[str]) -> np.ndarray:
        n, avg = len(self.content), self.dl.mean()
        score = np.zeros(n)
        for t in set(terms):
            tf = np.array(
                [
                    c.get(t, 0) + CONTEXT_WEIGHT * p.get(t, 0)
                    for c, p in zip(self.content, self.prev, strict=True)
                ]
            )
            df = np.count_nonzero(tf)
            if df:
                idf = math.log((n - df + 0.5) / (df + 0.5) + 1)
                score += idf * tf * (K1 + 1) / (tf + K1 * (1 - B + B * self.dl / avg))
        return score

    def expansion(
        self, feedback: list[int], query: list[str], n: int, idf: bool, skip: set[str]
    ) -> list[str]:
        weight: Counter[str] = Counter()
        for k in feedback:
            bag = self.content[k]
            total = sum(bag.values()) or 1
            for term, count in bag.items():
                rarity = math.log(len(self.content) / self.df[term]) if idf else 1.0
                weight[term] += count / total * rarity
        return [t for t, _ in weight.most_common() if t not in query and t not in skip][:n]


def ranked(score: np.ndarray, depth: int = 200) -> list[int]:
    idx = np.nonzero(score > 0)[0]
    return [int(i) for i in idx[np.argsort(-score[idx], kind="stable")][:depth]]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=None)
    args = parser.parse_args(argv)
    data = args.data or default_data()
    if data is None:
        print("feedback_study: no LoCoMo data (give --data)", file=sys.stderr)
        return 2
    convs = load_locomo(data)
    tok = Porter()
    try:
        signals = Signals(convs, "sqlite")
    finally:
        hybrid_cache.close()
    indexes = [Index(c, tok) for c in convs]
    questions = [
        (ci, q.text, [t for w in ranked_terms(q.text) for t in tok(w)], q.evidence)
        for ci, c in enumerate(convs)
        for q in c.questions
    ]

    def at10(rank: Callable[[int, Index, list[str], str], list[int]]) -> np.ndarray:
        out = []
        for i, (ci, text, terms, evidence) in enumerate(questions):
            ids = [convs[ci].turns[k].dia_id for k in rank(i, indexes[ci], terms, text)[:10]]
            out.append(recall_at(ids, evidence)[10])
        return np.array(out)

    def hybrid(i: int, score: np.ndarray, w: float) -> list[int]:
        words = [(k, float(score[k])) for k in ranked(score)]
        return fused(words, signals.alone[i], w, True)

    def expanded(i: int, ix: Index, terms: list[str], p: tuple, source: str) -> np.ndarray:
        fb, n, alpha = p
        first = ix.bm25(terms)
        top = hybrid(i, first, 0.4)[:fb] if source == "fused" else ranked(first)[:fb]
        if source == "share only":  # words of the raw text, no df
            share: Counter[str] = Counter()
            for k in top:
                words = query_terms(ix.texts[k])
                for w in words:
                    share[w] += 1 / len(words)
            extra = [t for w, _ in share.most_common() for t in tok(w) if t not in terms][:n]
        else:
            skip = stop_stems if source == "words, no stop words" else set()
            extra = ix.expansion(top, terms, n, idf=True, skip=skip)
        return first + alpha * ix.bm25(extra) if extra else first

    conv = np.array([ci for ci, *_ in questions])
    rows: list[tuple[str, float, str]] = []
    base_words = at10(lambda i, ix, t, q: ranked(ix.bm25(t)))
    rows.append(("words, replica (no feedback)", base_words.mean(), ""))
    for w in WEIGHTS:
        r = at10(lambda i, ix, t, q, w=w: hybrid(i, ix.bm25(t), w))
        rows.append((f"hybrid, meaning {w:g} (no feedback)", r.mean(), ""))
    stop_stems = {t for w in STOP_WORDS for t in tok(w)}
    for source in ("words", "words, no stop words", "fused", "share only"):
        lexical = {
            p: at10(lambda i, ix, t, q, p=p, s=source: ranked(expanded(i, ix, t, p, s)))
            for p in GRID
        }
        fusion = {
            (p, w): at10(
                lambda i, ix, t, q, p=p, w=w, s=source: hybrid(i, expanded(i, ix, t, p, s), w)
            )
            for p in GRID
            for w in WEIGHTS
        }
        for name, table in (
            (f"words, feedback from {source}", lexical),
            (f"hybrid, feedback from {source}", fusion),
        ):
            best = max(table, key=lambda k: table[k].mean())
            pooled, picks = np.zeros(len(conv)), []
            for held in range(len(convs)):
                train = conv != held
                pick = max(table, key=lambda k: table[k][train].mean())
                picks.append(pick)
                pooled[~train] = table[pick][~train]
            rows.append(
                (
                    name,
                    pooled.mean(),
                    f"best on all {table[best].mean():.3f} at {best}; picks {picks}",
                )
            )
    print("| variant | R@10, leave one conversation out | note |")
    print("|---|---:|---|")
    for name, value, note in rows:
        print(f"| {name} | {value:.3f} | {note} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
