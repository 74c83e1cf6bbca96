"""Hybrid ranking: one list from the lexical (BM25) and the semantic (cosine) lists.

Weighted score fusion over min-max normalised scores: each signal's scores are mapped to
[0, 1] over its own candidates, and an item scores

    (1 - SEMANTIC_WEIGHT) * words + SEMANTIC_WEIGHT * meaning

Every word hit is weighed by its meaning too, not only the nearest few: the caller gives
the similarity of the word hits outside the nearest list (`similarity`), so hits sharing
the same words are told apart by how close they are to the question, and a word hit just
past the nearest list's cut does not count as meaning nothing. An item's words score is 0
only when the word search did not find it (no shared term, or ranked past the pool).

Measured on LoCoMo with all-MiniLM-L6-v2 (bench/fusion_study.py, bench/RESULTS.md):
reciprocal rank fusion, which ignores how far apart scores are, let the small model's
weaker ranking pull BM25's good hits down (below BM25 alone); weighing normalised scores
keeps a clear lexical winner on top and lets meaning decide among near-ties and find
what shares no word with the question. Weighing every word hit by meaning added +0.01
recall@10 (also when the weight is picked on some conversations and scored on others);
z-scores, similarity anchored at the scope's mean, or larger pools did not beat min-max.
Words weigh more because they are the stronger signal with that model. With every word
hit carrying its meaning, meaning's best weight rose from 0.3 to 0.4 on both databases;
0.3 to 0.5 measure within 0.01 of it. With a message's meaning the mean of two vectors
(alone and with the next message, memory/search/pairs.py) it rose to 0.5: a steadier
meaning score earns a larger share.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

# Chosen by leaving one conversation out (bench/constants_study.py, with CONTEXT_WEIGHT,
# HYBRID_POOL and the floor; bench/RESULTS.md): on four LoCoMo conversations, both databases,
# no other value beat 0.4 by 0.005, the noise of ~600 questions; taking the best there
# anyway lost 0.004-0.011 recall@10 on the fifth.
SEMANTIC_WEIGHT = 0.4
# The same when messages have their second vector, with the next message (`embeddings.
# with_next`, memory/search/pairs.py): picked with that text by leaving one conversation
# out (bench/HISTORY.md, "What each message's vector is made of"), 0.5 in every fold of
# every grid (weights 0.4-0.5 and 0.3-0.6): hybrid R@10 0.747 / 0.743 (SQLite /
# PostgreSQL) against 0.735 / 0.735 with the message alone at 0.4; the pairs at 0.4
# gained only +0.007 / +0.003 of that.
SEMANTIC_WEIGHT_WITH_NEXT = 0.5
WORDS, MEANING = "words", "meaning"


K = TypeVar("K", bound=Hashable)


@dataclass(frozen=True)
class Fused(Generic[K]):
    key: K
    score: float
    signals: tuple[str, ...]


def normalised(scores: Mapping[K, float]) -> dict[K, float]:
    """Scores mapped to [0, 1] by min-max over `scores`; all equal map to 1."""
    if not scores:
        return {}
    low, high = min(scores.values()), max(scores.values())
    span = high - low
    return {k: (v - low) / span if span > 0 else 1.0 for k, v in scores.items()}


def fuse(
    words: Sequence[tuple[K, float]],
    meaning: Sequence[tuple[K, float]],
    weight: float = SEMANTIC_WEIGHT,
    similarity: Mapping[K, float] | None = None,
) -> list[Fused[K]]:
    """Both lists' keys, best fused score first (ties: the lexical order, then the
    semantic one). A key repeated within a list keeps its best score. `similarity`: the
    meaning score of keys outside `meaning` (word hits); it counts in their fused score
    and in the meaning scale, but only `meaning`'s keys carry the MEANING signal."""
    lexical: dict[K, float] = {}
    for key, score in words:
        lexical[key] = max(score, lexical.get(key, score))
    semantic: dict[K, float] = {}
    for key, score in meaning:
        semantic[key] = max(score, semantic.get(key, score))
    scale = dict(semantic)
    for key, score in (similarity or {}).items():
        scale.setdefault(key, score)
    n_words, n_meaning = normalised(lexical), normalised(scale)
    order = {key: i for i, key in enumerate([*lexical, *(k for k in semantic if k not in lexical)])}
    fused = [
        Fused(
            key,
            (1 - weight) * n_words.get(key, 0.0) + weight * n_meaning.get(key, 0.0),
            tuple(s for s, found in ((WORDS, key in lexical), (MEANING, key in semantic)) if found),
        )
        for key in order
    ]
    fused.sort(key=lambda f: (-f.score, order[f.key]))
    return fused
