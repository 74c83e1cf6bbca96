"""What an import stored is compacted in the background, as automatic compaction does
after a turn: at the bot's start for what `mnemo memory import-chat` stored meanwhile
(the ledger's `compacted` mark says which), and then never again for the same import."""

from __future__ import annotations

from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from bot.channels.telegram.imports import ChatImports
from bot.chat_import import importer
from bot.chat_import.ledger import chat_imports, uncompacted
from bot.chat_import.limits import IN_CHAT
from bot.config.settings import Settings
from bot.conversation.service import Conversations
from bot.model.client import LLMClient
from memory.compaction.summarizer import StaticSummarizer
from memory.contract.capabilities import ProviderContext
from memory.contract.registry import create_provider
from tests.chat_import.generate import telegram_export
from tests.fakes.openai_server import FakeOpenAI


@pytest.mark.parametrize("provider_name", ["lcm", "simple"])
async def test_imported_sessions_are_compacted_in_the_background_once(
    engine: AsyncEngine, tmp_path: Path, llm: FakeOpenAI, provider_name: str
) -> None:
    settings = Settings.model_validate(
        {
            "data_dir": str(tmp_path / "data"),
            "llm": {"base_url": llm.base_url, "api_key": "k", "max_retries": 0},
            "compaction": {"max_tokens": 2000, "keep_tail": 2},
            "memory": {"provider": provider_name, "simple": {"store_dir": str(tmp_path / "n")}},
        }
    )
    ctx = ProviderContext(
        engine=engine,
        summarizer=StaticSummarizer("a short summary"),
        data_dir=tmp_path,
        config=settings.provider_config(),
    )
    provider = create_provider(provider_name, ctx)
    client = LLMClient(settings.llm)
    pool = Conversations(provider, client, settings)
    try:
        export = tmp_path / "result.json"
        telegram_export(export, 400, chats=2)
        fmt = importer.FORMATS["telegram"]
        plan = await importer.plan(engine, fmt, export, 42, "default", IN_CHAT)
        report = await importer.run(provider, engine, plan)
        assert len(await uncompacted(engine)) == 2

        await ChatImports(pool, settings).start()  # what the bot's start does
        await pool.drain()
        assert await uncompacted(engine) == []
        for session in report.sessions:
            stats = await provider.stats(session)
            assert stats.context_tokens < 2000 < stats.token_count, session.id
        async with engine.connect() as conn:
            assert (
                await conn.scalar(
                    sa.select(sa.func.count()).where(chat_imports.c.compacted.is_(True))
                )
                == 2
            )
    finally:
        await pool.close()
        await provider.close()
        await client.close()
