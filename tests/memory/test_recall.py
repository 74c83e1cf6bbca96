"""The shared search (memory/search/recall.py, memory/search/lexical.py) through the provider contract,
for lcm and simple on SQLite and PostgreSQL: what only SQL providers do (neighbourhood
context, notes merged with messages, one ranking on both databases)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from memory.compaction.summarizer import TruncatingSummarizer
from memory.contract.capabilities import ProviderContext
from memory.contract.registry import create_provider
from memory.contract.types import Message, NoteKind, SearchMode, SearchQuery, SearchScope, Session
from memory.testing.databases import temp_engine

S = Session("recall:1", user_id=1)


@pytest.fixture(params=["lcm", "simple"])
async def provider(
    request: pytest.FixtureRequest, engine: AsyncEngine, tmp_path: Path
) -> AsyncIterator:
    ctx = ProviderContext(
        engine=engine,
        summarizer=TruncatingSummarizer(),
        data_dir=tmp_path,
        config={"store_dir": str(tmp_path / "notes"), "keep_tail": 4},
    )
    p = create_provider(request.param, ctx)
    await p.bootstrap(S)
    yield p
    await p.close()


async def _filler(p, n: int = 12) -> None:  # noqa: ANN001
    # Enough unrelated rows that a word in a few of them has a positive idf.
    await p.append(S, *(Message("user", f"small talk number {i}") for i in range(n)))


async def test_an_answer_is_found_through_the_question_it_answers(provider) -> None:  # noqa: ANN001
    await _filler(provider)
    await provider.append(
        S,
        Message("user", "which puppy did we adopt last spring?"),
        Message("assistant", "Biscuit, the beagle"),
    )
    hits = await provider.search(S, SearchQuery("adopted puppies", mode=SearchMode.FULL_TEXT))
    assert [h.content.split(" (")[0] for h in hits] == [
        "which puppy did we adopt last spring?",
        "Biscuit, the beagle",
    ]
    # The answer shows what it answers: its own words alone would not explain the hit.
    assert hits[1].content == ("Biscuit, the beagle (after: which puppy did we adopt last spring?)")
    assert hits[0].score > hits[1].score > 0


async def test_ranking_prefers_more_and_rarer_shared_words(provider) -> None:  # noqa: ANN001
    await _filler(provider)
    await provider.append(
        S,
        Message("user", "my sister moved to Lisbon in May"),
        Message("user", "May was rainy"),
        Message("user", "she loves the trams there"),
    )
    hits = await provider.search(S, SearchQuery("When did my sister move to Lisbon?"))
    assert hits[0].content == "my sister moved to Lisbon in May"
    assert all(h.signals == ("words",) for h in hits)


async def test_simple_merges_notes_and_messages_in_one_ranking(
    engine: AsyncEngine, tmp_path: Path
) -> None:
    ctx = ProviderContext(
        engine=engine,
        summarizer=TruncatingSummarizer(),
        config={"store_dir": str(tmp_path / "notes")},
    )
    p = create_provider("simple", ctx)
    try:
        await p.bootstrap(S)
        await _filler(p)
        await p.append(S, Message("user", "the lighthouse keeper waved"))
        await p.note_add(
            S, "lighthouse", "lighthouse lighthouse: the keeper's name is Ada", kind=NoteKind.NOTE
        )
        hits = await p.search(S, SearchQuery("lighthouse keeper name", limit=5))
        # Both indexes' BM25 scores, merged: the note and the message lead the list.
        assert sorted(h.source_type for h in hits[:2]) == ["message", "note"]
        assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
        assert hits[1].score > 0
        only = await p.search(S, SearchQuery("lighthouse", scope=SearchScope.MESSAGES))
        assert [h.source_type for h in only] == ["message"]
    finally:
        await p.close()


@pytest.mark.postgres
async def test_one_ranking_on_both_databases(tmp_path: Path) -> None:
    """The same messages and questions give the same hits, best ones first in the same
    order, on SQLite and PostgreSQL. Near-ties may swap: FTS5 counts the scope token in
    a row's length and stems with Porter, PostgreSQL with Snowball."""
    texts = [f"small talk number {i}" for i in range(12)] + [
        "quinoa salad recipe with lemon",
        "lemon tart for dessert",
        "the quinoa was overcooked again, sadly",
        "salad days are over",
        "we talked about recipes for hours",
    ]
    questions = ["quinoa lemon salad recipe", "What dessert did we make?", "talk about salad"]
    orders: dict[str, list[list[str]]] = {}
    for kind in ("sqlite", "postgres"):
        (tmp_path / kind).mkdir()
        async with temp_engine(kind, tmp_path / kind) as engine:
            ctx = ProviderContext(engine=engine, summarizer=TruncatingSummarizer())
            p = create_provider("lcm", ctx)
            try:
                await p.append(S, *(Message("user", t) for t in texts))
                orders[kind] = [
                    [h.content for h in await p.search(S, SearchQuery(q, limit=20))]
                    for q in questions
                ]
            finally:
                await p.close()
    for lite, pg in zip(orders["sqlite"], orders["postgres"], strict=True):
        assert sorted(lite) == sorted(pg) and lite[:2] == pg[:2], (lite, pg)
    assert orders["sqlite"][0][0] == "quinoa salad recipe with lemon"


async def test_a_reply_reads_as_stored_and_a_neighbour_says_what_it_came_after(
    provider,  # noqa: ANN001
) -> None:
    await _filler(provider)
    reply = '[Ann, replying to Bob: "we should paint the fence"] agreed, blue'
    await provider.append(
        S,
        Message("user", "[Bob] we should paint the fence"),
        Message("user", reply),
        Message("user", "[Cid] ok"),
    )
    hits = await provider.search(S, SearchQuery("fence painting", mode=SearchMode.FULL_TEXT))
    shown = {h.content for h in hits}
    # A real reply holds the words (its quote): shown as stored, once.
    assert reply in shown
    # A neighbour found through the message before it says "after", never "replying to".
    assert f"[Cid] ok (after: {reply})" in shown
    assert not any(c.count("replying to") > 1 for c in shown)
