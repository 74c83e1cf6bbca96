"""The application built in one place: engine, migrations, summarizer, provider, LLM
client and pool, from `Settings`. Every channel (Telegram, the terminal, tests) starts
from `build_services` and ends with `Services.close()`."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine

from bot.config import Settings
from bot.llm import LLMClient
from bot.metrics import instrument_engine, trace_hook
from bot.pool import Pool
from memory.capabilities import ProviderContext, Summarizer
from memory.db import create_engine, migrate
from memory.registry import create_provider
from memory.session_lock import SessionLocks
from memory.tracing import with_tracing

log = logging.getLogger(__name__)
trace_log = logging.getLogger("mnemo.trace")


@dataclass
class Services:
    settings: Settings
    engine: AsyncEngine
    provider: Any
    llm: LLMClient
    pool: Pool
    locks: SessionLocks

    async def close(self) -> None:
        """Pool first (its background compactions still use the provider), then the
        provider, the LLM client and the engine. Safe to call twice."""
        await self.pool.close()
        await self.locks.close()
        await self.provider.close()
        await self.llm.close()
        await self.engine.dispose()


def _trace(event: Any) -> None:
    trace_hook(event)  # Prometheus: memory operations by provider, operation, outcome
    trace_log.debug("%s.%s %.1f ms in=%d out=%d%s", event.provider, event.operation,
                    event.duration_s * 1000, event.arg_size, event.result_size,
                    f" error={event.error}" if event.error else "")


def build_summarizer(llm: LLMClient, settings: Settings) -> Summarizer:
    from memory.summarizer import LLMSummarizer

    model = settings.llm.summary_model or settings.llm.model

    async def generate(prompt: str) -> str:
        return await llm.generate(prompt, model=model)

    return LLMSummarizer(generate)


async def build_services(settings: Settings, *, llm: LLMClient | None = None,
                         summarizer: Summarizer | None = None) -> Services:
    """Build everything from `settings`. `llm` and `summarizer` may be injected (tests,
    benchmarks); by default they come from `settings.llm`."""
    engine = create_engine(settings.database.url)
    instrument_engine(engine)  # count database errors for /metrics
    try:
        await migrate(engine)
        llm = llm or LLMClient(settings.llm)
        ctx = ProviderContext(
            engine=engine,
            summarizer=summarizer or build_summarizer(llm, settings),
            agent_id=settings.agent.id,
            data_dir=Path(settings.data_dir),
            config=settings.provider_config(),
        )
        provider = create_provider(settings.memory.provider, ctx)
        provider = with_tracing(provider, _trace)
        locks = SessionLocks(engine)
        pool = Pool(provider, llm, settings, locks=locks)
    except BaseException:
        await engine.dispose()
        raise
    log.info("memory provider %s on %s", settings.memory.provider, engine.dialect.name)
    return Services(settings=settings, engine=engine, provider=provider, llm=llm, pool=pool,
                    locks=locks)
