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

What each message's vector is made of is chosen the same way (`--documents`): the message
alone, with the message before it, with the one after, with both, or two vectors a
message (alone and with a neighbour, their cosines averaged: `alone+next` is the
product's, `embeddings.with_next`, at SEMANTIC_WEIGHT_WITH_NEXT); a variant must beat
the first listed by the margin on the four conversations to be picked.

Inputs are the product's own (bench/hybrid_cache.py): lcm's `full_text` lists on each
database, rebuilt at each CONTEXT_WEIGHT, and all-MiniLM-L6-v2 cosines; the hybrid
ranking is recall.py's (the pool of each list fused, meaning-only items under the floor
dropped but kept in the scale, then the word hits past the pool). Scored like
bench/recall.py (turn-level recall@10, the data README's rules).

    python -m bench.constants_study [--context 0,0.25,0.5,0.75,1]
        [--weights 0.2,0.3,0.4,0.5,0.6] [--pools 20,30,50,100] [--floors=-1,0.1,0.2,0.3]
        [--documents alone,previous,next,both,...] [--vectors DIR] [--margin 0.005]
        [--score all|hybrid]
"""

from __future__ import annotations

import argparse
import itertools
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from bench import hybrid_cache
from bench.recall import Conversation, default_data, load_locomo, recall_at
from memory.search import lexical
from memory.search.fusion import SEMANTIC_WEIGHT, SEMANTIC_WEIGHT_WITH_NEXT, fuse
from memory.search.recall import HYBRID_POOL
from memory.search.semantic.defaults import DEFAULT_MIN_SIMILARITY

DATABASES = ("sqlite", "postgres")
DEPTH = 200  # word hits per question (the largest pool, and the hits past it)
AT = 10

Hybrid = tuple[float, int, float]  # (semantic weight, pool, floor)
Lexical = tuple[float, float, float]  # (CONTEXT_WEIGHT, K1, B)
Choice = tuple[Lexical, Hybrid, str]  # (word constants, hybrid constants, document text)
ALONE = "alone"  # the message alone
# The product's: the message alone and with the next one, cosines averaged
# (memory/search/pairs.py); the message alone when `--vectors` gives another model's.
PRODUCT = "alone+next"


def _joined(*parts: str) -> str:
    return "\n".join(p for p in parts if p)


# What is embedded for turn i of `texts` (one vector a message). The previous message
# goes first (reading order) in `previous`/`both`; `previous-last` puts it after the
# message, where a cut of a long text would take it first.
DOCUMENTS: dict[str, Callable[[list[str], int], str]] = {
    ALONE: lambda t, i: t[i],
    "previous": lambda t, i: _joined(t[i - 1] if i else "", t[i]),
    "previous-last": lambda t, i: _joined(t[i], t[i - 1] if i else ""),
    "next": lambda t, i: _joined(t[i], t[i + 1] if i + 1 < len(t) else ""),
    "both": lambda t, i: _joined(t[i - 1] if i else "", t[i], t[i + 1] if i + 1 < len(t) else ""),
}
# Two vectors a message: the message alone and with a neighbour, cosines averaged.
PAIRS = {"alone+previous": "previous", "alone+next": "next"}


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

    def __init__(
        self,
        convs: list[Conversation],
        vectors: Path | None = None,
        documents: Sequence[str] = (ALONE,),
    ) -> None:
        self.convs = convs
        self.turn_ids = [[t.dia_id for t in c.turns] for c in convs]
        self.conv_of = np.array([ci for ci, c in enumerate(convs) for _ in c.questions])
        self.evidence = [q.evidence for c in convs for q in c.questions]
        self.vectors = vectors
        self.sims: dict[str, list[np.ndarray]] = {}
        for doc in dict.fromkeys([ALONE, *([] if vectors else [PRODUCT]), *documents]):
            if doc in PAIRS:
                alone, paired = self.cosines(ALONE), self.cosines(PAIRS[doc])
                self.sims[doc] = [(a + b) / 2 for a, b in zip(alone, paired, strict=True)]
            else:
                self.cosines(doc)
        self._words: dict[tuple[str, Lexical], list[list[tuple[int, float]]]] = {}

    def cosines(self, doc: str) -> list[np.ndarray]:
        """Each question's cosine with every turn of its conversation embedded as `doc`."""
        if doc in self.sims:
            return self.sims[doc]
        if self.vectors is not None and doc != ALONE:
            raise ValueError("--vectors holds the messages alone: no other document text")
        out: list[np.ndarray] = []
        for i, c in enumerate(self.convs):
            if self.vectors is None:
                texts = [t.content for t in c.turns]
                turns = hybrid_cache.vectors([DOCUMENTS[doc](texts, j) for j in range(len(texts))])
                questions = hybrid_cache.vectors([q.text for q in c.questions])
            else:  # another model's, computed elsewhere: t{i}.npy, q{i}.npy
                turns = np.load(self.vectors / f"t{i}.npy")
                questions = np.load(self.vectors / f"q{i}.npy")
            out += list(questions @ turns.T)
        self.sims[doc] = out
        return out

    def words(self, db: str, context: Lexical) -> list[list[tuple[int, float]]]:
        if (db, context) not in self._words:
            pos = [{d: i for i, d in enumerate(ids)} for ids in self.turn_ids]
            lists = hybrid_cache.word_lists(
                self.convs, DEPTH, db=db, context_weight=context[0], bm25=context[1:]
            )
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
        self,
        data: Data,
        contexts: list[Lexical],
        hybrids: list[Hybrid],
        margin: float = 0.0,
        score_on: str = "all",
    ) -> None:
        self.d, self.margin, self.score_on = data, margin, score_on
        paired = PRODUCT in data.sims
        self.product: Choice = (
            (lexical.CONTEXT_WEIGHT, lexical.K1, lexical.B),
            (
                SEMANTIC_WEIGHT_WITH_NEXT if paired else SEMANTIC_WEIGHT,
                HYBRID_POOL,
                DEFAULT_MIN_SIMILARITY,
            ),
            PRODUCT if paired else ALONE,
        )
        self.contexts = sorted({*contexts, self.product[0]})
        self.hybrids = [*hybrids, *([self.product[1]] if self.product[1] not in hybrids else [])]
        self.documents = list(data.sims)
        self._full: dict[tuple[str, Lexical], np.ndarray] = {}
        self._hybrid: dict[tuple[str, Choice], np.ndarray] = {}

    def choices(self, documents: Sequence[str] | None = None) -> list[Choice]:
        return list(itertools.product(self.contexts, self.hybrids, documents or self.documents))

    def full_text(self, db: str, context: Lexical) -> np.ndarray:
        if (db, context) not in self._full:
            self._full[(db, context)] = self.d.at10(
                [[k for k, _ in w] for w in self.d.words(db, context)]
            )
        return self._full[(db, context)]

    def hybrid(self, db: str, choice: Choice) -> np.ndarray:
        if (db, choice) not in self._hybrid:
            context, h, doc = choice
            words = self.d.words(db, context)
            self._hybrid[(db, choice)] = self.d.at10(
                [hybrid_ranking(w, s, *h) for w, s in zip(words, self.d.sims[doc], strict=True)]
            )
        return self._hybrid[(db, choice)]

    def score(self, train: np.ndarray, choice: Choice) -> float:
        """Mean R@10 on `train`'s questions of full_text and hybrid on both databases
        (CONTEXT_WEIGHT ranks both modes), or of hybrid alone (`score_on` "hybrid": the
        document text changes only hybrid, and full_text would halve its gains)."""
        full = [] if self.score_on == "hybrid" else DATABASES
        return float(
            np.mean(
                [self.full_text(db, choice[0])[train].mean() for db in full]
                + [self.hybrid(db, choice)[train].mean() for db in DATABASES]
            )
        )

    def pick(
        self,
        train: np.ndarray,
        documents: Sequence[str] | None = None,
        margin: float | None = None,
    ) -> Choice:
        """The best values on `train`, if they beat the product's by `margin`; else the
        product's (a gain smaller than that is noise: see the module docstring).
        `documents`: only these document texts (the product's compared is then the
        first's, at today's constants)."""
        product = self.product
        if documents:
            product = (*product[:2], documents[0])
        best = max(
            self.choices(documents),
            key=lambda ch: (round(self.score(train, ch), 9), ch == product),
        )
        needed = self.margin if margin is None else margin
        if self.score(train, best) - self.score(train, product) < needed:
            return product
        return best


