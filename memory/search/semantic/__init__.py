"""Semantic search: embeddings of stored messages, summaries and notes, computed in the
background through an OpenAI-compatible `/v1/embeddings` and searched in the process.

- `client.Embedder`: texts -> unit vectors (batched, retried, `EmbeddingsUnavailable`).
- `store`: the `embeddings` table; `sources`: what is embedded (the `EmbeddingSource`
  protocol and the types it exchanges are in memory/contract/embedding.py).
- `index.VectorIndex`: cached per-(user, agent) matrices, exact cosine search; large
  scopes through `disk.DiskIndex`, an on-disk int8 index scanned by usearch
  (`segments`: its files).
- `backlog`: `embed_backlog` (`mnemo memory embed`) and the bot's `EmbeddingWorker`.
- `search.SemanticSearch`: a query's vector hits, never failing a search.

Imported lazily by the bot and providers: numpy loads only when embeddings are on.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

# The constants live in modules below this package, so that its submodules import them
# from there and never the package itself (which imports them back).
from memory.contract.embedding import DEFAULT_CACHE_BYTES as DEFAULT_CACHE_BYTES
from memory.search.semantic.defaults import DEFAULT_MIN_SIMILARITY as DEFAULT_MIN_SIMILARITY
from memory.search.semantic.defaults import PREFIX_PRESETS as PREFIX_PRESETS

if TYPE_CHECKING:
    from memory.contract.capabilities import ProviderContext
    from memory.search.semantic.search import SemanticSearch


def semantic_search(ctx: ProviderContext) -> SemanticSearch | None:
    """A provider's `SemanticSearch` from its `ProviderContext`, or None when embeddings
    are off (then numpy and the client are never imported)."""
    if ctx.embedder is None:
        return None
    from memory.search.semantic.search import SemanticSearch

    return SemanticSearch(
        ctx.engine,
        ctx.embedder,
        max_bytes=ctx.vector_cache_bytes,
        index_dir=ctx.data_dir / "vectors",
        disk_min_rows=ctx.vector_disk_min_rows,
        pairs=ctx.embeddings_with_next,
    )
