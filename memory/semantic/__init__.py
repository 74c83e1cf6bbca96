"""Semantic search: embeddings of stored messages, summaries and notes, computed in the
background through an OpenAI-compatible `/v1/embeddings` and searched in the process.

- `client.Embedder`: texts -> unit vectors (batched, retried, `EmbeddingsUnavailable`).
- `store`: the `embeddings` table; `sources`: what is embedded (`EmbeddingSource`).
- `index.VectorIndex`: cached per-(user, agent) matrices, exact cosine search.
- `backlog`: `embed_backlog` (`mnemo memory embed`) and the bot's `EmbeddingWorker`.
- `search.SemanticSearch`: a query's vector hits, never failing a search.

Imported lazily by the bot and providers: numpy loads only when embeddings are on.
"""

DEFAULT_CACHE_BYTES = 256 * 1024 * 1024  # VectorIndex's cap on cached vectors


def semantic_search(ctx):  # type: ignore[no-untyped-def]
    """A provider's `SemanticSearch` from its `ProviderContext`, or None when embeddings
    are off (then numpy and the client are never imported)."""
    if ctx.embedder is None:
        return None
    from memory.semantic.search import SemanticSearch

    return SemanticSearch(ctx.engine, ctx.embedder, max_bytes=ctx.vector_cache_bytes)
