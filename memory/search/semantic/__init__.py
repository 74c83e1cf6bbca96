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

# The cosine below which an item found by meaning alone (no word of the question in it) is
# no match: without a floor the nearest list is always full, so a question nothing
# answers (a word just forgotten) still listed dozens of unrelated "matches". Word hits
# are never dropped, and a dropped item still counts in the meaning scale, so every other
# item's fused score is unchanged (memory/search/recall.py). 0.2 is low for the models people use:
# unrelated texts score about 0 to 0.2 with all-MiniLM-L6-v2 (bench/recall.py's model)
# and OpenAI's text-embedding-3 models, related ones 0.3 and up. Models whose cosines
# all sit high (ada-002, some GGUF models) need more: `embeddings.min_similarity`.
DEFAULT_MIN_SIMILARITY = 0.2


def semantic_search(ctx):  # type: ignore[no-untyped-def]
    """A provider's `SemanticSearch` from its `ProviderContext`, or None when embeddings
    are off (then numpy and the client are never imported)."""
    if ctx.embedder is None:
        return None
    from memory.search.semantic.search import SemanticSearch

    return SemanticSearch(ctx.engine, ctx.embedder, max_bytes=ctx.vector_cache_bytes)
