"""The application built in one place: engine, migrations, summarizer, provider, LLM
client, conversations and the embeddings worker (built, not started), from `Settings`. The
application root (`bot.app.root`) starts from `build_services`, runs the background work on
its scheduler and ends with `Services.close()`; tools and tests may use them directly."""

from __future__ import annotations

import logging
from collections.abc import Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine

from bot.channels.registry import registered as registered_channels
from bot.config.settings import Settings
from bot.conversation.budgets import Budgets
from bot.conversation.service import Conversations
from bot.model.client import LLMClient
from bot.runtime.metrics import instrument_engine, record_usage_row, trace_hook
from bot.runtime.scheduler import Scheduler
from memory.contract.capabilities import Provider, ProviderContext, Summarizer
from memory.contract.registry import create_provider_async
from memory.contract.tracing import with_tracing
from memory.storage.db import create_engine, migrate
from memory.storage.session_lock import SessionLocks
from memory.storage.usage import UsageRecorder, UsageStore

log = logging.getLogger(__name__)
trace_log = logging.getLogger("mnemo.trace")


@dataclass
class Services:
    settings: Settings
    engine: AsyncEngine
    provider: Provider
    llm: LLMClient
    conversations: Conversations
    locks: SessionLocks
    embedder: Any = None  # memory.search.semantic.client.Embedder when embeddings.model is set
    embedding_worker: Any = None  # memory.search.semantic.backlog.EmbeddingWorker, not started
    usage: UsageRecorder | None = None  # where every model call's tokens are recorded
    budgets: Budgets | None = None  # token limits and the background spend guard
    followups: Any = None  # bot.followups.delivery.FollowupDelivery; channels add senders

    async def close(self) -> None:
        """Conversations first (its background compactions still use the provider), then the
        turn locks, the provider, the LLM client and the engine; each one even if an
        earlier one failed (the first error is raised at the end). Safe to call twice."""
        async with AsyncExitStack() as stack:  # callbacks run last pushed first
            stack.push_async_callback(self.engine.dispose)
            stack.push_async_callback(self.llm.close)
            if self.embedder is not None:
                stack.push_async_callback(self.embedder.close)
            stack.push_async_callback(self.provider.close)
            stack.push_async_callback(self.locks.close)
            stack.push_async_callback(self.conversations.close)
            if self.embedding_worker is not None:
                stack.push_async_callback(self.embedding_worker.stop)


def _trace(event: Any) -> None:
    trace_hook(event)  # Prometheus: memory operations by provider, operation, outcome
    trace_log.debug(
        "%s.%s %.1f ms in=%d out=%d%s",
        event.provider,
        event.operation,
        event.duration_s * 1000,
        event.arg_size,
        event.result_size,
        f" error={event.error}" if event.error else "",
    )


def _warn_on_sliding_window(settings: Settings) -> None:
    """A context allowed to grow past the budget before it is compacted is cut by the
    budget instead, its start moving every turn: the model server's prompt cache never
    hits (docs/CHAT.md "Compaction and caching")."""
    threshold, budget = settings.compaction.max_tokens, settings.memory.budget_tokens
    if threshold >= 0 and threshold >= budget:
        log.warning(
            "compaction.max_tokens (%d) is not below memory.budget_tokens (%d): the budget "
            "will cut the context's start every turn, so the model server can cache none of "
            "it; set max_tokens about a quarter below the budget",
            threshold,
            budget,
        )


def build_summarizer(llm: LLMClient, settings: Settings) -> Summarizer:
    from memory.compaction.summarizer import LLMSummarizer

    model = settings.llm.summary_model or settings.llm.model

    async def generate(prompt: str) -> str:
        return await llm.generate(prompt, model=model)

    return LLMSummarizer(generate)


def build_embedder(settings: Settings, usage: UsageRecorder | None = None) -> Any:
    """The `Embedder` of `embeddings` (server and key default to the `llm` ones), or
    None when `embeddings.model` is empty."""
    cfg = settings.embeddings
    if not cfg.model:
        return None
    from memory.search.semantic.client import Embedder

    query_prefix, document_prefix = cfg.prefix_pair()
    return Embedder(
        cfg.model,
        base_url=cfg.base_url or settings.llm.base_url,
        api_key=(cfg.api_key or settings.llm.api_key).get_secret_value(),
        batch_size=cfg.batch_size,
        timeout_s=settings.llm.timeout_s,
        max_retries=settings.llm.max_retries,
        max_chars=cfg.max_chars,
        usage=usage,
        min_similarity=cfg.min_similarity,
        query_prefix=query_prefix,
        document_prefix=document_prefix,
    )


def register_erasure_hooks() -> None:
    """The rows outside memory's tables an erasure must reach (memory/storage/forgetting.py):
    every registered channel's (its rows outlive a change of `channels:`), reflect's, the
    chat imports', the recorded names and the forget requests'."""
    from bot.chat_import.ledger import register as chat_imports
    from bot.conversation.people import register as people
    from bot.jobs.reflect.state import register_erasure as reflect
    from bot.mcp.access import register as mcp_access
    from memory.followups.store import register_erasure as followups
    from memory.storage.forget_requests import register as forget_requests

    for channel in registered_channels():
        channel.register_erasure()
    reflect()
    chat_imports()
    people()
    mcp_access()
    forget_requests()
    followups()