def described(choice: Choice) -> str:
    (c, k1, b), h, doc = choice
    return f"{c:g}, {k1:g}, {b:g}; {h[0]:g}, {h[1]}, {h[2]:g}; {doc}"


def report(study: Study) -> str:
    d = study.d
    everything = np.ones(len(d.conv_of), dtype=bool)
    product = study.product
    held = {m: {db: np.zeros(len(d.conv_of)) for db in DATABASES} for m in ("full", "hybrid")}
    lines = [
        "| held out | questions | picked: CONTEXT_WEIGHT, K1, B; SEMANTIC_WEIGHT, HYBRID_POOL, "
        "floor; document | full_text R@10 SQLite / PG | (today's) | hybrid R@10 SQLite / PG "
        "| (today's) |",
        "|---|---:|---|---|---|---|---|",
    ]
    for ci, conv in enumerate(d.convs):
        test = d.conv_of == ci
        choice = study.pick(~test)
        for db in DATABASES:
            held["full"][db][test] = study.full_text(db, choice[0])[test]
            held["hybrid"][db][test] = study.hybrid(db, choice)[test]

        def pair(values: dict[str, np.ndarray], t: np.ndarray = test) -> str:
            return " / ".join(f"{values[db][t].mean():.3f}" for db in DATABASES)

        today_f = {db: study.full_text(db, product[0]) for db in DATABASES}
        today_h = {db: study.hybrid(db, product) for db in DATABASES}
        lines.append(
            f"| {conv.sample_id} | {int(test.sum())} | {described(choice)} "
            f"| {pair(held['full'])} | {pair(today_f)} | {pair(held['hybrid'])} "
            f"| {pair(today_h)} |"
        )
    choice = study.pick(everything)

    def folds(values: np.ndarray) -> list[float]:
        return [float(values[d.conv_of == ci].mean()) for ci in range(len(d.convs))]

    def summary(name: str, values: dict[str, np.ndarray]) -> str:
        return f"- {name}: " + "; ".join(
            f"{db} {values[db].mean():.3f} (folds {min(folds(values[db])):.3f}-"
            f"{max(folds(values[db])):.3f}, spread "
            f"{max(folds(values[db])) - min(folds(values[db])):.3f}, "
            f"sd {np.std(folds(values[db])):.3f})"
            for db in DATABASES
        )

    lines += [
        "",
        summary("leave one conversation out, full_text R@10", held["full"]),
        summary("leave one conversation out, hybrid R@10", held["hybrid"]),
        f"- picked on all five: {described(choice)}",
        summary(
            "dev, those values, full_text R@10",
            {db: study.full_text(db, choice[0]) for db in DATABASES},
        ),
        summary(
            "dev, those values, hybrid R@10", {db: study.hybrid(db, choice) for db in DATABASES}
        ),
        summary(
            f"dev, today's values ({described(product)}), full_text R@10",
            {db: study.full_text(db, product[0]) for db in DATABASES},
        ),
        summary(
            "dev, today's values, hybrid R@10",
            {db: study.hybrid(db, product) for db in DATABASES},
        ),
    ]
    if len(study.documents) > 1:
        lines += ["", *documents_table(study)]
    return "\n".join(lines)


