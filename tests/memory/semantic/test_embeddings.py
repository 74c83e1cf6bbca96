"""Embeddings end to end through the provider contract, on SQLite and PostgreSQL: what
the worker stores, restarts, concurrent backfills, an endpoint without embeddings, model
and dimension changes, scope isolation, notes rewritten, and replicas."""

from __future__ import annotations

import asyncio
import logging

import numpy as np
import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from memory.contract.types import CompactionMode, Message, SearchQuery, Session, ToolCall
from memory.search.semantic.backlog import EmbeddingWorker, embed_backlog
from memory.search.semantic.client import EmbeddingError
from memory.search.semantic.index import VectorIndex
from memory.search.semantic.search import SemanticSearch
from memory.search.semantic.store import embeddings
from memory.storage.db import create_engine
from plugins.simple.embedding_source import note_key
from tests.fakes.openai_server import FakeOpenAI, error
from tests.memory.semantic.conftest import EmbedderFactory, ProviderFactory

ALICE = Session("tg:alice", "default", 1001, "telegram")
BOB = Session("tg:bob", "default", 2002, "telegram")
PROVIDERS = ["lcm", "simple"]


def chat(topic: str, n: int = 3) -> list[Message]:
    """n exchanges about `topic`; the first goes through a tool call (not embedded)."""
    out = []
    for i in range(n):
        out.append(Message("user", f"tell me about {topic} number {i}"))
        if i == 0:
            call = ToolCall("call_1", "memory", '{"action": "status"}')
            out.append(Message("assistant", "", tool_calls=[call]))
            out.append(
                Message("tool", f"tool result about {topic}", tool_call_id="call_1", name="memory")
            )
        out.append(Message("assistant", f"{topic} facts, part {i}"))
    return out


async def rows(engine: AsyncEngine, **where: object) -> list[sa.Row]:
    query = sa.select(embeddings).order_by(embeddings.c.id)
    for column, value in where.items():
        query = query.where(embeddings.c[column] == value)
    async with engine.connect() as conn:
        return list((await conn.execute(query)).all())


async def embeddable_ids(engine: AsyncEngine) -> set[str]:
    async with engine.connect() as conn:
        ids = (
            await conn.execute(
                sa.text(
                    "SELECT id FROM messages WHERE role IN ('user', 'assistant') AND content <> ''"
                )
            )
        ).scalars()
        return {str(i) for i in ids}


@pytest.mark.parametrize("name", PROVIDERS)
async def test_the_worker_embeds_appended_messages_but_not_tool_traffic(
    engine: AsyncEngine,
    name: str,
    make_provider: ProviderFactory,
    make_embedder: EmbedderFactory,
) -> None:
    embedder = make_embedder()
    provider = make_provider(engine, name, embedder)
    await provider.append(ALICE, *chat("volcanoes"))
    worker = EmbeddingWorker(provider, embedder, poll_s=0.01)
    worker.start()
    try:
        await worker.next_pass()
        stored = await rows(engine, source="message")
        assert {r.item_key for r in stored} == await embeddable_ids(engine)
        assert len(stored) == 6  # 3 questions, 3 answers; no tool call, no tool result
        assert {(r.user_id, r.agent_id, r.model, r.dim) for r in stored} == {
            (ALICE.user_id, "default", embedder.model, 64)
        }
        await provider.append(BOB, Message("user", "something new"))
        await worker.next_pass()
        assert len(await rows(engine, source="message")) == 7
    finally:
        await worker.stop()


async def test_a_backlog_left_by_a_failing_server_is_caught_up_after_a_restart(
    engine: AsyncEngine,
    server: FakeOpenAI,
    make_provider: ProviderFactory,
    make_embedder: EmbedderFactory,
) -> None:
    first = make_embedder(max_retries=0)
    provider = make_provider(engine, "lcm", first)
    await provider.append(ALICE, *chat("rivers", 5))
    server.push_embedding(*[error(500)] * 3)
    with pytest.raises(EmbeddingError):
        await EmbeddingWorker(provider, first).run_once()
    assert await rows(engine) == []
    # "Restart": a new provider, embedder and worker find the backlog in the database.
    embedder = make_embedder()
    restarted = make_provider(engine, "lcm", embedder)
    worker = EmbeddingWorker(restarted, embedder, poll_s=0.01)
    worker.start()
    try:
        await worker.next_pass()
    finally:
        await worker.stop()
    assert {r.item_key for r in await rows(engine)} == await embeddable_ids(engine)


