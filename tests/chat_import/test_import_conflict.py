"""Two imports of the same export at once (two operators, or the CLI beside the chat):
the ledger row each batch moves in its transaction lets one of them store a batch, and
the other stop at its next one, so every message is stored once."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from bot.chat_import import importer
from bot.chat_import.ledger import ImportConflict
from bot.chat_import.limits import IN_CHAT
from memory.compaction.summarizer import StaticSummarizer
from memory.contract.capabilities import ProviderContext
from memory.contract.registry import create_provider
from memory.storage.history import messages
from tests.chat_import.generate import telegram_export


async def test_two_imports_at_once_store_each_message_once(
    engine: AsyncEngine, tmp_path: Path
) -> None:
    ctx = ProviderContext(engine=engine, summarizer=StaticSummarizer("s"), data_dir=tmp_path)
    provider = create_provider("lcm", ctx)
    try:
        export = tmp_path / "result.json"
        expected = telegram_export(export, 3 * importer.BATCH, chats=1)
        fmt = importer.FORMATS["telegram"]
        plans = [await importer.plan(engine, fmt, export, 42, "default", IN_CHAT) for _ in range(2)]
        results = await asyncio.gather(
            *(importer.run(provider, engine, p) for p in plans), return_exceptions=True
        )
        conflicts = [r for r in results if isinstance(r, ImportConflict)]
        assert len(conflicts) == 1, results
        async with engine.connect() as conn:
            stored = await conn.scalar(sa.select(sa.func.count()).select_from(messages))
        done = next(r for r in results if isinstance(r, importer.Report)).messages
        assert stored == done  # the stopped one stored nothing: no batch twice
        # Run again: the rest, once.
        again = await importer.run(
            provider, engine, await importer.plan(engine, fmt, export, 42, "default", IN_CHAT)
        )
        assert stored + again.messages == expected
        async with engine.connect() as conn:
            contents = (await conn.execute(sa.select(messages.c.content))).scalars().all()
        assert len(contents) == len(set(contents)) == expected
    finally:
        await provider.close()


@pytest.fixture(autouse=True)
def _small(monkeypatch: pytest.MonkeyPatch) -> None:
    """Batches of 50: several per import, so the two runs interleave."""
    monkeypatch.setattr(importer, "BATCH", 50)
