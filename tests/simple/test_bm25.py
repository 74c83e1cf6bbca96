"""BM25 scores against values computed by hand, and the index staying incremental."""

from __future__ import annotations

import math

import pytest

from plugins.simple.bm25 import BM25Index, tokenize

CORPUS = {
    1: "apple banana",
    2: "apple apple cherry",
    3: "banana cherry date",
}


def _index(corpus: dict[int, str]) -> BM25Index:
    index = BM25Index()
    for doc_id, text in corpus.items():
        index.add(doc_id, tokenize(text))
    return index


def test_tokenize_splits_on_punctuation_and_underscore_and_casefolds() -> None:
    assert tokenize("Shopping_List: C++ café-Straße 42!") == [
        "shopping",
        "list",
        "c",
        "café",
        "strasse",
        "42",
    ]
    assert tokenize("🙂 %_- ") == []


def test_scores_match_hand_computation() -> None:
    # N = 3, avgdl = 8/3, k1 = 1.5, b = 0.75 (Lucene idf).
    index = _index(CORPUS)
    idf_apple = math.log(1 + (3 - 2 + 0.5) / (2 + 0.5))
    d1 = idf_apple * 1 * 2.5 / (1 + 1.5 * (0.25 + 0.75 * 2 / (8 / 3)))
    d2 = idf_apple * 2 * 2.5 / (2 + 1.5 * (0.25 + 0.75 * 3 / (8 / 3)))
    scores = index.scores(tokenize("apple"))
    assert scores.keys() == {1, 2}
    assert scores[1] == pytest.approx(d1) == pytest.approx(0.5295815540797021)
    assert scores[2] == pytest.approx(d2) == pytest.approx(0.6454985466035854)
    assert index.top(["apple"], 10) == [(2, pytest.approx(d2)), (1, pytest.approx(d1))]


def test_rare_term_outweighs_common_one() -> None:
    index = _index(CORPUS)
    top = index.top(tokenize("banana date"), 10)
    assert [doc for doc, _ in top] == [3, 1]
    assert top[0][1] == pytest.approx(1.3735695926697864)
    # A repeated query term counts once.
    assert index.top(tokenize("banana banana date"), 10) == top


def test_incremental_updates_equal_a_rebuild() -> None:
    index = _index(CORPUS)
    index.add(2, tokenize("cherry pie"))  # replace
    index.remove(1)
    index.remove(99)  # unknown: ignored
    index.add(4, tokenize("apple pie with cherry"))
    rebuilt = _index({2: "cherry pie", 3: "banana cherry date", 4: "apple pie with cherry"})
    for query in ("apple", "cherry pie", "banana", "date apple"):
        assert index.scores(tokenize(query)) == pytest.approx(rebuilt.scores(tokenize(query)))
    assert len(index) == 3 and 1 not in index


def test_no_match_and_empty_index() -> None:
    assert BM25Index().top(["x"], 5) == []
    index = _index(CORPUS)
    assert index.top(tokenize("zebra"), 5) == []
    assert index.top(tokenize("apple"), 0) == []


def test_ties_break_by_lower_id() -> None:
    index = _index({5: "same words", 2: "same words", 9: "same words"})
    assert [doc for doc, _ in index.top(["same"], 2)] == [2, 5]