@pytest.mark.parametrize("name", PROVIDERS)
async def test_two_backfills_at_once_neither_fail_nor_duplicate(
    engine: AsyncEngine,
    name: str,
    make_provider: ProviderFactory,
    make_embedder: EmbedderFactory,
) -> None:
    provider = make_provider(engine, name)
    for i in range(12):
        await provider.append(Session(f"s{i}", "default", 100 + i, "telegram"), *chat(f"t{i}"))
    if name == "simple":
        await provider.note_add(ALICE, "garden", "tomatoes need sun")
    # A second "replica": its own engine and provider on the same database.
    other_engine = create_engine(engine.url.render_as_string(hide_password=False))
    try:
        other = make_provider(other_engine, name)
        a, b = make_embedder(), make_embedder()
        stored = await asyncio.gather(embed_backlog(provider, a), embed_backlog(other, b))
    finally:
        await other_engine.dispose()
    # Each message, and each but the last of a conversation with the next (`message_next`).
    items = 2 * len(await embeddable_ids(engine)) - 12 + (1 if name == "simple" else 0)
    assert sum(stored) == items
    all_rows = await rows(engine)
    assert len(all_rows) == items
    assert len({(r.source, r.item_key, r.model) for r in all_rows}) == items
    # Safe to re-run: nothing left to do.
    assert await embed_backlog(provider, make_embedder()) == 0


async def test_without_the_endpoint_search_stays_lexical_and_it_is_said_once(
    engine: AsyncEngine,
    server: FakeOpenAI,
    make_provider: ProviderFactory,
    make_embedder: EmbedderFactory,
    caplog: pytest.LogCaptureFixture,
) -> None:
    server.embeddings_status = 404
    embedder = make_embedder()
    provider = make_provider(engine, "lcm", embedder)
    await provider.append(ALICE, *chat("glaciers"))
    semantic = SemanticSearch(engine, embedder)
    with caplog.at_level(logging.INFO):
        worker = EmbeddingWorker(provider, embedder, poll_s=0.01)
        for _ in range(3):
            with pytest.raises(Exception, match="HTTP 404"):
                await worker.run_once()
            assert await semantic.search(ALICE.user_id, "default", "glaciers") == []
            hits = await provider.search(ALICE, SearchQuery("glaciers"))
            assert hits  # lexical search answers as before
    assert await rows(engine) == []
    said = [
        r
        for r in caplog.records
        if r.name.startswith(("memory", "plugins")) and "404" in r.getMessage()
    ]
    assert len(said) == 1


async def test_vectors_of_another_model_are_never_compared_until_re_embedded(
    engine: AsyncEngine,
    make_provider: ProviderFactory,
    make_embedder: EmbedderFactory,
) -> None:
    old = make_embedder("model-a")
    provider = make_provider(engine, "lcm")
    await provider.append(ALICE, *chat("comets"))
    await embed_backlog(provider, old)
    new = make_embedder("model-b")
    semantic = SemanticSearch(engine, new)
    assert await semantic.search(ALICE.user_id, "default", "comets") == []
    assert await embed_backlog(provider, new) == 11  # 6 messages, 5 with the next
    hits = await semantic.search(ALICE.user_id, "default", "comets facts part 1", limit=3)
    assert hits and {h.source for h in hits} <= {"message", "message_next"}
    assert {r.model for r in await rows(engine)} == {"model-a", "model-b"}


async def test_a_prefix_change_is_a_model_change(
    engine: AsyncEngine,
    server: FakeOpenAI,
    make_provider: ProviderFactory,
    make_embedder: EmbedderFactory,
) -> None:
    """Vectors made without prefixes are never compared with a prefixed query: the items
    are pending again, embedded with the document prefix, and stored beside the old."""
    provider = make_provider(engine, "lcm")
    await provider.append(ALICE, *chat("comets"))
    assert await embed_backlog(provider, make_embedder("e5")) == 11  # 6 messages, 5 pairs
    prefixed = make_embedder("e5", query_prefix="query: ", document_prefix="passage: ")
    semantic = SemanticSearch(engine, prefixed)
    assert await semantic.search(ALICE.user_id, "default", "comets") == []
    server.embedding_requests.clear()
    assert await embed_backlog(provider, prefixed) == 11
    sent = [text for request in server.embedding_requests for text in request["input"]]
    assert len(sent) == 12 and all(text.startswith("passage: ") for text in sent)  # + the probe
    hits = await semantic.search(ALICE.user_id, "default", "comets facts part 1", limit=3)
    assert hits and server.embedding_requests[-1]["input"] == ["query: comets facts part 1"]
    assert {r.model for r in await rows(engine)} == {"e5", prefixed.model}