def admin_ids(settings: Settings) -> set[int]:
    """The users every registered channel makes operators (exempt from token limits)."""
    return {user for channel in registered_channels() for user in channel.admin_ids(settings)}


# A background job: started on the root's scheduler with the running services.
Job = Callable[[Scheduler, "Services"], object]


def background_jobs(*, reflect: bool = True) -> list[Job]:
    """The jobs the root starts (reflect schedules itself only when `reflect.enabled`)."""
    from bot.followups.delivery import start_followups
    from bot.jobs.retention import start_retention

    jobs: list[Job] = []
    if reflect:
        from bot.jobs.reflect.job import start_reflect

        jobs.append(start_reflect)
    jobs.append(start_retention)
    jobs.append(start_followups)
    return jobs


async def build_services(
    settings: Settings, *, llm: LLMClient | None = None, summarizer: Summarizer | None = None
) -> Services:
    """Build everything from `settings`. `llm` and `summarizer` may be injected (tests,
    benchmarks); by default they come from `settings.llm`. The services own what they
    are given (`Services.close` closes an injected `llm` too); if building fails, all
    that was made or given so far is closed before the error propagates."""
    register_erasure_hooks()
    if llm is None:  # a real model server (tests inject their clients)
        from bot.model.server_context import fit_to_server

        await fit_to_server(settings)
    engine = create_engine(settings.database.url)
    async with AsyncExitStack() as undo:  # on failure: close what exists, newest first
        undo.push_async_callback(engine.dispose)
        instrument_engine(engine)  # count database errors for /metrics
        await migrate(engine)
        store = UsageStore(engine)
        usage = UsageRecorder(store, observers=[record_usage_row])
        budgets = Budgets(
            store,
            settings.limits,
            exempt=admin_ids(settings),
            prices=settings.llm.price_table(),
        )
        llm = llm or LLMClient(settings.llm, usage=usage)
        if isinstance(llm, LLMClient):
            llm.usage = usage  # an injected client records into this database too
        undo.push_async_callback(llm.close)
        embedder = build_embedder(settings, usage)
        if embedder is not None:
            undo.push_async_callback(embedder.close)
        ctx = ProviderContext(
            engine=engine,
            summarizer=summarizer or build_summarizer(llm, settings),
            agent_id=settings.agent.id,
            data_dir=Path(settings.data_dir),
            config=settings.provider_config(),
            embedder=embedder,
            vector_cache_bytes=settings.embeddings.cache_mb * 1024 * 1024,
            vector_disk_min_rows=settings.embeddings.disk_min_vectors,
            embeddings_with_next=settings.embeddings.with_next,
            max_facts=settings.memory.max_facts,
        )
        provider = await create_provider_async(settings.memory.provider, ctx)
        undo.push_async_callback(provider.close)
        worker = _embedding_worker(provider, embedder, engine, budgets)
        provider = with_tracing(provider, _trace)
        locks = SessionLocks(engine)
        undo.push_async_callback(locks.close)
        conversations = Conversations(provider, llm, settings, locks=locks, budgets=budgets)
        undo.pop_all()  # built: from now on Services.close closes them
    from bot.app.database_file import describe

    log.info(
        "memory provider %s, database %s", settings.memory.provider, describe(settings.database.url)
    )
    _warn_on_sliding_window(settings)
    return Services(
        settings=settings,
        engine=engine,
        provider=provider,
        llm=llm,
        conversations=conversations,
        locks=locks,
        embedder=embedder,
        embedding_worker=worker,
        usage=usage,
        budgets=budgets,
        followups=_followups(settings, engine, llm, budgets),
    )


def _followups(settings: Settings, engine: AsyncEngine, llm: Any, budgets: Budgets) -> Any:
    """The follow-up delivery of this process; each channel adds its sender."""
    from bot.followups.delivery import FollowupDelivery
    from bot.runtime.metrics import count_followup
    from memory.followups.store import observe

    observe(count_followup)
    return FollowupDelivery(engine, settings.followups, llm=llm, budgets=budgets)


def _embedding_worker(
    provider: Provider, embedder: Any, engine: AsyncEngine, budgets: Budgets | None = None
) -> Any:
    """What embeds new messages, summaries and notes in the background (never on the
    reply path), for the root to start; None when embeddings are off or the provider has
    nothing to embed."""
    if embedder is None:
        return None
    from memory.search.semantic.backlog import EmbeddingWorker, sources_of

    if not sources_of(provider):
        log.warning(
            "embeddings.model is set but the %s provider offers nothing to embed",
            getattr(provider, "name", "?"),
        )
        return None
    log.info("embeddings on: model %s, embedded in the background", embedder.model)
    guard = None
    if budgets is not None:

        async def guard() -> bool:
            return await budgets.allow_background("embedding", None)

    return EmbeddingWorker(provider, embedder, engine=engine, guard=guard)
