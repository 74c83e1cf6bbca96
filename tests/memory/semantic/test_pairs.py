"""Each message embedded with the next one too (`message_next`, memory/search/pairs.py),
through the provider contract, lcm and simple, on SQLite and PostgreSQL: which pairs are
made and when, a message found by meaning through its reply (exact and on disk), the
turn in progress, forgetting, and `embeddings.with_next` off."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from memory.contract.types import Message, SearchMode, SearchQuery, Session, ToolCall
from memory.search import recall
from memory.search.semantic.backlog import EmbeddingWorker, embed_backlog, embed_items, sources_of
from memory.search.semantic.client import Embedder
from memory.search.semantic.store import embeddings
from memory.storage import forgetting as fg
from tests.fakes.openai_server import FakeOpenAI, fake_embedding
from tests.memory.semantic.conftest import EmbedderFactory, ProviderFactory

ME = Session("pairs:1", user_id=41, channel="test")
HYBRID = SearchMode.HYBRID
PROVIDERS = pytest.mark.parametrize("name", ["lcm", "simple"])
# Exact search in the process, and every scope through its on-disk index.
WHERE = pytest.mark.parametrize("where", [{"vector_disk_min_rows": 0}, {"vector_disk_min_rows": 1}])
DIM = 1024  # few hash collisions between the fake's words: unrelated texts stay orthogonal


@pytest.fixture
def embedder(server: FakeOpenAI, make_embedder: EmbedderFactory) -> Embedder:
    server.embedding_dim = DIM
    server.synonyms = {"cookie": "biscuit"}  # "cookie" means what "biscuit" does
    return make_embedder()


async def _ids(engine: AsyncEngine) -> dict[str, int]:
    async with engine.connect() as conn:
        rows = await conn.execute(sa.text("SELECT content, id FROM messages"))
        return {content: int(i) for content, i in rows.all()}


async def _keys(engine: AsyncEngine, source: str) -> set[str]:
    async with engine.connect() as conn:
        rows = await conn.execute(
            sa.select(embeddings.c.item_key).where(embeddings.c.source == source)
        )
        return set(rows.scalars())


def _sent(server: FakeOpenAI) -> list[str]:
    return [text for request in server.embedding_requests for text in request["input"]]


def _contents(hits: list[Any]) -> list[str]:
    return [h.content.split(" (after:")[0] for h in hits]


@PROVIDERS
async def test_pairs_for_each_message_with_a_next_one_as_soon_as_it_is_stored(
    engine: AsyncEngine,
    server: FakeOpenAI,
    embedder: Embedder,
    make_provider: ProviderFactory,
    name: str,
) -> None:
    provider = make_provider(engine, name, embedder)
    await provider.bootstrap(ME)
    call = ToolCall("call_1", "memory", '{"action": "status"}')
    await provider.append(
        ME,
        Message("user", "where are my keys"),
        Message("assistant", "", tool_calls=[call]),  # no text: no pair, skipped over
        Message("tool", "a tool result", tool_call_id="call_1", name="memory"),
        Message("assistant", "on the hook"),
        Message("user", "thanks"),
    )
    other = Session("pairs:2", user_id=41, channel="test")
    await provider.bootstrap(other)
    await provider.append(other, Message("user", "a new conversation"))
    worker = EmbeddingWorker(provider, embedder)  # the background worker's look-back mode
    await worker.run_once()
    ids = await _ids(engine)
    # Pairs never cross conversations; the last message of each has none.
    assert await _keys(engine, "message_next") == {
        str(ids["where are my keys"]),
        str(ids["on the hook"]),
    }
    assert {"where are my keys\non the hook", "on the hook\nthanks"} <= set(_sent(server))
    assert not any("a tool result" in text for text in _sent(server))

    # The reply stored: the worker pairs the message it answers at its next pass.
    await provider.append(other, Message("assistant", "welcome"))
    await worker.run_once()
    assert str(ids["a new conversation"]) in await _keys(engine, "message_next")
    assert "a new conversation\nwelcome" in _sent(server)


async def _puppy(provider: Any, session: Session = ME) -> None:
    await provider.bootstrap(session)
    await provider.append(
        session,
        Message("user", "the weather is grey today"),
        Message("assistant", "bring an umbrella"),
        Message("user", "puppy name"),
        Message("assistant", "Biscuit"),
        Message("user", "ok"),
    )


@PROVIDERS
@WHERE
async def test_a_message_is_found_by_meaning_through_its_reply(
    engine: AsyncEngine,
    embedder: Embedder,
    make_provider: ProviderFactory,
    name: str,
    where: dict[str, int],
) -> None:
    provider = make_provider(engine, name, embedder, **where)
    await _puppy(provider)
    await embed_backlog(provider, embedder)
    # "cookie" shares no word with anything stored: all is found by meaning. "puppy name"
    # alone is orthogonal to it; with its reply "Biscuit" its mean passes the floor.
    hits = await provider.search(ME, SearchQuery("cookie", mode=HYBRID))
    assert _contents(hits) == ["Biscuit", "puppy name"]
    assert all(h.signals == ("meaning",) for h in hits)
    assert len({h.source_id for h in hits}) == len(hits)  # a message never twice

    alone = make_provider(engine, name, embedder, embeddings_with_next=False, **where)
    hits = await alone.search(ME, SearchQuery("cookie", mode=HYBRID))
    assert _contents(hits) == ["Biscuit"]  # its pair's vector not searched


@PROVIDERS
async def test_a_word_hit_cut_from_the_nearest_keeps_its_meaning(
    engine: AsyncEngine,
    embedder: Embedder,
    make_provider: ProviderFactory,
    name: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The nearest are asked over both vectors, twice the pool, then cut to the pool by
    the mean: a word hit among those asked but cut still counts its meaning (it did
    not: LoCoMo's hybrid recall@10 fell from 0.747 to 0.733)."""
    monkeypatch.setattr(recall, "HYBRID_POOL", 2)
    provider = make_provider(engine, name, embedder)
    await provider.bootstrap(ME)
    await provider.append(
        ME,
        *(
            Message("user" if i % 2 == 0 else "assistant", text)
            for i, text in enumerate(
                [
                    "biscuit biscuit tea",  # by meaning alone: 0.89, its pair 0.67
                    "that sounds great thanks",
                    "biscuit",  # by meaning alone: 1.0, its pair 0.5
                    "red green blue",
                    "cookie one two three four five six seven eight",  # words, far in meaning
                    "cookie crumbs",  # the best by words, 0.71 in meaning: asked, then cut
                ]
            )
        ),
    )
    await embed_backlog(provider, embedder)
    hits = await provider.search(ME, SearchQuery("cookie", mode=HYBRID))
    assert _contents(hits)[0] == "cookie crumbs"
    # Without its meaning it scores 0.5, as "biscuit biscuit tea" does by meaning alone.
    assert hits[0].score > hits[1].score + 0.1


