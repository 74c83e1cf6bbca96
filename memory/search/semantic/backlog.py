"""Embedding what lacks a vector: `embed_backlog` (all of it, now: `mnemo memory embed`)
and `EmbeddingWorker` (new items, in the background, while the bot runs).

The backlog is never kept anywhere but in the data: an item is pending while it has no
row in `embeddings` for the model, so whatever a stop or crash left undone is found
again at the next start, and two processes working at once only repeat some requests
(INSERT ... ON CONFLICT DO NOTHING keeps one row per item).

The worker is a job of the application's scheduler (or of its own): a reply never waits
for it, and it writes in short transactions of at most `batch_size` rows. A failure backs off exponentially (one log
line per run of failures); an endpoint without embeddings (`EmbeddingsUnavailable`) is
left alone for `client.RECHECK_S` after the embedder's one log line.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
from apscheduler.jobstores.base import JobLookupError
from sqlalchemy.ext.asyncio import AsyncEngine

from memory.contract.capabilities import EmbeddingSources, Provider
from memory.contract.embedding import EmbeddingSource, Item
from memory.contract.tracing import unwrap
from memory.search.semantic.client import (
    RECHECK_S,
    Embedder,
    EmbeddingRejected,
    EmbeddingsUnavailable,
)
from memory.search.semantic.store import delete_other_dims, store_vectors

log = logging.getLogger(__name__)

Progress = Callable[[int, int], None]
JOB_NAME = "embeddings"  # the worker's job on the application's scheduler (bot.runtime.scheduler)
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
    # The batch's usage is stored with its vectors (store_vectors writes the ledger).
    async with embedder.usage.collecting(committed_on_success=True):
        return await _embed_and_store(engine, embedder, items)


async def _embed_and_store(engine: AsyncEngine, embedder: Embedder, items: list[Item]) -> int:
    try:
        vectors = await embedder.embed(
            [i.text for i in items], scopes=[(i.user_id, i.agent_id) for i in items]
        )
    except EmbeddingRejected:
        if len(items) > 1:  # find the refused one: the others still get their vectors
            return sum([await _embed_and_store(engine, embedder, [i]) for i in items])
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
    """Embeds new items in the background, as a job of an APScheduler scheduler: a pass
    over every source's pending items, the next one `poll_s` later (at once after
    `wake()`); a failing pass puts the next one off with exponential backoff."""

    def __init__(
        self,
        provider: Provider,
        embedder: Embedder,
        *,
        engine: AsyncEngine | None = None,
        poll_s: float = 2.0,
        backoff_cap_s: float = 300.0,
        unavailable_s: float = RECHECK_S,
        guard: Callable[[], Awaitable[bool]] | None = None,
        held_s: float = 60.0,
    ) -> None:
        """`guard`: asked before each batch; False (a spend cap reached) ends the pass,
        and the next one comes `held_s` later."""
        self.engine = _engine_of(provider, engine)
        self.sources = sources_of(provider)
        self.embedder = embedder
        self.poll_s, self.backoff_cap_s, self.unavailable_s = poll_s, backoff_cap_s, unavailable_s
        self.passes = 0  # passes finished without an error
        self.stored = 0  # rows stored since start
        self._failures = 0  # passes failed in a row
        self._passed = asyncio.Condition()
        self._job: Any = None  # the scheduler's job while started
        self._own: Any = None  # the scheduler of our own, when started without one
        self._pass: asyncio.Task[Any] | None = None  # the run in flight
        self._woken = False
        self.guard, self.held_s = guard, held_s
        self.held = False  # the last pass was cut short by the guard

    @property
    def running(self) -> bool:
        return self._job is not None

    def start(self, scheduler: Any = None) -> None:
        """Poll as the job `JOB_NAME` of `scheduler` (the application's, started and
        stopped by its owner) or, without one, of a scheduler of the worker's own."""
        if self._job is not None or not self.sources:
            return
        if scheduler is None:
            from apscheduler.schedulers.asyncio import AsyncIOScheduler

            scheduler = self._own = AsyncIOScheduler(timezone=UTC)
            scheduler.start()
        # Each pass plans the next one as it ends (`_run`): never two at once, and a slow
        # pass is not followed by the runs it overlapped.
        self._job = scheduler.add_job(
            self._run,
            "interval",
            seconds=self.poll_s,
            id=JOB_NAME,
            name=JOB_NAME,
            next_run_time=datetime.now(UTC),
            max_instances=1,
            coalesce=True,
            misfire_grace_time=None,
        )

    def wake(self) -> None:
        """Run a pass now (or, when one is running, right after it)."""
        self._woken = True
        if self._job is not None and self._pass is None:
            self._job.modify(next_run_time=datetime.now(UTC))

    async def stop(self) -> None:
        """Stop polling; a pass in flight is cancelled (a batch being stored rolls back;
        it stays pending). Safe to call twice."""
        job, self._job = self._job, None
        if job is not None:
            with contextlib.suppress(JobLookupError):  # its scheduler was stopped first
                job.remove()
        task = self._pass
        if task is not None and task is not asyncio.current_task():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        own, self._own = self._own, None
        if own is not None:
            own.shutdown(wait=False)

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
        self.held = False
        for source in self.sources:
            for _ in range(MAX_BATCHES_PER_PASS):
                batch = await source.pending(self.embedder.model, limit=self.embedder.batch_size)
                if batch.items and self.guard is not None and not await self.guard():
                    self.held = True  # the items stay pending
                    self.stored += stored
                    return stored
                stored += await embed_items(self.engine, self.embedder, batch.items)
                if batch.next_after is None:
                    break
        self.stored += stored
        return stored

    async def _run(self) -> None:
        """The job: one pass, then the time of the next."""
        job = self._job
        if job is None:
            return
        job.pause()  # until this pass is over
        self._pass, self._woken = asyncio.current_task(), False
        try:
            delay = await self._one_pass()
        except asyncio.CancelledError:
            if self._job is None:  # stopped: the end of the job, not its failure
                return
            raise
        finally:
            self._pass = None
        if self._job is job:
            job.modify(
                next_run_time=datetime.now(UTC) + timedelta(seconds=0 if self._woken else delay)
            )

    async def _one_pass(self) -> float:
        """A pass and its bookkeeping; returns the seconds to wait before the next."""
        try:
            await self.run_once()
        except EmbeddingsUnavailable:
            return self.unavailable_s  # the embedder logged it, once
        except Exception as exc:
            self._failures += 1
            if self._failures == 1:
                log.warning(
                    "embeddings: a pass failed (%s: %s); retrying with backoff",
                    type(exc).__name__,
                    exc,
                )
            return float(min(self.backoff_cap_s, self.poll_s * 2.0**self._failures))
        if self._failures:
            log.info("embeddings: passes succeed again after %d failure(s)", self._failures)
        self._failures = 0
        async with self._passed:
            self.passes += 1
            self._passed.notify_all()
        if self.held:
            return self.held_s
        return self.poll_s