async def test_vectors_of_another_dimension_are_skipped_and_counted_then_re_embedded(
    engine: AsyncEngine,
    server: FakeOpenAI,
    make_provider: ProviderFactory,
    make_embedder: EmbedderFactory,
) -> None:
    provider = make_provider(engine, "lcm")
    await provider.append(ALICE, *chat("tides"))
    await embed_backlog(provider, make_embedder())
    server.embedding_dim = 32  # the server now gives another size under the same name
    embedder = make_embedder()
    semantic = SemanticSearch(engine, embedder)
    assert await semantic.search(ALICE.user_id, "default", "tides") == []
    assert semantic.index.skipped_other_dim == 11  # 6 messages, 5 with the next
    assert await embed_backlog(provider, embedder) == 11
    assert {r.dim for r in await rows(engine)} == {32}
    semantic.index.forget()
    assert await semantic.search(ALICE.user_id, "default", "tides facts")


async def test_search_never_returns_another_users_vectors(
    engine: AsyncEngine,
    make_provider: ProviderFactory,
    make_embedder: EmbedderFactory,
) -> None:
    embedder = make_embedder()
    provider = make_provider(engine, "lcm")
    await provider.append(ALICE, Message("user", "my secret password is swordfish"))
    await provider.append(BOB, Message("user", "my secret password is swordfish too"))
    await provider.append(
        Session("tg:alice-other-agent", "other", ALICE.user_id, "telegram"),
        Message("user", "my secret password is swordfish again"),
    )
    await embed_backlog(provider, embedder)
    semantic = SemanticSearch(engine, embedder)
    alice = {h.key for h in await semantic.search(ALICE.user_id, "default", "secret password")}
    async with engine.connect() as conn:
        ids = dict((await conn.execute(sa.text("SELECT m.content, m.id FROM messages m"))).all())
    assert alice == {str(ids["my secret password is swordfish"])}
    bob = {h.key for h in await semantic.search(BOB.user_id, "default", "secret password")}
    assert bob == {str(ids["my secret password is swordfish too"])}


async def test_a_replica_sees_vectors_another_stored_after_its_first_search(
    engine: AsyncEngine,
    make_provider: ProviderFactory,
    make_embedder: EmbedderFactory,
) -> None:
    embedder = make_embedder()
    provider = make_provider(engine, "lcm")
    await provider.append(ALICE, Message("user", "first thing about penguins"))
    await embed_backlog(provider, embedder)
    index = VectorIndex(engine, embedder.model)
    query = (await embedder.embed(["penguins"]))[0]
    assert len(await index.search(ALICE.user_id, "default", query)) == 1
    other_engine = create_engine(engine.url.render_as_string(hide_password=False))
    try:
        other = make_provider(other_engine, "lcm")
        await other.append(ALICE, Message("user", "second thing about penguins"))
        await embed_backlog(other, make_embedder())
    finally:
        await other_engine.dispose()
    hits = await index.search(ALICE.user_id, "default", query)
    assert len(hits) == 3  # the two messages, and the first with the second
    only = await index.search(ALICE.user_id, "default", query, sources={"summary"})
    assert only == []


async def test_a_rewritten_note_is_embedded_again_and_its_old_vector_dropped(
    engine: AsyncEngine,
    make_provider: ProviderFactory,
    make_embedder: EmbedderFactory,
) -> None:
    embedder = make_embedder()
    provider = make_provider(engine, "simple", embedder)
    await provider.note_add(ALICE, "garden", "tomatoes need sun")
    worker = EmbeddingWorker(provider, embedder)
    await worker.run_once()
    [before] = await rows(engine, source="note")
    entry = await provider.note_write(ALICE, "garden", "basil needs water")
    await worker.run_once()
    [after] = await rows(engine, source="note")
    assert after.item_key == note_key(entry) != before.item_key
    index = VectorIndex(engine, embedder.model)
    hits = await index.search(
        ALICE.user_id, "default", (await embedder.embed(["basil"]))[0], sources={"note", "archive"}
    )
    assert [h.key for h in hits] == [note_key(entry)]


async def test_lcm_summaries_are_embedded(
    engine: AsyncEngine,
    make_provider: ProviderFactory,
    make_embedder: EmbedderFactory,
) -> None:
    embedder = make_embedder()
    provider = make_provider(engine, "lcm", embedder)
    await provider.append(ALICE, *chat("deserts", 12))
    await provider.compact(ALICE, CompactionMode.FULL)
    await EmbeddingWorker(provider, embedder).run_once()
    async with engine.connect() as conn:
        ids = set((await conn.execute(sa.text("SELECT id FROM summaries"))).scalars())
    assert ids and {r.item_key for r in await rows(engine, source="summary")} == ids


