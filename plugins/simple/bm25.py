"""An incremental Okapi BM25 index kept in RAM.

Documents are added, replaced and removed one at a time, so a write to the notes store
costs the tokens of one entry, never a rebuild. Scores use the Lucene variant (the
default of the `bm25s` library the benchmark compares against):

    idf(t)   = ln(1 + (N - df + 0.5) / (df + 0.5))
    score(d) = sum over query terms t of
               idf(t) * tf * (k1 + 1) / (tf + k1 * (1 - b + b * |d| / avgdl))

`N`, `df` and `avgdl` are read at query time, so the scores always equal those of a
from-scratch index over the same documents (and no write has to re-weight anything).

Layout: postings are dicts (cheap single-document updates); each term's posting is also
kept as numpy arrays, built on first use after a change, so a query scores a posting of
100k documents in one vectorised expression instead of a Python loop.
"""

from __future__ import annotations

import math
import re
from collections import Counter, defaultdict
from collections.abc import Iterable

import numpy as np

# Letters and digits of any script; underscores and punctuation separate tokens, so
# `shopping_list`, `shopping-list` and `shopping list` all index as two words.
_TOKEN = re.compile(r"[^\W_]+")


def tokenize(text: str) -> list[str]:
    """Lower-cased (casefolded) word tokens of `text`, in order, repeats kept."""
    return _TOKEN.findall(text.casefold())


class BM25Index:
    """Maps integer document ids to BM25 scores for a query."""

    def __init__(self, k1: float = 1.5, b: float = 0.75) -> None:
        self.k1 = k1
        self.b = b
        # Documents live in dense slots (reused after removal) so scores fit an array.
        self._slot_of: dict[int, int] = {}
        self._doc_of: list[int] = []  # slot -> doc id (-1 = free)
        self._free: list[int] = []
        self._lengths = np.zeros(64, dtype=np.float64)  # slot -> length in tokens
        self._terms: dict[int, tuple[str, ...]] = {}  # slot -> its distinct terms
        self._total_len = 0
        # term -> {slot: term frequency}, and its array form (dropped when it changes)
        self._postings: defaultdict[str, dict[int, int]] = defaultdict(dict)
        self._arrays: dict[str, tuple[np.ndarray, np.ndarray]] = {}

    def __len__(self) -> int:
        return len(self._slot_of)

    def __contains__(self, doc_id: int) -> bool:
        return doc_id in self._slot_of

    def add(self, doc_id: int, tokens: Iterable[str]) -> None:
        """Index `tokens` under `doc_id`, replacing what was there."""
        if doc_id in self._slot_of:
            self.remove(doc_id)
        counts = Counter(tokens)
        length = sum(counts.values())
        slot = self._take_slot(doc_id)
        postings = self._postings
        for term, tf in counts.items():
            postings[term][slot] = tf
        if self._arrays:  # empty while a file loads: skip the per-term work then
            for term in counts:
                self._arrays.pop(term, None)
        self._terms[slot] = tuple(counts)
        self._lengths[slot] = length
        self._total_len += length

    def remove(self, doc_id: int) -> None:
        """Forget `doc_id`; unknown ids are ignored."""
        slot = self._slot_of.pop(doc_id, None)
        if slot is None:
            return
        for term in self._terms.pop(slot):
            posting = self._postings[term]
            del posting[slot]
            self._arrays.pop(term, None)
            if not posting:
                del self._postings[term]
        self._total_len -= int(self._lengths[slot])
        self._lengths[slot] = 0.0
        self._doc_of[slot] = -1
        self._free.append(slot)

    def _take_slot(self, doc_id: int) -> int:
        if self._free:
            slot = self._free.pop()
            self._doc_of[slot] = doc_id
        else:
            slot = len(self._doc_of)
            self._doc_of.append(doc_id)
            if slot >= len(self._lengths):
                self._lengths = np.concatenate([self._lengths, np.zeros_like(self._lengths)])
        self._slot_of[doc_id] = slot
        return slot

    def _posting_arrays(self, term: str) -> tuple[np.ndarray, np.ndarray] | None:
        cached = self._arrays.get(term)
        if cached is None:
            posting = self._postings.get(term)
            if not posting:
                return None
            slots = np.fromiter(posting.keys(), dtype=np.int64, count=len(posting))
            tfs = np.fromiter(posting.values(), dtype=np.float64, count=len(posting))
            cached = self._arrays[term] = (slots, tfs)
        return cached

    def _accumulate(self, query_tokens: Iterable[str]) -> np.ndarray | None:
        """Scores by slot (0 = no shared term); None when nothing matches."""
        n = len(self._slot_of)
        if n == 0:
            return None
        k1, b = self.k1, self.b
        avgdl = self._total_len / n or 1.0
        acc: np.ndarray | None = None
        for term in dict.fromkeys(query_tokens):  # a repeated query term counts once
            arrays = self._posting_arrays(term)
            if arrays is None:
                continue
            slots, tfs = arrays
            df = len(slots)
            idf = math.log(1.0 + (n - df + 0.5) / (df + 0.5))
            norm = k1 * (1.0 - b + b * self._lengths[slots] / avgdl)
            if acc is None:
                acc = np.zeros(len(self._doc_of), dtype=np.float64)
            acc[slots] += idf * (k1 + 1.0) * tfs / (tfs + norm)  # slots are unique per term
        return acc

    def scores(self, query_tokens: Iterable[str]) -> dict[int, float]:
        """BM25 score of every document sharing at least one term with the query.

        A term repeated in the query counts once (the query is a set of terms).
        """
        acc = self._accumulate(query_tokens)
        if acc is None:
            return {}
        return {self._doc_of[s]: float(acc[s]) for s in np.flatnonzero(acc)}

    def top(self, query_tokens: Iterable[str], limit: int) -> list[tuple[int, float]]:
        """The `limit` best (doc id, score) pairs, best first; ties go to the lower id."""
        if limit <= 0:
            return []
        acc = self._accumulate(query_tokens)
        if acc is None:
            return []
        candidates = np.flatnonzero(acc)  # every score of a match is > 0 (idf > 0)
        if len(candidates) > limit:
            # Everything scoring at least the limit-th best score, so ties at the cut
            # are decided by id below rather than by argpartition's arbitrary order.
            kth = np.partition(acc[candidates], len(candidates) - limit)[len(candidates) - limit]
            candidates = candidates[acc[candidates] >= kth]
        ranked = sorted(
            ((self._doc_of[s], float(acc[s])) for s in candidates),
            key=lambda item: (-item[1], item[0]),
        )
        return ranked[:limit]
