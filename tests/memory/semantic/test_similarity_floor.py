"""The similarity floor of hybrid search, with the fake embeddings server (a hashed bag
of words: texts sharing no word score about 0): an item found by meaning alone is listed
only if its cosine reaches the model's `min_similarity`; word hits are never dropped, and
every item kept scores as it would without the floor. Through the provider contract
(lcm and simple, SQLite and PostgreSQL), and through the bot: after `/memory forget`,
`/memory search` for the forgotten word says there is no close match instead of listing
unrelated neighbours."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from memory.contract.types import Message, SearchMode, SearchQuery, Session
from memory.search.semantic import DEFAULT_MIN_SIMILARITY
from memory.search.semantic.backlog import embed_backlog
from tests.fakes.openai_server import FakeOpenAI, fake_embedding
from tests.fakes.telegram_server import FakeTelegram
from tests.memory.semantic.conftest import EmbedderFactory, ProviderFactory
from tests.reliability.conftest import ask
from tests.reliability.harness import live_bot, scripted
from tests.telegram.test_forget import code_of

ME = Session("floor:1", user_id=1)
HYBRID, FULL_TEXT = SearchMode.HYBRID, SearchMode.FULL_TEXT
# One word hit far in meaning: "number" among many other words.
LONG = "number " + " ".join(f"topic{i}" for i in range(40))
AUTOMOBILE = "I finally bought an automobile last week"
INSURANCE = "my car insurance is too expensive"
STORED = [*(f"small talk number {i}" for i in range(10)), AUTOMOBILE, INSURANCE, LONG]


def _cosine(a: str, b: str, synonyms: dict[str, str]) -> float:
    return float(np.dot(fake_embedding(a, synonyms=synonyms), fake_embedding(b, synonyms=synonyms)))


def _far_word(texts: list[str], synonyms: dict[str, str] | None = None) -> str:
    """A word whose fake vector is far (below the floor) from every text of `texts`."""
    for i in range(1000):
        word = f"Zqxfar{i}"
        if all(_cosine(word, t, synonyms or {}) < DEFAULT_MIN_SIMILARITY for t in texts):
            return word
    raise AssertionError("no far word")


def _keys(hits) -> list[tuple[str, str]]:  # noqa: ANN001
    return [(h.source_type, h.source_id) for h in hits]


@pytest.mark.parametrize("name", ["lcm", "simple"])
async def test_far_neighbours_found_by_meaning_alone_are_no_match(
    engine: AsyncEngine,
    server: FakeOpenAI,
    make_embedder: EmbedderFactory,
    make_provider: ProviderFactory,
    name: str,
) -> None:
    server.synonyms = synonyms = {"automobile": "car", "vehicle": "car"}
    embedder = make_embedder()
    provider = make_provider(engine, name, embedder)
    await provider.bootstrap(ME)
    await provider.append(ME, *(Message("user", text) for text in STORED))
    await embed_backlog(provider, embedder)
    # Without a floor (-1 keeps everything): the nearest list is full of far neighbours.
    unfloored = make_provider(engine, name, make_embedder(min_similarity=-1.0))
    far = _far_word(STORED, synonyms)

    assert len(await unfloored.search(ME, SearchQuery(far, mode=HYBRID))) == len(STORED)
    assert await provider.search(ME, SearchQuery(far, mode=HYBRID)) == []

    # Found by meaning alone and close: kept.
    assert _cosine("vehicle", INSURANCE, synonyms) < 0.5 < _cosine("vehicle", AUTOMOBILE, synonyms)
    hits = await provider.search(ME, SearchQuery("vehicle", mode=HYBRID))
    assert sorted(h.content.split(" (after:")[0] for h in hits) == [AUTOMOBILE, INSURANCE]
    assert all(h.signals == ("meaning",) for h in hits)

    # Word hits always stay, the one far in meaning too; each item kept scores exactly
    # as without the floor (the far ones still count in the meaning scale).
    assert _cosine(f"number {far}", LONG, synonyms) < DEFAULT_MIN_SIMILARITY
    query = SearchQuery(f"vehicle number {far}", mode=HYBRID, limit=50)
    floored = await provider.search(ME, query)
    words = await provider.search(ME, SearchQuery(f"vehicle number {far}", mode=FULL_TEXT))
    assert set(_keys(words)) <= set(_keys(floored))
    assert any(h.content == LONG for h in floored)
    everything = {(h.source_type, h.source_id): h.score for h in await unfloored.search(ME, query)}
    assert [(k, everything[k]) for k in _keys(floored)] == [
        (k, h.score) for k, h in zip(_keys(floored), floored, strict=True)
    ]
    assert len(everything) > len(floored)  # the small talk matched neither way

    # The floor is the model's: a stricter one drops the farther meaning-only hit.
    strict = make_provider(engine, name, make_embedder(min_similarity=0.5))
    hits = await strict.search(ME, SearchQuery("vehicle", mode=HYBRID))
    assert [h.content.split(" (after:")[0] for h in hits] == [AUTOMOBILE]


@pytest.mark.parametrize(
    ("db_kind", "provider"),
    [
        pytest.param("sqlite", "lcm"),
        pytest.param("postgres", "simple", marks=pytest.mark.postgres),
    ],
)
async def test_after_a_forget_search_says_no_close_matches(
    db_kind: str, provider: str, tmp_path: Path
) -> None:
    async with (
        FakeTelegram() as tg,
        FakeOpenAI(scripted) as llm,
        live_bot(
            tmp_path, tg, llm, db_kind=db_kind, provider=provider,
            embeddings={"model": "fake-embed"},
        ) as bot,
    ):  # fmt: skip
        chat = tg.private(4242)
        lines = [f"line {i} about topic{i}" for i in range(12)]
        token = _far_word([*lines, *(f"echo: {line}" for line in lines), "echo: keep that"])
        for line in lines[:6]:
            await ask(tg, chat, line)
        await ask(tg, chat, f"keep {token}")
        for line in lines[6:]:
            await ask(tg, chat, line)
        await embed_backlog(bot.provider, bot.services.embedder)

        found = await ask(tg, chat, f"/memory search {token}")
        assert f"matches for “{token}”:\nFrom this conversation:\n• [message" in found
        assert f"keep {token}" in found
        preview = await ask(tg, chat, f"/memory forget {token}")
        done = await ask(tg, chat, f"/memory forget confirm {code_of(preview)}")
        assert "Forgot 2 message(s)" in done, done
        await embed_backlog(bot.provider, bot.services.embedder)

        after = await ask(tg, chat, f"/memory search {token}")
        assert after == f"No close matches for “{token}”.", after
        # A word still stored is listed as before.
        assert "topic3" in await ask(tg, chat, "/memory search topic3")