async def test_the_cache_keeps_under_its_byte_cap(
    engine: AsyncEngine,
    make_provider: ProviderFactory,
    make_embedder: EmbedderFactory,
) -> None:
    embedder = make_embedder()
    provider = make_provider(engine, "lcm")
    await provider.append(ALICE, *chat("owls", 20))
    await provider.append(BOB, *chat("bats", 20))
    await embed_backlog(provider, embedder)
    query = (await embedder.embed(["owls"]))[0]
    roomy = VectorIndex(engine, embedder.model)
    await roomy.search(ALICE.user_id, "default", query)
    one_scope = roomy.nbytes
    small = VectorIndex(engine, embedder.model, max_bytes=one_scope)
    first = await small.search(ALICE.user_id, "default", query)
    await small.search(BOB.user_id, "default", query)
    assert small.nbytes <= one_scope  # Alice's scope was dropped for Bob's
    assert await small.search(ALICE.user_id, "default", query) == first  # and reloads
    tiny = VectorIndex(engine, embedder.model, max_bytes=1)  # over the cap alone
    assert await tiny.search(ALICE.user_id, "default", query) == first
    assert tiny.nbytes == 0
    assert np.isclose(first[0].score, max(h.score for h in first))


async def test_embedding_usage_is_shared_by_user_stored_with_the_vectors_and_guarded(
    engine: AsyncEngine,
    server: FakeOpenAI,
    make_provider: ProviderFactory,
    make_embedder: EmbedderFactory,
) -> None:
    from memory.storage.usage import UsageRecorder, UsageStore, usage_records
    from memory.text.tokens import estimate_tokens

    store = UsageStore(engine)
    embedder = make_embedder(usage=UsageRecorder(store), batch_size=64)
    provider = make_provider(engine, "lcm", embedder)
    await provider.append(ALICE, Message("user", "volcanoes are hot"))
    await provider.append(BOB, Message("user", "glaciers are cold and slow, very slow"))
    allowed = [False]

    async def guard() -> bool:
        return allowed[0]

    worker = EmbeddingWorker(provider, embedder, poll_s=0.01, guard=guard, held_s=0.01)
    worker.start()
    try:
        await worker.next_pass()
        assert worker.held and await rows(engine, source="message") == []  # put off
        assert server.embedding_requests == []
        allowed[0] = True
        await worker.next_pass()
    finally:
        await worker.stop()
    assert len(await rows(engine, source="message")) == 2
    async with engine.connect() as conn:
        usage = (await conn.execute(sa.select(usage_records))).all()
    # One request for both users' messages, its tokens shared by what each sent.
    assert len(server.embedding_requests) == 1
    alice = estimate_tokens("volcanoes are hot")
    bob = estimate_tokens("glaciers are cold and slow, very slow")
    assert sorted((r.user_id, r.kind, r.prompt_tokens) for r in usage) == sorted(
        [(ALICE.user_id, "embedding", alice), (BOB.user_id, "embedding", bob)]
    )
    # A search's query embedding is of kind search, for the user searching.
    await provider.search(ALICE, SearchQuery(text="hot mountains", mode="hybrid"))
    async with engine.connect() as conn:
        kinds = (await conn.execute(sa.select(usage_records.c.kind))).scalars().all()
    assert sorted(kinds) == ["embedding", "embedding", "search"]


async def test_the_index_scores_given_items_besides_the_nearest(
    engine: AsyncEngine,
    make_provider: ProviderFactory,
    make_embedder: EmbedderFactory,
) -> None:
    embedder = make_embedder()
    provider = make_provider(engine, "lcm")
    await provider.append(ALICE, *chat("penguins", 3), Message("user", "tax forms are due"))
    await provider.append(BOB, Message("user", "penguins everywhere"))
    await embed_backlog(provider, embedder)
    stored = await rows(engine, source="message")
    alice = sorted(r.item_key for r in stored if r.user_id == ALICE.user_id)
    bob = [r.item_key for r in stored if r.user_id == BOB.user_id]
    index = VectorIndex(engine, embedder.model)
    query = (await embedder.embed(["penguins"]))[0]
    nearest = await index.search(ALICE.user_id, "default", query, limit=2)
    wanted = [(h.source, h.key) for h in nearest[:1]] + [
        ("message", k) for k in alice if k not in {h.key for h in nearest}
    ]
    asked = [*wanted, ("message", bob[0]), ("message", "999999"), ("summary", alice[0])]
    hits = await index.search(ALICE.user_id, "default", query, limit=2, also=asked)
    # The nearest first, as without `also`; then each asked item of the user's scope not
    # among them, with its own cosine; another user's, unknown keys, other sources: none.
    assert hits[:2] == nearest and all(h.nearest for h in nearest)
    extra = hits[2:]
    assert [(h.source, h.key) for h in extra] == wanted[1:]
    assert not any(h.nearest for h in extra)
    vectors = {r.item_key: np.frombuffer(r.vector, np.float32) for r in stored}
    expected = [float(vectors[h.key] @ query) for h in extra]
    assert np.allclose([h.score for h in extra], expected, atol=1e-5)
    only = await index.search(
        ALICE.user_id, "default", query, limit=2, sources={"summary"}, also=asked
    )
    assert only == []
