"""Every search constant chosen by leaving one LoCoMo dev conversation out (issue #34).

The constants: `memory.search.lexical.CONTEXT_WEIGHT` (how much a word of the previous
message counts), `memory.search.fusion.SEMANTIC_WEIGHT` (meaning's share of a hybrid
score), `memory.search.recall.HYBRID_POOL` (how many of each list are fused) and the
similarity floor (`embeddings.min_similarity`, an item found by meaning alone below it is
not listed). For each of the 5 dev conversations in turn, the values best on the other
four (mean recall@10 over their questions, SQLite and PostgreSQL together) are scored on
it; the held-out scores together are what choosing this way gives on conversations
nobody tuned on. All are chosen at once, on `full_text` plus `hybrid` recall (CONTEXT_WEIGHT
ranks both modes). The product's values are then the ones best on all five (reported with
the folds' picks).

Inputs are the product's own (bench/hybrid_cache.py): lcm's `full_text` lists on each
database, rebuilt at each CONTEXT_WEIGHT, and all-MiniLM-L6-v2 cosines; the hybrid
ranking is recall.py's (the pool of each list fused, meaning-only items under the floor
dropped but kept in the scale, then the word hits past the pool). Scored like
bench/recall.py (turn-level recall@10, the data README's rules).

    python -m bench.constants_study [--context 0,0.25,0.5,0.75,1]
        [--weights 0.2,0.3,0.4,0.5,0.6] [--pools 20,30,50,100] [--floors=-1,0.1,0.2,0.3]
        [--vectors DIR] [--margin 0.005]
"""

from __future__ import annotations

import argparse
import itertools
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from bench import hybrid_cache
from bench.recall import Conversation, default_data, load_locomo, recall_at
from memory.search import lexical
from memory.search.fusion import SEMANTIC_WEIGHT, fuse
from memory.search.recall import HYBRID_POOL
from memory.search.semantic.defaults import DEFAULT_MIN_SIMILARITY

DATABASES = ("sqlite", "postgres")
DEPTH = 200  # word hits per question (the largest pool, and the hits past it)
AT = 10

Hybrid = tuple[float, int, float]  # (semantic weight, pool, floor)


def hybrid_ranking(
    words: list[tuple[int, float]], sims: np.ndarray, weight: float, pool: int, floor: float
) -> list[int]:
    """recall.py's hybrid ranking of one question (keys: turn positions)."""
    head = words[:pool]
    in_words = {k for k, _ in head}
    top = np.argsort(-sims, kind="stable")[:pool]
    near = [(int(k), float(sims[k])) for k in top]
    far = {k: s for k, s in near if s < floor and k not in in_words}
    meaning = [(k, s) for k, s in near if k not in far]
    nearest = {k for k, _ in near}
    similarity = {k: float(sims[k]) for k in in_words if k not in nearest} | far
    out = [f.key for f in fuse(head, meaning, weight, similarity)]
    seen = set(out)
    return out + [k for k, _ in words[pool:] if k not in seen]


class Data:
    """Per database and CONTEXT_WEIGHT, each question's word list; each question's
    cosines; the questions' evidence and conversation."""

    def __init__(self, convs: list[Conversation], vectors: Path | None = None) -> None:
        self.convs = convs
        self.turn_ids = [[t.dia_id for t in c.turns] for c in convs]
        self.conv_of = np.array([ci for ci, c in enumerate(convs) for _ in c.questions])
        self.evidence = [q.evidence for c in convs for q in c.questions]
        self.sims: list[np.ndarray] = []
        for i, c in enumerate(convs):
            if vectors is None:
                turns = hybrid_cache.vectors([t.content for t in c.turns])
                questions = hybrid_cache.vectors([q.text for q in c.questions])
            else:  # another model's, computed elsewhere: t{i}.npy, q{i}.npy
                turns, questions = np.load(vectors / f"t{i}.npy"), np.load(vectors / f"q{i}.npy")
            self.sims += list(questions @ turns.T)
        self._words: dict[tuple[str, float], list[list[tuple[int, float]]]] = {}

    def words(self, db: str, context: float) -> list[list[tuple[int, float]]]:
        if (db, context) not in self._words:
            pos = [{d: i for i, d in enumerate(ids)} for ids in self.turn_ids]
            lists = hybrid_cache.word_lists(self.convs, DEPTH, db=db, context_weight=context)
            self._words[(db, context)] = [
                [(pos[ci][d], s) for d, s in ranked]
                for ci, ranked in zip(self.conv_of, lists, strict=True)
            ]
        return self._words[(db, context)]

    def at10(self, rankings: Sequence[list[int]]) -> np.ndarray:
        return np.array(
            [
                recall_at([self.turn_ids[ci][k] for k in r[:AT]], e)[AT]
                for r, ci, e in zip(rankings, self.conv_of, self.evidence, strict=True)
            ]
        )


