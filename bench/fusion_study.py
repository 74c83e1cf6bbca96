"""Which fusion for hybrid search (memory/search/fusion.py)? Variants scored on LoCoMo dev from the
same two signals, so only the fusion (or what is embedded) differs.

The signals are the product's: lcm on SQLite answers each question with `full_text` (its
50 best, BM25 scores), and the bench's all-MiniLM-L6-v2 server (bench/embedding_server.py)
gives each turn's and question's vector; cosine over every turn of the conversation, as
the vector index computes it. Both are cached on disk (bench/hybrid_cache.py), so a re-run
takes seconds. Scored like bench/recall.py (turn-level recall@k, the data README's rules):

- words alone, meaning alone, reciprocal rank fusion (k=60);
- `memory.search.fusion.fuse` (min-max normalised weighted scores) at several weights of
  meaning: with meaning scored for the 50 nearest only ("nearest only", the product's
  fusion until 83067aa), and with every word hit weighed by its meaning too (the product);
- variants measured and not taken (at the product's weight): z-scores instead of min-max,
  similarity anchored at the scope's mean, larger pools, each turn's meaning averaged
  with that of the pair it forms with the next turn (two vectors per message), and the
  question's stop words dropped before embedding it.

A weight chosen on these questions could fit them: `loo` picks the weight on four
conversations and scores the fifth, for each conversation in turn (leave one
conversation out); its recall@10 is what a weight chosen this way gives on unseen chats.

    python -m bench.fusion_study [--weights 0.2,0.3,0.4,0.5] [--db sqlite|postgres|all]
        [--conversations N]
"""

from __future__ import annotations

import argparse
import itertools
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from bench import hybrid_cache
from bench.recall import (
    KS,
    RRF_K,
    Conversation,
    Outcome,
    Rankings,
    default_data,
    load_locomo,
    recall_at,
    scored,
    table,
)
from memory.search.fusion import fuse
from memory.search.stopwords import STOP_WORDS

POOL = 50
DEPTH = 200  # word hits cached per question (the pool-100 variant reads past POOL)
PRODUCT_WEIGHT = 0.4  # memory.search.fusion.SEMANTIC_WEIGHT; the 'not taken' rows use it


class Signals:
    """Per question (conversation, then question order): the word list [(turn, BM25)]
    and the cosine of every turn of its conversation."""

    def __init__(self, convs: list[Conversation], db: str = "sqlite") -> None:
        self.convs, self.db = convs, db
        self.turn_ids = [[t.dia_id for t in c.turns] for c in convs]
        self.conv_of = [ci for ci, c in enumerate(convs) for _ in c.questions]
        self.evidence = [q.evidence for c in convs for q in c.questions]
        pos = [{d: i for i, d in enumerate(ids)} for ids in self.turn_ids]
        self.words = [
            [(pos[ci][d], s) for d, s in ranked]
            for ci, ranked in zip(
                self.conv_of, hybrid_cache.word_lists(convs, DEPTH, db=db), strict=True
            )
        ]
        self.alone = self.cosines(lambda c: [t.content for t in c.turns], lambda q: q)

    def cosines(
        self, turn_text: Callable[[Conversation], list[str]], query: Callable[[str], str]
    ) -> list[np.ndarray]:
        out = []
        for c in self.convs:
            turns = hybrid_cache.vectors(turn_text(c))
            questions = hybrid_cache.vectors([query(q.text) for q in c.questions])
            out += list(questions @ turns.T)
        return out

    def ids(self, i: int, keys: Sequence[int]) -> list[str]:
        return [self.turn_ids[self.conv_of[i]][k] for k in keys]


def nearest(sims: np.ndarray, pool: int = POOL) -> list[tuple[int, float]]:
    top = np.argsort(-sims, kind="stable")[:pool]
    return [(int(k), float(sims[k])) for k in top]


def fused(
    words: list[tuple[int, float]], sims: np.ndarray, weight: float, every: bool, pool: int = POOL
) -> list[int]:
    """The product's fusion; `every`: word hits outside the nearest weighed by meaning."""
    similarity = {k: float(sims[k]) for k, _ in words[:pool]} if every else None
    return [f.key for f in fuse(words[:pool], nearest(sims, pool), weight, similarity)]


