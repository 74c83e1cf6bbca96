"""The lcm provider: Lossless Context Management over SQL (plugins/lcm/README.md).

Every message is kept (the shared history tables); the context window is an ordered list
of items, each a message or a summary; compaction swaps runs of items for summaries that
form a DAG the model can drill back into; nothing is deleted unless someone asks for it
to be forgotten (plugins/lcm/forgetting.py rebuilds the summaries built on it), so
expanding every summary recovers exactly the stored message sequence.

Capabilities: Provider, Compactor, Searcher, Explorer, Reviewer, Forgetter,
SessionManager (shared history), SummaryGraphReader (the DAG for the web console) and, through `SharedStores`, ProfileStore, ConstraintStore, the versioned
stores, the changelog and session snapshots.

Config: `memory.lcm` plus `compaction.keep_tail`, as `plugins.lcm.settings.LcmSettings`.
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from memory.contract.capabilities import ProviderContext
from memory.contract.options import AppendOptions
from memory.contract.settings import settings_of
from memory.contract.types import (
    CompactionMode,
    CompactionResult,
    DescribeResult,
    ExpandResult,
    ListOptions,
    Message,
    SearchQuery,
    SearchResult,
    Session,
    SessionStats,
)
from memory.search.recall import Recall
from memory.search.semantic import semantic_search
from memory.storage.history import HistoryStore, SessionCounts, SessionHistory
from memory.storage.stores import SharedStores
from plugins.lcm import context_items as ci
from plugins.lcm.assembler import assemble_window
from plugins.lcm.compaction import Compaction
from plugins.lcm.explorer import Explorer
from plugins.lcm.forgetting import LcmForgetting
from plugins.lcm.graph import LcmGraph
from plugins.lcm.maintenance import LcmMaintenance
from plugins.lcm.models import summaries
from plugins.lcm.retrieval import INDEXES
from plugins.lcm.review import build_review_context
from plugins.lcm.settings import LcmSettings

log = logging.getLogger(__name__)


class LcmProvider(SharedStores, SessionHistory, LcmMaintenance, LcmForgetting, LcmGraph):
    name = "lcm"

    def __init__(self, ctx: ProviderContext) -> None:
        self.engine = ctx.engine
        self.max_facts = ctx.max_facts
        self.history = HistoryStore(ctx.engine)
        self.settings = settings_of(LcmSettings, self.name, ctx.settings, ctx.config)
        self.summarizer = ctx.summarizer
        self._compaction = Compaction(
            ctx.engine,
            self.history,
            ctx.summarizer,
            self.settings,
            on_applied=self._record_compaction,
        )
        # Semantic search (None when embeddings are off), for the hybrid search.
        self.embedder = ctx.embedder
        self.semantic = semantic_search(ctx)
        self._recall = Recall(ctx.engine, INDEXES, semantic=self.semantic)
        self._embedding_sources: list[Any] | None = None
        self._with_next = ctx.embeddings_with_next
        self._explorer = Explorer(ctx.engine, self.history)
        self._closed = False
        self._adopted: set[str] = set()  # sessions whose uncovered messages were adopted

    # -- EmbeddingSources -----------------------------------------------------------

    def embedding_sources(self) -> list[Any]:
        """Messages (each with the next too, unless `embeddings.with_next` is off) and
        summaries (memory/search/semantic/sources.py)."""
        if self._embedding_sources is None:
            from memory.search.semantic.sources import message_sources
            from plugins.lcm.embedding_source import SummariesSource

            self._embedding_sources = [
                *message_sources(self.engine, self._with_next),
                SummariesSource(self.engine),
            ]
        return self._embedding_sources

    def _forgot(self, conv_id: int, erased_session: str | None = None) -> None:
        """A forget changed the conversation: cached totals are stale; an erased
        conversation's id is gone (memory/storage/forgetting.py)."""
        self._compaction.totals.forget(conv_id)
        if erased_session is not None:
            self.history.forget_cached(erased_session)
            self._adopted.discard(erased_session)

    # -- Provider -------------------------------------------------------------------

    async def bootstrap(self, session: Session) -> None:
        """Create the conversation and, once per process, adopt messages another
        provider stored in it while lcm was not configured (see ci.adopt_uncovered)."""
        if session.id in self._adopted:
            return
        async with self.history.session_transaction(session) as (conn, conv_id):
            adopted = await ci.adopt_uncovered(conn, conv_id)
        if adopted:
            self._compaction.totals.forget(conv_id)
            log.info(
                "lcm adopted %d message(s) of session %s stored by another provider",
                adopted,
                session.id,
            )
        self._adopted.add(session.id)

    async def append(
        self, session: Session, *msgs: Message, options: AppendOptions | None = None
    ) -> None:
        """The messages and their context items, in one transaction under the session's
        lock (concurrent appends of one session are serialised, in call order)."""
        if not msgs:
            await self.history.bootstrap(session)
            return
        async with self.history.session_transaction(session) as (conn, conv_id):
            stored = await self.history.insert_messages(conn, conv_id, msgs, options)
            await ci.append_items(conn, conv_id, stored)
        self._compaction.totals.appended(
            conv_id, stored[0].seq, stored[-1].seq, sum(s.token_count for s in stored)
        )

    async def assemble(self, session: Session, budget: int, fresh_tail: int) -> list[Message]:
        conv_id = await self.history.conversation_id(session.id)
        if conv_id is None:
            return []
        async with self.engine.connect() as conn:
            if conn.dialect.name == "postgresql":
                # One snapshot for every page: a compaction committing between two pages
                # would otherwise show a summary beside items it replaced. (SQLite's read
                # transaction is a snapshot already.)
                conn = await conn.execution_options(isolation_level="REPEATABLE READ")
            return await assemble_window(conn, self.history, conv_id, budget, fresh_tail)

    async def stats(self, session: Session) -> SessionStats:
        count, tokens, oldest, newest = await self.history.message_stats(session)
        conv_id = await self.history.conversation_id(session.id)
        if conv_id is None:
            return SessionStats()
        async with self.engine.connect() as conn:
            summary_count = await conn.scalar(
                sa.select(sa.func.count()).where(summaries.c.conversation_id == conv_id)
            )
            context = await ci.context_tokens(conn, conv_id)
        return SessionStats(
            message_count=count,
            token_count=tokens,
            summary_count=int(summary_count or 0),
            context_tokens=context,
            oldest_at=oldest,
            newest_at=newest,
        )

    async def list_counts(self, opts: ListOptions) -> list[SessionCounts]:
        """`stats`' message and summary counts of every listed session, in one query."""
        return await self.history.list_counts(opts, summaries)

    async def close(self) -> None:
        # The engine belongs to whoever created the context; nothing else is held.
        self._closed = True

    # -- Compactor --------------------------------------------------------------------

    async def needs_compaction(self, session: Session, threshold: int) -> bool:
        return await self._compaction.needs_compaction(session, threshold)

    async def compact(self, session: Session, mode: CompactionMode) -> CompactionResult:
        return await self._compaction.compact(session, mode)

    async def compaction_calls(self, session: Session) -> int:
        return await self._compaction.estimate_calls(session)

    async def _record_compaction(
        self, conn: AsyncConnection, session: Session, result: CompactionResult
    ) -> None:
        """The changelog row of one applied round of a compaction, in the transaction
        that applies it (a full compaction of several rounds writes one per round)."""
        await self.record_compaction(
            conn,
            session,
            f"{result.tokens_before} context tokens",
            f"{result.tokens_after} context tokens: {result.leaf_summaries_created} leaf + "
            f"{result.condensed_summaries_created} condensed summaries, "
            f"{result.messages_compacted} messages compacted",
        )

    # -- Searcher / Explorer ---------------------------------------------------------------

    async def search(self, session: Session, query: SearchQuery) -> list[SearchResult]:
        return await self._recall.search(session, query)

    async def describe(self, summary_id: str, session: Session | None) -> DescribeResult:
        return await self._explorer.describe(summary_id, session)

    async def expand(
        self, summary_id: str, token_cap: int, session: Session | None
    ) -> ExpandResult:
        return await self._explorer.expand(summary_id, token_cap, session)

    # -- Reviewer ---------------------------------------------------------------------------

    async def build_review_context(self, session: Session, since: datetime | None) -> str:
        conv_id = await self.history.conversation_id(session.id)
        if conv_id is None:
            return ""
        async with self.engine.connect() as conn:
            return await build_review_context(conn, self.history, conv_id, since)
