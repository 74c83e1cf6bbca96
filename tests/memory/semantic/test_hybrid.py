"""Hybrid search through the provider contract, lcm and simple on SQLite and PostgreSQL:
what meaning adds to words, and that words stand alone whenever embeddings are missing
(off, an endpoint the server lacks, items not embedded yet)."""

from __future__ import annotations

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from memory.contract.types import Message, NoteKind, SearchMode, SearchQuery, SearchScope, Session
from memory.search.semantic.backlog import embed_backlog
from tests.fakes.openai_server import FakeOpenAI
from tests.memory.semantic.conftest import EmbedderFactory, ProviderFactory

ME, OTHER = Session("hybrid:1", user_id=1), Session("hybrid:2", user_id=2)
HYBRID, FULL_TEXT = SearchMode.HYBRID, SearchMode.FULL_TEXT
PROVIDERS = pytest.mark.parametrize("name", ["lcm", "simple"])


async def _load(provider, session: Session = ME) -> None:  # noqa: ANN001
    await provider.bootstrap(session)
    await provider.append(session, *(Message("user", f"small talk number {i}") for i in range(10)))
    await provider.append(
        session,
        Message("user", "I finally bought an automobile last week"),
        Message("assistant", "congratulations on the new wheels"),
        Message("user", "my car insurance is too expensive"),
    )


def _contents(hits) -> list[str]:  # noqa: ANN001
    return [h.content.split(" (after:")[0] for h in hits]


@PROVIDERS
async def test_meaning_finds_what_shares_no_word(
    engine: AsyncEngine,
    server: FakeOpenAI,
    make_embedder: EmbedderFactory,
    make_provider: ProviderFactory,
    name: str,
) -> None:
    server.synonyms = {"automobile": "car", "vehicle": "car"}
    embedder = make_embedder()
    provider = make_provider(engine, name, embedder)
    await _load(provider)
    await embed_backlog(provider, embedder)

    words = await provider.search(ME, SearchQuery("vehicle", mode=FULL_TEXT))
    assert words == []  # no stored message has the word
    hits = await provider.search(ME, SearchQuery("vehicle", mode=HYBRID))
    assert set(_contents(hits[:2])) == {
        "I finally bought an automobile last week",
        "my car insurance is too expensive",
    }
    assert all(h.signals == ("meaning",) for h in hits[:2])
    assert all(h.timestamp is not None and h.session_id == ME.id for h in hits)

    # Found by both: the word and the meaning; the fused score ranks it first.
    hits = await provider.search(ME, SearchQuery("car insurance", mode=HYBRID))
    assert hits[0].content == "my car insurance is too expensive"
    assert hits[0].signals == ("words", "meaning")
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)


@PROVIDERS
async def test_words_stand_alone_without_embeddings_or_before_them(
    engine: AsyncEngine,
    server: FakeOpenAI,
    make_embedder: EmbedderFactory,
    make_provider: ProviderFactory,
    name: str,
) -> None:
    # Off: hybrid is the ranked word search, hit for hit.
    plain = make_provider(engine, name)
    await _load(plain)
    for text in ("car insurance", "When did I buy the automobile?"):
        assert _contents(await plain.search(ME, SearchQuery(text, mode=HYBRID))) == _contents(
            await plain.search(ME, SearchQuery(text, mode=FULL_TEXT))
        )

    # On, half backfilled: what is not embedded yet is still found by its words.
    embedder = make_embedder()
    provider = make_provider(engine, name, embedder)
    await embed_backlog(provider, embedder)
    await provider.append(ME, Message("user", "the dashcam recorded the whole trip"))
    hits = await provider.search(ME, SearchQuery("dashcam", mode=HYBRID))
    assert _contents(hits)[0] == "the dashcam recorded the whole trip"
    assert hits[0].signals[0] == "words"

    # A server without the endpoint: the same words, no error.
    server.embeddings_status = 404
    down = make_provider(engine, name, make_embedder("other-model"))
    hits = await down.search(ME, SearchQuery("car insurance", mode=HYBRID))
    assert hits and hits[0].content == "my car insurance is too expensive"
    assert all(h.signals == ("words",) for h in hits)


