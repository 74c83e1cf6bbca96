"""An incremental Okapi BM25 index kept in RAM.

Documents are added, replaced and removed one at a time, so a write to the notes store
costs the tokens of one entry, never a rebuild. Scores use the Lucene variant (the
default of the `bm25s` library the benchmark compares against):

    idf(t)   = ln(1 + (N - df + 0.5) / (df + 0.5))
    score(d) = sum over query terms t of
               idf(t) * tf * (k1 + 1) / (tf + k1 * (1 - b + b * |d| / avgdl))

`N`, `df` and `avgdl` are read at query time, so the scores always match a from-scratch
index over the same documents.
"""

from __future__ import annotations

import heapq
import math
import re
from collections import Counter
from collections.abc import Iterable

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
        # term -> {doc id: term frequency}
        self._postings: dict[str, dict[int, int]] = {}
        # doc id -> (length in tokens, its distinct terms) so removal touches only them
        self._docs: dict[int, tuple[int, tuple[str, ...]]] = {}
        self._total_len = 0

    def __len__(self) -> int:
        return len(self._docs)

    def __contains__(self, doc_id: int) -> bool:
        return doc_id in self._docs

    def add(self, doc_id: int, tokens: Iterable[str]) -> None:
        """Index `tokens` under `doc_id`, replacing what was there."""
        if doc_id in self._docs:
            self.remove(doc_id)
        counts = Counter(tokens)
        length = sum(counts.values())
        for term, tf in counts.items():
            self._postings.setdefault(term, {})[doc_id] = tf
        self._docs[doc_id] = (length, tuple(counts))
        self._total_len += length

    def remove(self, doc_id: int) -> None:
        """Forget `doc_id`; unknown ids are ignored."""
        doc = self._docs.pop(doc_id, None)
        if doc is None:
            return
        length, terms = doc
        for term in terms:
            posting = self._postings[term]
            del posting[doc_id]
            if not posting:
                del self._postings[term]
        self._total_len -= length

    def scores(self, query_tokens: Iterable[str]) -> dict[int, float]:
        """BM25 score of every document sharing at least one term with the query.

        A term repeated in the query counts once (the query is a set of terms).
        """
        n = len(self._docs)
        if n == 0:
            return {}
        k1, b = self.k1, self.b
        avgdl = self._total_len / n or 1.0
        docs = self._docs
        out: dict[int, float] = {}
        for term in dict.fromkeys(query_tokens):
            posting = self._postings.get(term)
            if not posting:
                continue
            df = len(posting)
            idf = math.log(1.0 + (n - df + 0.5) / (df + 0.5))
            idf_k1 = idf * (k1 + 1.0)
            norm_base = k1 * (1.0 - b)
            norm_len = k1 * b / avgdl
            get = out.get
            for doc_id, tf in posting.items():
                denom = tf + norm_base + norm_len * docs[doc_id][0]
                out[doc_id] = get(doc_id, 0.0) + idf_k1 * tf / denom
        return out

    def top(self, query_tokens: Iterable[str], limit: int) -> list[tuple[int, float]]:
        """The `limit` best (doc id, score) pairs, best first; ties go to the lower id."""
        if limit <= 0:
            return []
        scored = self.scores(query_tokens)
        return heapq.nsmallest(limit, scored.items(), key=lambda item: (-item[1], item[0]))
