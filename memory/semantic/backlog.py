"""Embedding what lacks a vector: `embed_backlog` (all of it, now: `mnemo memory embed`)
and `EmbeddingWorker` (new items, in the background, while the bot runs).

The backlog is never kept anywhere but in the data: an item is pending while it has no
row in `embeddings` for the model, so whatever a stop or crash left undone is found
again at the next start, and two processes working at once only repeat some requests
(INSERT ... ON CONFLICT DO NOTHING keeps one row per item).

The worker is a task of its own: a reply never waits for it, and it writes in short
transactions of at most `batch_size` rows. A failure backs off exponentially (one log
line per run of failures); an endpoint without embeddings (`EmbeddingsUnavailable`) is
left alone for `client.RECHECK_S` after the embedder's one log line.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

import numpy as np
from sqlalchemy.ext.asyncio import AsyncEngine

from memory.capabilities import EmbeddingSources, Provider
from memory.semantic.client import RECHECK_S, Embedder, EmbeddingRejected, EmbeddingsUnavailable
from memory.semantic.sources import EmbeddingSource
from memory.semantic.store import Item, delete_other_dims, store_vectors
from memory.tracing import unwrap

log = logging.getLogger(__name__)

Progress = Callable[[int, int], None]
MAX_BATCHES_PER_PASS = 1000  # then the worker sleeps once, so a flood never starves a stop


def sources_of(provider: Provider) -> list[EmbeddingSource]:
    """The provider's embedding sources ([] when it offers none)."""
    inner = unwrap(provider)
    return list(inner.embedding_sources()) if isinstance(inner, EmbeddingSources) else []


def _engine_of(provider: Provider, engine: AsyncEngine | None) -> AsyncEngine:
    found = engine if engine is not None else getattr(unwrap(provider), "engine", None)
    if not isinstance(found, AsyncEngine):
        raise TypeError("embedding needs the provider's database engine (pass engine=)")
    return found


async def embed_items(engine: AsyncEngine, embedder: Embedder, items: list[Item]) -> int:
    """Embed and store `items`; returns the rows this call added. Blank texts, and a
    text the server refuses on its own, get the `dim` 0 row: done, never searched."""
    if not items:
        return 0
    try:
        vectors = await embedder.embed([i.text for i in items])
    except EmbeddingRejected:
        if len(items) > 1:  # find the refused one: the others still get their vectors
            return sum([await embed_items(engine, embedder, [i]) for i in items])
        log.warning(
            "embeddings: the server refused %s %s (%d characters); it is not searched by meaning",
            items[0].source,
            items[0].key,
            len(items[0].text),
        )
        vectors = np.zeros((1, 0), np.float32)
    return await store_vectors(engine, embedder.model, items, vectors)


async def embed_backlog(
    provider: Provider,
    embedder: Embedder,
    *,
    progress: Progress | None = None,
    engine: AsyncEngine | None = None,
) -> int:
    """Embed every item of the provider's sources lacking a vector of `embedder.model`;
    returns how many rows this call stored. Vectors of the model in another dimension
    than the server now gives are deleted first (their items are embedded again).
    Raises EmbeddingsUnavailable (and EmbeddingError) as the embedder does."""
    engine = _engine_of(provider, engine)
    sources = sources_of(provider)
    probe = await embedder.embed(["dimension probe"])
    removed = await delete_other_dims(engine, embedder.model, probe.shape[1])
    if removed:
        log.info(
            "embeddings: %d vector(s) of %s in another dimension deleted, to embed again",
            removed,
            embedder.model,
        )
    total = 0
    for source in sources:
        have, done = await source.counts(embedder.model)
        total += have - done
    stored = seen = 0
    if progress:
        progress(0, total)
    for source in sources:
        after: int | None = 0
        while after is not None:
            batch = await source.pending(embedder.model, limit=embedder.batch_size, after=after)
            stored += await embed_items(engine, embedder, batch.items)
            seen += len(batch.items)
            if progress and batch.items:
                progress(min(seen, total), total)
            after = batch.next_after
    return stored


class EmbeddingWorker:
    """Embeds new items in the background: a pass over every source's pending items,
    then a sleep of `poll_s` (or until `wake()`)."""

    def __init__(
        self,
        provider: Provider,
        embedder: Embedder,
        *,
        engine: AsyncEngine | None = None,
        poll_s: float = 2.0,
        backoff_cap_s: float = 300.0,
        unavailable_s: float = RECHECK_S,
    ) -> None:
        self.engine = _engine_of(provider, engine)
        self.sources = sources_of(provider)
        self.embedder = embedder
        self.poll_s, self.backoff_cap_s, self.unavailable_s = poll_s, backoff_cap_s, unavailable_s
        self.passes = 0  # passes finished without an error
        self.stored = 0  # rows stored since start
        self._wake = asyncio.Event()
        self._passed = asyncio.Condition()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._task is None and self.sources:
            self._task = asyncio.create_task(self._run(), name="mnemo-embeddings")

    def wake(self) -> None:
        self._wake.set()

    async def stop(self) -> None:
        """Cancel the worker (a batch being stored rolls back; it stays pending)."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def next_pass(self) -> None:
        """Wait until a pass that starts after this call has finished (tests, tools)."""
        async with self._passed:
            target = self.passes + 2  # the pass running now may have missed new items
            while self.passes < target:
                self.wake()
                await self._passed.wait()

    async def run_once(self) -> int:
        """One pass: every pending item of every source; returns rows stored."""
        stored = 0
        for source in self.sources:
            for _ in range(MAX_BATCHES_PER_PASS):
                batch = await source.pending(self.embedder.model, limit=self.embedder.batch_size)
                stored += await embed_items(self.engine, self.embedder, batch.items)
                if batch.next_after is None:
                    break
        self.stored += stored
        return stored

    async def _run(self) -> None:
        failures = 0
        while True:
            delay = self.poll_s
            self._wake.clear()  # a wake() during the pass runs another one at once
            try:
                await self.run_once()
            except EmbeddingsUnavailable:
                delay = self.unavailable_s  # the embedder logged it, once
            except Exception as exc:
                failures += 1
                delay = min(self.backoff_cap_s, self.poll_s * 2**failures)
                if failures == 1:
                    log.warning(
                        "embeddings: a pass failed (%s: %s); retrying with backoff",
                        type(exc).__name__,
                        exc,
                    )
            else:
                if failures:
                    log.info("embeddings: passes succeed again after %d failure(s)", failures)
                failures = 0
                async with self._passed:
                    self.passes += 1
                    self._passed.notify_all()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), delay)