class Study:
    def __init__(
        self, data: Data, contexts: list[float], hybrids: list[Hybrid], margin: float = 0.0
    ) -> None:
        product = (SEMANTIC_WEIGHT, HYBRID_POOL, DEFAULT_MIN_SIMILARITY)
        self.d, self.margin = data, margin
        self.contexts = sorted({*contexts, lexical.CONTEXT_WEIGHT})
        self.hybrids = [*hybrids, *([product] if product not in hybrids else [])]
        self._full: dict[tuple[str, float], np.ndarray] = {}
        self._hybrid: dict[tuple[str, float, Hybrid], np.ndarray] = {}

    def full_text(self, db: str, context: float) -> np.ndarray:
        if (db, context) not in self._full:
            self._full[(db, context)] = self.d.at10(
                [[k for k, _ in w] for w in self.d.words(db, context)]
            )
        return self._full[(db, context)]

    def hybrid(self, db: str, context: float, h: Hybrid) -> np.ndarray:
        if (db, context, h) not in self._hybrid:
            words = self.d.words(db, context)
            self._hybrid[(db, context, h)] = self.d.at10(
                [hybrid_ranking(w, s, *h) for w, s in zip(words, self.d.sims, strict=True)]
            )
        return self._hybrid[(db, context, h)]

    def score(self, train: np.ndarray, c: float, h: Hybrid) -> float:
        """Mean R@10 on `train`'s questions of full_text and hybrid on both databases:
        CONTEXT_WEIGHT ranks both modes."""
        return float(
            np.mean(
                [self.full_text(db, c)[train].mean() for db in DATABASES]
                + [self.hybrid(db, c, h)[train].mean() for db in DATABASES]
            )
        )

    def pick(self, train: np.ndarray) -> tuple[float, Hybrid]:
        """The best values on `train`, if they beat the product's by `margin`; else the
        product's (a gain smaller than that is noise: see the module docstring)."""
        product = (lexical.CONTEXT_WEIGHT, (SEMANTIC_WEIGHT, HYBRID_POOL, DEFAULT_MIN_SIMILARITY))
        best = max(
            itertools.product(self.contexts, self.hybrids),
            key=lambda ch: (round(self.score(train, *ch), 9), ch == product),
        )
        if self.score(train, *best) - self.score(train, *product) < self.margin:
            return product
        return best