def documents_table(study: Study) -> list[str]:
    """Each document text on its own: hybrid R@10 on dev at today's constants, and by
    leaving one conversation out with the other constants picked (no margin) among the
    values given, per fold and pooled; its difference per fold from today's (the
    product's text and constants)."""
    d = study.d
    today = {db: study.hybrid(db, study.product) for db in DATABASES}
    lines = [
        "| document text | dev, today's constants, SQLite / PG | leave one out, constants "
        "picked, SQLite / PG | per fold against today's (SQLite, PG mean) | "
        "folds better |",
        "|---|---|---|---|---:|",
    ]
    for doc in study.documents:
        dev = {db: study.hybrid(db, (*study.product[:2], doc)) for db in DATABASES}
        held = {db: np.zeros(len(d.conv_of)) for db in DATABASES}
        for ci in range(len(d.convs)):
            test = d.conv_of == ci
            choice = study.pick(~test, [doc], margin=0.0)
            for db in DATABASES:
                held[db][test] = study.hybrid(db, choice)[test]
        gains = [
            float(
                np.mean(
                    [
                        held[db][d.conv_of == ci].mean() - today[db][d.conv_of == ci].mean()
                        for db in DATABASES
                    ]
                )
            )
            for ci in range(len(d.convs))
        ]
        lines.append(
            f"| {doc} | {' / '.join(f'{dev[db].mean():.3f}' for db in DATABASES)} "
            f"| {' / '.join(f'{held[db].mean():.3f}' for db in DATABASES)} "
            f"| {', '.join(f'{g:+.3f}' for g in gains)} | {sum(g > 0 for g in gains)} of "
            f"{len(gains)} |"
        )
    return lines