def normalised_fusion(
    words: list[tuple[int, float]], sims: np.ndarray, weight: float, how: str
) -> list[int]:
    """Every word hit weighed by meaning, with another normalisation than min-max."""
    lex = dict(words[:POOL])
    keys = list(dict.fromkeys([*lex, *(k for k, _ in nearest(sims))]))
    w = np.array([lex.get(k, 0.0) for k in keys])
    m = np.array([sims[k] for k in keys])
    if how == "z":  # z-scores over the candidates
        w_n, m_n = (w - w.mean()) / (w.std() or 1.0), (m - m.mean()) / (m.std() or 1.0)
    else:  # "anchored": words / best; meaning 0 at the scope's mean similarity, 1 at best
        w_n = w / (w.max() or 1.0)
        m_n = np.maximum(0.0, (m - sims.mean()) / ((m.max() - sims.mean()) or 1.0))
    score = (1 - weight) * w_n + weight * m_n
    return [keys[j] for j in np.argsort(-score, kind="stable")]


def rrf(words: list[tuple[int, float]], sims: np.ndarray) -> list[int]:
    scores: dict[int, float] = {}
    for ranked in (words[:POOL], nearest(sims)):
        for rank, (key, _) in enumerate(ranked):
            scores[key] = scores.get(key, 0.0) + 1 / (RRF_K + rank + 1)
    return sorted(scores, key=scores.__getitem__, reverse=True)


class Study:
    def __init__(self, signals: Signals) -> None:
        self.s = signals
        self.rows: list[Outcome] = []
        self.loo_lines: list[str] = []

    def per_question(self, rank: Callable[[int], list[int]]) -> list[list[str]]:
        return [self.s.ids(i, rank(i))[: max(KS)] for i in range(len(self.s.evidence))]

    def row(self, name: str, rank: Callable[[int], list[int]]) -> list[list[str]]:
        ranked = self.per_question(rank)
        out = Rankings(ranked=ranked, seconds=[0.0] * len(ranked))
        self.rows.append(scored(Outcome(name, self.s.db, "hybrid"), self.s.convs, out))
        return ranked

    def loo(self, name: str, by_weight: dict[float, list[list[str]]]) -> None:
        """Leave one conversation out: the weight best on the other four, scored on it."""
        at10 = {
            w: np.array([recall_at(r, e)[10] for r, e in zip(rs, self.s.evidence, strict=True)])
            for w, rs in by_weight.items()
        }
        conv = np.array(self.s.conv_of)
        total, picks = np.zeros(len(conv)), []
        for held in range(len(self.s.convs)):
            train = conv != held
            best = max(at10, key=lambda w: (at10[w][train].mean(), -abs(w - PRODUCT_WEIGHT)))
            picks.append(best)
            total[~train] = at10[best][~train]
        self.loo_lines.append(
            f"- leave one conversation out, {name}: R@10 {total.mean():.3f} "
            f"(weights picked: {', '.join(f'{w:g}' for w in picks)})"
        )