def report(study: Study) -> str:
    d = study.d
    everything = np.ones(len(d.conv_of), dtype=bool)
    product_c = lexical.CONTEXT_WEIGHT
    product_h = (SEMANTIC_WEIGHT, HYBRID_POOL, DEFAULT_MIN_SIMILARITY)
    held = {m: {db: np.zeros(len(d.conv_of)) for db in DATABASES} for m in ("full", "hybrid")}
    lines = [
        "| held out | questions | CONTEXT_WEIGHT picked | full_text R@10 SQLite / PG "
        "| (today's) | SEMANTIC_WEIGHT, HYBRID_POOL, floor picked | hybrid R@10 SQLite / PG "
        "| (today's) |",
        "|---|---:|---:|---|---|---|---|---|",
    ]
    for ci, conv in enumerate(d.convs):
        test = d.conv_of == ci
        c, h = study.pick(~test)
        for db in DATABASES:
            held["full"][db][test] = study.full_text(db, c)[test]
            held["hybrid"][db][test] = study.hybrid(db, c, h)[test]

        def pair(values: dict[str, np.ndarray], t: np.ndarray = test) -> str:
            return " / ".join(f"{values[db][t].mean():.3f}" for db in DATABASES)

        today_f = {db: study.full_text(db, product_c) for db in DATABASES}
        today_h = {db: study.hybrid(db, product_c, product_h) for db in DATABASES}
        lines.append(
            f"| {conv.sample_id} | {int(test.sum())} | {c:g} | {pair(held['full'])} "
            f"| {pair(today_f)} | {h[0]:g}, {h[1]}, {h[2]:g} | {pair(held['hybrid'])} "
            f"| {pair(today_h)} |"
        )
    c, h = study.pick(everything)

    def summary(name: str, values: dict[str, np.ndarray]) -> str:
        folds = {
            db: [values[db][d.conv_of == ci].mean() for ci in range(len(d.convs))]
            for db in DATABASES
        }
        return f"- {name}: " + "; ".join(
            f"{db} {values[db].mean():.3f} (folds {min(folds[db]):.3f}-{max(folds[db]):.3f}, "
            f"spread {max(folds[db]) - min(folds[db]):.3f}, sd {np.std(folds[db]):.3f})"
            for db in DATABASES
        )

    lines += [
        "",
        summary("leave one conversation out, full_text R@10", held["full"]),
        summary("leave one conversation out, hybrid R@10", held["hybrid"]),
        f"- picked on all five: CONTEXT_WEIGHT {c:g}; SEMANTIC_WEIGHT {h[0]:g}, "
        f"HYBRID_POOL {h[1]}, floor {h[2]:g}",
        summary(
            "dev, those values, full_text R@10", {db: study.full_text(db, c) for db in DATABASES}
        ),
        summary("dev, those values, hybrid R@10", {db: study.hybrid(db, c, h) for db in DATABASES}),
        summary(
            f"dev, today's values ({product_c:g}; {product_h[0]:g}, {product_h[1]}, "
            f"{product_h[2]:g}), full_text R@10",
            {db: study.full_text(db, product_c) for db in DATABASES},
        ),
        summary(
            "dev, today's values, hybrid R@10",
            {db: study.hybrid(db, product_c, product_h) for db in DATABASES},
        ),
    ]
    return "\n".join(lines)


def floats(text: str) -> list[float]:
    return [float(x) for x in text.split(",")]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--context", default="0,0.25,0.5,0.75,1")
    parser.add_argument("--weights", default="0.2,0.3,0.4,0.5,0.6")
    parser.add_argument("--pools", default="20,30,50,100")
    parser.add_argument("--floors", default="-1,0.1,0.2,0.3")
    parser.add_argument("--data", type=Path, default=None)
    parser.add_argument(
        "--margin",
        type=float,
        default=0.0,
        help="keep the product's values unless others beat them by this much on the four "
        "conversations (mean R@10 of the two modes on both databases)",
    )
    parser.add_argument(
        "--vectors",
        type=Path,
        default=None,
        help="another model's unit vectors, a folder of t<i>.npy (conversation i's turns) "
        "and q<i>.npy (its questions), instead of MiniLM's",
    )
    args = parser.parse_args(argv)
    data = args.data or default_data()
    if data is None:
        print("constants_study: no LoCoMo data (give --data)", file=sys.stderr)
        return 2
    hybrids = list(
        itertools.product(
            floats(args.weights), [int(p) for p in floats(args.pools)], floats(args.floors)
        )
    )
    try:
        study = Study(
            Data(load_locomo(data), args.vectors), floats(args.context), hybrids, args.margin
        )
        print(report(study))
    finally:
        hybrid_cache.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