def floats(text: str) -> list[float]:
    return [float(x) for x in text.split(",")]


def lexicals(contexts: list[float], bm25: str) -> list[Lexical]:
    """Every CONTEXT_WEIGHT with every "K1:B" pair of `bm25`."""
    pairs = [tuple(float(x) for x in pair.split(":")) for pair in bm25.split(",")]
    if any(len(p) != 2 for p in pairs):
        raise ValueError(f"--bm25 takes K1:B pairs, not {bm25!r}")
    return [(c, p[0], p[1]) for c in contexts for p in pairs]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--context", default="0,0.25,0.5,0.75,1")
    parser.add_argument("--weights", default="0.2,0.3,0.4,0.5,0.6")
    parser.add_argument("--pools", default="20,30,50,100")
    parser.add_argument("--floors", default="-1,0.1,0.2,0.3")
    parser.add_argument(
        "--bm25",
        default=f"{lexical.K1:g}:{lexical.B:g}",
        help="BM25's K1:B pairs, comma-separated (the product's are always among them)",
    )
    parser.add_argument("--data", type=Path, default=None)
    parser.add_argument(
        "--margin",
        type=float,
        default=0.0,
        help="keep the product's values unless others beat them by this much on the four "
        "conversations (mean R@10 of the two modes on both databases)",
    )
    parser.add_argument(
        "--documents",
        default=PRODUCT,
        help="what each message's vector is made of, picked like the constants: "
        + ", ".join([*DOCUMENTS, *PAIRS])
        + f" (alone and {PRODUCT}, the product's, are always among them)",
    )
    parser.add_argument(
        "--score",
        choices=("all", "hybrid"),
        default="all",
        help="what the picks maximise: mean R@10 of full_text and hybrid on both databases "
        "(all), or hybrid's alone",
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
        documents = args.documents.split(",")
        unknown = set(documents) - {*DOCUMENTS, *PAIRS}
        if unknown:
            parser.error(f"unknown document text(s): {', '.join(sorted(unknown))}")
        study = Study(
            Data(load_locomo(data), args.vectors, documents),
            lexicals(floats(args.context), args.bm25),
            hybrids,
            args.margin,
            args.score,
        )
        print(report(study))
    finally:
        hybrid_cache.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
