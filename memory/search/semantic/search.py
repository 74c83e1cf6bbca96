"""`SemanticSearch`: a query's nearest stored vectors within the user's scope, for a
provider's search to merge with its lexical hits. It never fails a search over the
embeddings server: an unavailable endpoint, a timeout or an error gives no hits, and the
lexical results stand alone."""

from __future__ import annotations

import logging
import time
from collections.abc import Collection, Mapping
from pathlib import Path

import numpy as np
from sqlalchemy.ext.asyncio import AsyncEngine

from memory.contract.embedding import (
    DEFAULT_CACHE_BYTES,
    DEFAULT_DISK_MIN_ROWS,
    QueryEmbedder,
    VectorHit,
)
from memory.search.semantic.client import EmbeddingError, EmbeddingsUnavailable
from memory.search.semantic.index import VectorIndex

log = logging.getLogger(__name__)

WARN_EVERY_S = 300.0  # a failing server is named at most this often, not per search


class SemanticSearch:
    def __init__(
        self,
        engine: AsyncEngine,
        embedder: QueryEmbedder,
        *,
        max_bytes: int = DEFAULT_CACHE_BYTES,
        index_dir: Path | None = None,
        disk_min_rows: int = DEFAULT_DISK_MIN_ROWS,
        pairs: bool = False,
    ) -> None:
        """`pairs`: messages have a second vector, with the next message
        (memory/search/pairs.py), which hybrid search weighs in."""
        self.embedder = embedder
        self.pairs = pairs
        self.index = VectorIndex(
            engine,
            embedder.model,
            max_bytes=max_bytes,
            index_dir=index_dir,
            disk_min_rows=disk_min_rows,
        )
        self._warned_at: float | None = None

    @property
    def min_similarity(self) -> float:
        """The cosine a hit found by meaning alone needs to be a match (the model's)."""
        return self.embedder.min_similarity

    async def search(
        self,
        user_id: int,
        agent_id: str,
        text: str,
        *,
        sources: set[str] | None = None,
        limit: int = 20,
        also: Collection[tuple[str, str]] = (),
        partners: Mapping[str, str] | None = None,
    ) -> list[VectorHit]:
        """The `limit` stored items of (user, agent) nearest to `text` in meaning, best
        first, then the similarity of those (source, key) items of `also` that have a
        vector (`VectorIndex.search`); [] when the text is blank or the query cannot be
        embedded."""
        query = await self.query_vector(text)
        if query is None:
            return []
        return await self.index.search(
            user_id, agent_id, query, sources=sources, limit=limit, also=also, partners=partners
        )

    async def query_vector(self, text: str) -> np.ndarray | None:
        """`text`'s vector, or None when it is blank or cannot be embedded (a failing
        server is named in the log at most every WARN_EVERY_S). Hybrid search asks for
        it first and searches the words meanwhile: the embedding is the slow part."""
        if not text.strip():
            return None
        try:
            return await self.embedder.embed_query(text)
        except EmbeddingsUnavailable:
            return None  # the embedder said so once
        except EmbeddingError as exc:
            now = time.monotonic()
            if self._warned_at is None or now - self._warned_at >= WARN_EVERY_S:
                self._warned_at = now
                log.warning("semantic search skipped: %s (lexical results only)", exc.reason)
            return None