@PROVIDERS
async def test_the_pair_quoting_the_turn_in_progress_does_not_count(
    engine: AsyncEngine,
    embedder: Embedder,
    make_provider: ProviderFactory,
    name: str,
) -> None:
    provider = make_provider(engine, name, embedder)
    await provider.bootstrap(ME)
    await provider.append(ME, Message("user", "tell me a story"), Message("assistant", "okay"))
    # The turn: its question is stored (and embedded, the worker is quick) before the
    # model searches; "okay"'s pair is "okay\nvolcanoes please".
    await provider.append(ME, Message("user", "volcanoes please"))
    await embed_backlog(provider, embedder)
    assert "okay" in _contents(await provider.search(ME, SearchQuery("volcanoes", mode=HYBRID)))

    hits = await provider.search(ME, SearchQuery("volcanoes", mode=HYBRID, in_turn=True))
    assert hits == []  # neither the question nor the message found through it


@PROVIDERS
async def test_forgetting_a_message_drops_the_pair_that_quotes_it(
    engine: AsyncEngine,
    server: FakeOpenAI,
    embedder: Embedder,
    make_provider: ProviderFactory,
    name: str,
) -> None:
    provider = make_provider(engine, name, embedder)
    await _puppy(provider)
    await embed_backlog(provider, embedder)
    ids = await _ids(engine)
    owner = fg.Owner(ME.user_id, ME.agent_id)
    await fg.forget(provider, owner, [ids["Biscuit"]])

    biscuit = np.asarray(fake_embedding("biscuit", DIM), np.float32)

    async def quoting_biscuit() -> list[tuple[str, str]]:
        async with engine.connect() as conn:
            rows = await conn.execute(
                sa.select(embeddings.c.source, embeddings.c.item_key, embeddings.c.vector)
            )
            return [
                (r.source, r.item_key)
                for r in rows
                if r.vector and float(np.frombuffer(r.vector, np.float32) @ biscuit) > 0.01
            ]

    assert await quoting_biscuit() == []  # its own vectors and "puppy name"'s pair gone
    assert str(ids["puppy name"]) not in await _keys(engine, "message_next")
    assert await provider.search(ME, SearchQuery("cookie", mode=HYBRID)) == []

    # The message pairs with its new next one when the backlog is embedded.
    await embed_backlog(provider, embedder)
    assert "puppy name\nok" in _sent(server)
    assert str(ids["puppy name"]) in await _keys(engine, "message_next")
    assert await quoting_biscuit() == []

    # The last message forgotten: the one before it has no pair any more.
    await fg.forget(provider, owner, [ids["ok"]])
    assert str(ids["puppy name"]) not in await _keys(engine, "message_next")
    assert await embed_backlog(provider, embedder) == 0