@PROVIDERS
async def test_hybrid_stays_in_the_users_scope_and_the_asked_scope(
    engine: AsyncEngine,
    server: FakeOpenAI,
    make_embedder: EmbedderFactory,
    make_provider: ProviderFactory,
    name: str,
) -> None:
    server.synonyms = {"automobile": "car"}
    embedder = make_embedder()
    provider = make_provider(engine, name, embedder)
    await _load(provider, OTHER)
    await provider.bootstrap(ME)
    await provider.append(ME, Message("user", "nothing about that here"))
    await embed_backlog(provider, embedder)
    for mode in (HYBRID, FULL_TEXT):
        hits = await provider.search(ME, SearchQuery("automobile car", mode=mode))
        assert all(h.session_id == ME.id for h in hits), mode
    hits = await provider.search(
        OTHER, SearchQuery("automobile", mode=HYBRID, scope=SearchScope.SUMMARIES)
    )
    assert all(h.source_type in {"summary", "archive"} for h in hits)


async def test_simple_notes_are_found_by_meaning(
    engine: AsyncEngine,
    server: FakeOpenAI,
    make_embedder: EmbedderFactory,
    make_provider: ProviderFactory,
) -> None:
    server.synonyms = {"physician": "doctor"}
    embedder = make_embedder()
    provider = make_provider(engine, "simple", embedder)
    await _load(provider)
    await provider.note_add(ME, "health", "see the doctor on Tuesdays", kind=NoteKind.NOTE)
    await embed_backlog(provider, embedder)
    hits = await provider.search(ME, SearchQuery("physician", mode=HYBRID))
    assert [(h.source_type, h.source_id, h.signals) for h in hits][:1] == [
        ("note", "health", ("meaning",))
    ]
    # Rewritten, the note's old vector no longer stands for it: found again once embedded.
    await provider.note_write(ME, "health", "dentist appointments only")
    hits = await provider.search(ME, SearchQuery("physician", mode=HYBRID))
    assert not any(h.source_type == "note" for h in hits)


@PROVIDERS
async def test_word_hits_are_weighed_by_meaning_beyond_the_nearest(
    engine: AsyncEngine,
    server: FakeOpenAI,
    make_embedder: EmbedderFactory,
    make_provider: ProviderFactory,
    name: str,
) -> None:
    # 55 messages nearer in meaning than either word hit fill the nearest list; of two
    # messages sharing the word, the shorter ranks first by words, the other is closer
    # in meaning ("claim" means "vehicle"): its meaning counts although it is not among
    # the nearest, so it ranks first.
    server.synonyms = {"auto": "vehicle", "claim": "vehicle"}
    embedder = make_embedder()
    provider = make_provider(engine, name, embedder)
    await provider.bootstrap(ME)
    await provider.append(ME, *(Message("user", "auto") for _ in range(55)))
    long = "insurance policy renewal letter arrived yesterday with many pages"
    await provider.append(ME, *(Message("user", long) for _ in range(3)))
    await provider.append(ME, Message("user", "auto"))
    shorter, closer = "insurance form paper today", "insurance claim form paper today"
    # Apart, so neither is the other's context (a word there counts half).
    await provider.append(ME, Message("user", shorter), Message("user", "right"))
    await provider.append(ME, Message("user", closer))
    await embed_backlog(provider, embedder)

    words = await provider.search(ME, SearchQuery("vehicle insurance", mode=FULL_TEXT))
    assert _contents(words)[:2] == [shorter, closer]
    hits = await provider.search(ME, SearchQuery("vehicle insurance", mode=HYBRID))
    assert [(c, h.signals) for c, h in zip(_contents(hits), hits, strict=True)][:2] == [
        (closer, ("words",)),
        (shorter, ("words",)),
    ]
