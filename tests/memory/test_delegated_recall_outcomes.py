"""Delegated recall's outcomes besides a cited answer, each worded apart
(memory/actions/delegated_recall.py): the search slow (not the model), the model slow, the model
citing nothing it read. Through `recall` with a provider whose search is scripted; the
bot-level cases are in tests/reliability/test_delegated_recall.py."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

from memory.actions.delegated_recall import Bounds, recall
from memory.contract.types import SearchQuery, SearchResult, Session

SESSION = Session(id="default:telegram:1", agent_id="default", user_id=1, channel="telegram")
AT = datetime(2026, 3, 2, 9, 30, tzinfo=UTC)
HITS = [
    SearchResult("message", str(i), f"hit number {i} " + "word " * 20, timestamp=AT)
    for i in range(1, 6)
]


class Searcher:
    """A provider with only `search` (no reader): hits are read as the search gave them."""

    def __init__(self, slow: bool = False) -> None:
        self.slow = slow

    async def search(self, session: Session, query: SearchQuery) -> list[SearchResult]:
        if self.slow:
            await asyncio.Event().wait()
        return HITS


async def never(system: str, prompt: str) -> str:
    await asyncio.Event().wait()
    raise AssertionError("unreachable")


async def test_a_slow_search_is_named_and_nothing_is_offered() -> None:
    answer = await recall(Searcher(slow=True), SESSION, "q?", never, Bounds(timeout_s=0.2))
    assert answer.render() == "Searching my memory took longer than 0.2 s (recall.timeout_s)."


async def test_a_slow_model_is_named_and_what_was_read_is_offered() -> None:
    answer = await recall(Searcher(), SESSION, "q?", never, Bounds(timeout_s=0.2))
    lines = answer.render().splitlines()
    assert lines[0] == (
        "The recall model was too slow: no answer within 0.2 s (recall.timeout_s). "
        "The closest items I had read, unchecked:"
    )
    assert lines[1:] == [
        f"- message {i} (2026-03-02): hit number {i} " + "word " * 8 + "word…" for i in (1, 2, 3)
    ]


async def test_an_answer_citing_nothing_read_offers_the_top_hits() -> None:
    async def uncited(system: str, prompt: str) -> str:
        return "It was probably on Tuesday [999]."

    answer = await recall(Searcher(), SESSION, "q?", uncited, Bounds(max_rounds=1))
    text = answer.render()
    assert text.startswith("I read 5 item(s) of my memory about that, but the recall model")
    assert "Tuesday" not in text and "999" not in text and answer.cited == []
    assert [line.split(" (")[0] for line in text.splitlines()[1:]] == [
        "- message 1",
        "- message 2",
        "- message 3",
    ]