@PROVIDERS
async def test_a_pass_that_read_the_text_before_a_forget_stores_none_of_it(
    engine: AsyncEngine,
    embedder: Embedder,
    make_provider: ProviderFactory,
    name: str,
) -> None:
    """An embedding pass reads the pending texts, a forget commits, then the pass stores:
    the vectors of what was forgotten, and the pair quoting it, are not stored."""
    provider = make_provider(engine, name, embedder)
    await _puppy(provider)
    read = [
        item
        for source in sources_of(provider)
        for item in (await source.pending(embedder.model, limit=100, after=0)).items
    ]
    assert "puppy name\nBiscuit" in [i.text for i in read]
    ids = await _ids(engine)
    await fg.forget(provider, fg.Owner(ME.user_id, ME.agent_id), [ids["Biscuit"]])
    await embed_items(engine, embedder, read)
    assert str(ids["Biscuit"]) not in await _keys(engine, "message")
    pairs = await _keys(engine, "message_next")
    assert str(ids["puppy name"]) not in pairs and str(ids["Biscuit"]) not in pairs
    assert str(ids["bring an umbrella"]) in pairs  # the others are stored
    await embed_backlog(provider, embedder)  # and the message pairs with its new next one
    assert str(ids["puppy name"]) in await _keys(engine, "message_next")


@PROVIDERS
async def test_with_next_off_makes_no_pairs(
    engine: AsyncEngine,
    server: FakeOpenAI,
    embedder: Embedder,
    make_provider: ProviderFactory,
    name: str,
) -> None:
    provider = make_provider(engine, name, embedder, embeddings_with_next=False)
    await _puppy(provider)
    assert await embed_backlog(provider, embedder) == 5  # the messages alone
    assert await _keys(engine, "message_next") == set()
    assert not any("\n" in text for text in _sent(server))
    hits = await provider.search(ME, SearchQuery("cookie", mode=HYBRID))
    assert _contents(hits) == ["Biscuit"]
