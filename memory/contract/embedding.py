"""What a provider exchanges with semantic search (memory/search/semantic/): the embedder
it receives in its `ProviderContext`, the sources it offers for embedding, the hits it
resolves. Here, not beside the implementation, so the contract imports no numpy and no
SQL: the implementations import these.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    import numpy as np

DEFAULT_CACHE_BYTES = 256 * 1024 * 1024  # VectorIndex's cap on cached vectors
# A scope of this many vectors is searched through its on-disk index, not the cache
# (memory/search/semantic/disk.py; bench/vector_scale.py measured where the cache pays).
DEFAULT_DISK_MIN_ROWS = 20_000


@runtime_checkable
class QueryEmbedder(Protocol):
    """What semantic search needs of `ProviderContext.embedder` (the bot passes a
    `memory.search.semantic.client.Embedder`): a query's unit vector, and the model's
    similarity floor for hits found by meaning alone. `model` names the vectors its
    queries are compared with (the Embedder's carries its prefixes: another prefix,
    other vectors)."""

    model: str
    min_similarity: float

    async def embed_query(self, text: str) -> np.ndarray: ...


@dataclass(frozen=True)
class Item:
    """One thing to embed: `key` is unique within its source; `item_id` is its integer
    id where it has one (the worker's position), else None."""

    source: str
    key: str
    user_id: int
    agent_id: str
    text: str
    item_id: int | None = None


@dataclass(frozen=True)
class Batch:
    """Pending items, and where a full scan continues (None: the scan is over)."""

    items: list[Item]
    next_after: int | None


@runtime_checkable
class EmbeddingSource(Protocol):
    """Items of a provider's memory to embed (memory/search/semantic/sources.py has the
    modes of `pending` and core's `MessagesSource`)."""

    name: str

    async def pending(self, model: str, *, limit: int, after: int | None = None) -> Batch:
        """At most `limit` items lacking a row for `model`."""
        ...

    async def counts(self, model: str) -> tuple[int, int]:
        """(items to embed, of those the ones with a row for `model`)."""
        ...


@dataclass(frozen=True)
class VectorHit:
    source: str
    key: str
    score: float
    nearest: bool = True  # False: asked for by key (`also`), not among the nearest
