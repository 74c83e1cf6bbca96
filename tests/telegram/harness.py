"""The real bot, in-process, against the fake Bot API and the fake OpenAI server.

    async with running_bot(tg, llm, tmp_path, allowed_ids=[42]) as bot:
        tg.private(42).send("hi")
        await tg.wait_for_message(42, contains="echo: hi")
        await bot.provider.stats(...)          # what was stored

Memory: the conformance kit's reference provider (history in RAM, shared stores in a
throwaway SQLite database), or an installed provider by name (`provider="lcm"`), reached
through the same Conversations the bot uses in production.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine
from telegram.ext import Application

from bot.channels.telegram.channel import build_application, running
from bot.config.settings import Settings
from bot.conversation.service import Conversations
from bot.model.client import LLMClient
from memory.compaction.summarizer import StaticSummarizer
from memory.contract.capabilities import ProviderContext, Summarizer
from memory.contract.registry import create_provider
from memory.storage.db import create_engine
from memory.storage.history import messages, origins
from memory.testing.databases import temp_engine
from memory.testing.reference import create as create_reference
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.telegram_server import FakeTelegram
from tests.waits import eventually


@dataclass
class RunningBot:
    app: Application
    conversations: Conversations
    provider: Any
    settings: Settings


def make_settings(
    tg: FakeTelegram,
    llm: FakeOpenAI,
    tmp_path: Path,
    *,
    transcription_model: str = "",
    vision: bool = False,
    sections: dict[str, Any] | None = None,
    **telegram: Any,
) -> Settings:
    """`sections`: more top-level settings (`{"mcp": {...}}`)."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    return Settings.model_validate(
        {
            **(sections or {}),
            "data_dir": str(tmp_path / "data"),
            "llm": {
                "base_url": llm.base_url,
                "api_key": "test-key",
                "timeout_s": 5,
                "max_retries": 1,
                "transcription_model": transcription_model,
                "vision": vision,
            },
            "telegram": {
                "token": tg.token,
                "base_url": tg.base_url,
                "concurrent_updates": 16,
                **telegram,
            },
            "compaction": {"max_tokens": -1, "keep_tail": 2},
            # The simple provider's notes live outside the database: each bot its own
            # directory, or parallel tests see each other's notes.
            "memory": {"fresh_tail": 4, "simple": {"store_dir": str(tmp_path / "notes")}},
        }
    )


@asynccontextmanager
async def running_bot(
    tg: FakeTelegram,
    llm: FakeOpenAI,
    tmp_path: Path,
    *,
    provider: str = "reference",
    transcription_model: str = "",
    vision: bool = False,
    summarizer: Summarizer | None = None,
    db: str = "sqlite",
    url: str | None = None,
    embedder: Any = None,
    sections: dict[str, Any] | None = None,
    **telegram: Any,
) -> AsyncIterator[RunningBot]:
    """`url`: a migrated database another bot uses too (a second replica); otherwise a
    throwaway one of kind `db`. `embedder`: the provider's, for semantic search (a test
    runs its EmbeddingWorker passes itself)."""
    settings = make_settings(
        tg,
        llm,
        tmp_path,
        transcription_model=transcription_model,
        vision=vision,
        sections=sections,
        **telegram,
    )
    async with temp_engine(db, tmp_path) if url is None else _engine_on(url) as engine:
        ctx = ProviderContext(
            engine=engine,
            summarizer=summarizer or StaticSummarizer("a short summary"),
            agent_id=settings.agent.id,
            data_dir=Path(settings.data_dir),
            config={"keep_tail": settings.compaction.keep_tail},
            embedder=embedder,
        )
        if provider == "reference":
            memory = create_reference(ctx)
        else:
            ctx.config = {**settings.memory.section(provider), **ctx.config}
            memory = create_provider(provider, ctx)
        client = LLMClient(settings.llm, backoff_s=0.01)
        pool = Conversations(memory, client, settings)
        app = build_application(settings, pool)
        try:
            async with running(app, settings, poll_timeout=1):
                yield RunningBot(app, pool, memory, settings)
        finally:
            await pool.close()
            await memory.close()
            await client.close()


@asynccontextmanager
async def _engine_on(url: str) -> AsyncIterator[AsyncEngine]:
    engine = create_engine(url)
    try:
        yield engine
    finally:
        await engine.dispose()


async def until_empty(read: Callable[[], Awaitable[Any]], within: float = 10.0) -> None:
    """Poll `read` (a database query: nothing signals its change from outside) until it
    returns something empty or zero; fail naming what is left after `within` seconds
    (scaled to the machine's load)."""
    await eventually(read, lambda left: not left, within=within, what="emptied")


async def answer_origins(engine: AsyncEngine, chat_id: int, count: int = 1) -> dict[str, int]:
    """Stored answer id -> the Telegram message it went out as, in `chat_id`, once `count`
    answers have one (written after Telegram took the answer: polled)."""
    query = (
        sa.select(messages.c.id, origins.c.channel_message_id)
        .join(origins, origins.c.message_id == messages.c.id)
        .where(messages.c.role == "assistant", origins.c.chat_id == chat_id)
    )

    async def read() -> dict[str, int]:
        async with engine.connect() as conn:
            return {str(i): m for i, m in (await conn.execute(query)).all()}

    return await eventually(
        read,
        lambda found: len(found) >= count,
        within=10.0,
        what=f"{count} answer origin(s) in chat {chat_id}",
    )