def study(
    convs: list[Conversation], weights: Sequence[float], db: str = "sqlite"
) -> tuple[list[Outcome], list[str]]:
    s = Signals(convs, db)
    st = Study(s)
    words, alone = s.words, s.alone
    st.row("words (lcm full_text)", lambda i: [k for k, _ in words[i]])
    st.row("meaning (MiniLM)", lambda i: [k for k, _ in nearest(alone[i])])
    st.row(f"RRF k={RRF_K}", lambda i: rrf(words[i], alone[i]))
    for every, label in ((False, "nearest only"), (True, "every word hit")):
        by_weight = {
            w: st.row(
                f"fuse {label}, meaning weight {w:g}",
                lambda i, w=w, e=every: fused(words[i], alone[i], w, e),
            )
            for w in weights
        }
        st.loo(f"fuse {label}", by_weight)
    w = PRODUCT_WEIGHT
    for how in ("z", "anchored"):
        st.row(
            f"not taken: {how} normalisation",
            lambda i, h=how: normalised_fusion(words[i], alone[i], w, h),
        )
    st.row("not taken: pool 100", lambda i: fused(words[i], alone[i], w, True, pool=100))

    def with_next(c: Conversation) -> list[str]:
        texts = [t.content for t in c.turns]
        return [
            f"{a}\n{b}" if b else a
            for a, b in itertools.zip_longest(texts, texts[1:], fillvalue="")
        ]

    pair = s.cosines(with_next, lambda q: q)
    averaged = [(a + p) / 2 for a, p in zip(alone, pair, strict=True)]
    st.row(
        "not taken: meaning alone, turn+next pair", lambda i: [k for k, _ in nearest(averaged[i])]
    )
    by_weight = {
        x: st.row(
            f"not taken: turn+next pair, weight {x:g}",
            lambda i, x=x: fused(words[i], averaged[i], x, True),
        )
        for x in weights
    }
    st.loo("turn and turn+next pair (two vectors a message)", by_weight)

    def no_stop_words(q: str) -> str:
        return " ".join(t for t in q.split() if t.strip("?,.!").casefold() not in STOP_WORDS)

    bare = s.cosines(lambda c: [t.content for t in c.turns], no_stop_words)
    st.row("not taken: question without stop words", lambda i: fused(words[i], bare[i], w, True))
    return st.rows, st.loo_lines


def joint_loo(convs: list[Conversation], weights: Sequence[float]) -> list[str]:
    """Leave one conversation out over both databases at once: the weight whose mean
    R@10 on the other four conversations, SQLite and PostgreSQL together, is best, scored
    on the fifth; for meaning of the nearest only and for every word hit weighed."""
    at10: dict[tuple[str, bool, float], np.ndarray] = {}
    conv = np.array([])
    for db in ("sqlite", "postgres"):
        s = Signals(convs, db)
        conv = np.array(s.conv_of)
        for every in (False, True):
            for w in weights:
                ranked = [
                    s.ids(i, fused(s.words[i], s.alone[i], w, every))[: max(KS)]
                    for i in range(len(s.evidence))
                ]
                at10[(db, every, w)] = np.array(
                    [recall_at(r, e)[10] for r, e in zip(ranked, s.evidence, strict=True)]
                )
    lines = []
    for every, label in ((False, "nearest only"), (True, "every word hit")):
        total = {db: np.zeros(len(conv)) for db in ("sqlite", "postgres")}
        picks = []
        for held in range(len(convs)):
            train = conv != held
            best = max(
                weights,
                key=lambda w, e=every, t=train: sum(at10[(db, e, w)][t].mean() for db in total),
            )
            picks.append(best)
            for db, out in total.items():
                out[~train] = at10[(db, every, best)][~train]
        lines.append(
            f"- leave one conversation out over both databases, fuse {label}: R@10 "
            + ", ".join(f"{db} {v.mean():.3f}" for db, v in total.items())
            + f" (weights picked: {', '.join(f'{w:g}' for w in picks)})"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--weights", default="0.2,0.3,0.4,0.5")
    parser.add_argument("--conversations", type=int, default=None)
    parser.add_argument("--data", type=Path, default=None)
    parser.add_argument(
        "--db",
        default="sqlite",
        help="where lcm's word lists come from: sqlite, postgres, or all (both, and the "
        "weight picked over both)",
    )
    args = parser.parse_args(argv)
    data = args.data or default_data()
    if data is None:
        print("fusion_study: no LoCoMo data (give --data)", file=sys.stderr)
        return 2
    convs = load_locomo(data, args.conversations)
    weights = [float(w) for w in args.weights.split(",")]
    rows: list[Outcome] = []
    loo: list[str] = []
    try:
        for db in ("sqlite", "postgres") if args.db == "all" else (args.db,):
            more, lines = study(convs, weights, db)
            rows, loo = rows + more, loo + [f"{line} ({db})" for line in lines]
        if args.db == "all":
            loo += joint_loo(convs, weights)
    finally:
        hybrid_cache.close()
    print(table(rows))
    print("\n".join(loo))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
