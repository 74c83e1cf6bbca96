"""`Embedder` against the fake `/v1/embeddings`: shapes, batching, what is never sent,
retries, and a server without the endpoint."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from memory.search.semantic.client import EmbeddingError, EmbeddingRejected, EmbeddingsUnavailable
from tests.fakes.openai_server import FakeOpenAI, error
from tests.memory.semantic.conftest import EmbedderFactory


async def test_rows_are_unit_vectors_embedded_in_batches(
    server: FakeOpenAI, make_embedder: EmbedderFactory
) -> None:
    embedder = make_embedder(batch_size=4)
    texts = [f"note {i} about cats" for i in range(9)] + ["stock market prices"]
    vectors = await embedder.embed(texts)
    assert vectors.shape == (10, 64) and vectors.dtype == np.float32
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert [len(r["input"]) for r in server.embedding_requests] == [4, 4, 2]
    assert embedder.dim == 64
    # Texts sharing words are closer than texts sharing none.
    assert vectors[0] @ vectors[1] > vectors[0] @ vectors[9]


async def test_blank_texts_are_never_sent_and_long_ones_are_cut(
    server: FakeOpenAI, make_embedder: EmbedderFactory
) -> None:
    embedder = make_embedder(max_chars=100)
    vectors = await embedder.embed(["", "  \n ", "hello world", "word " * 500])
    [request] = server.embedding_requests
    assert request["input"] == ["hello world", ("word " * 500)[:100]]
    assert not vectors[0].any() and not vectors[1].any()
    assert np.isclose(np.linalg.norm(vectors[2]), 1.0)
    assert (await embedder.embed(["   "])).shape == (1, 64)  # nothing sent, no error
    assert len(server.embedding_requests) == 1


async def test_500_and_429_are_retried_honouring_retry_after(
    server: FakeOpenAI, make_embedder: EmbedderFactory
) -> None:
    embedder = make_embedder(max_retries=2)
    server.push_embedding(error(500), error(429, retry_after=0))
    vectors = await embedder.embed(["hello"])
    assert vectors.shape == (1, 64) and len(server.embedding_requests) == 3
    server.push_embedding(error(503), error(503), error(503))
    with pytest.raises(EmbeddingError) as failed:
        await embedder.embed(["hello"])
    assert failed.value.retryable and not isinstance(failed.value, EmbeddingsUnavailable)
    assert len(server.embedding_requests) == 6


async def test_a_server_without_the_endpoint_is_logged_once_then_skipped(
    server: FakeOpenAI, make_embedder: EmbedderFactory, caplog: pytest.LogCaptureFixture
) -> None:
    embedder = make_embedder()
    server.embeddings_status = 404
    with caplog.at_level(logging.INFO, logger="memory.search.semantic"):
        for _ in range(3):
            with pytest.raises(EmbeddingsUnavailable):
                await embedder.embed(["hello"])
            with pytest.raises(EmbeddingsUnavailable):
                await embedder.embed_query("hello")
    assert len(server.embedding_requests) == 1  # later calls fail fast, no request
    lines = [r for r in caplog.records if r.name.startswith("memory.search.semantic")]
    assert len(lines) == 1 and "HTTP 404" in lines[0].getMessage()
    assert "test-key" not in caplog.text


async def test_a_refused_input_is_told_apart_from_a_missing_model(
    server: FakeOpenAI, make_embedder: EmbedderFactory
) -> None:
    embedder = make_embedder()
    server.rejects = lambda text: "enormous" in text
    with pytest.raises(EmbeddingRejected):
        await embedder.embed(["an enormous text"])
    assert embedder.unavailable is None
    assert (await embedder.embed(["small"])).shape == (1, 64)
    server.embeddings_status = 400  # every request refused, the probe too: no such model
    with pytest.raises(EmbeddingsUnavailable):
        await embedder.embed(["small"])
    assert embedder.unavailable is not None


async def test_prefixes_go_before_every_query_and_every_stored_text(
    server: FakeOpenAI, make_embedder: EmbedderFactory
) -> None:
    embedder = make_embedder(
        "e5-small", max_chars=20, query_prefix="query: ", document_prefix="passage: "
    )
    await embedder.embed(["", "the lighthouse keeper retired in spring"])
    await embedder.embed_query("who retired?")
    documents, query = server.embedding_requests
    # The cut comes first: a long text keeps its prefix.
    assert documents["input"] == ["passage: the lighthouse keepe"]
    assert query["input"] == ["query: who retired?"]
    assert {documents["model"], query["model"]} == {"e5-small"}  # the server's name
    # Vectors are stored under a name of their own: another prefix, other vectors.
    plain = make_embedder("e5-small")
    other = make_embedder("e5-small", query_prefix="query: ", document_prefix="")
    names = {plain.model, other.model, embedder.model}
    assert plain.model == "e5-small" and len(names) == 3
    assert all(n.startswith("e5-small") and len(n) <= 255 for n in names)
    long = make_embedder("e5-small", query_prefix="q" * 300)
    assert (
        len(long.model) <= 255 and long.model != make_embedder("e5-small", query_prefix="q").model
    )
