"""Retention over a chat spanning a year: messages older than the cutoff are forgotten
through the forgetting path, the summaries rebuilt from what remains, nothing of the
old days left in them; lcm and simple, SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from bot.jobs.retention import cutoff_for, run_retention
from memory.contract.capabilities import ProviderContext
from memory.contract.registry import create_provider
from memory.contract.types import CompactionMode, Message, Session, utcnow
from memory.transfer.integrity import check_shared
from tests.fakes.summarizer import KeepingSummarizer

DAYS = 365
STEP = 5


def _year() -> list[Message]:
    now = utcnow()
    out = []
    for n, age in enumerate(range(DAYS, 0, -STEP)):
        out.append(
            Message(
                "user" if n % 2 == 0 else "assistant",
                f"day {age} Zday{age}",
                created_at=now - timedelta(days=age),
            )
        )
    return out


@pytest.mark.parametrize("provider_name", ["lcm", "simple"])
async def test_retention_over_a_year(
    engine: AsyncEngine, tmp_path: Path, provider_name: str
) -> None:
    config = {"keep_tail": 4, "leaf_chunk_size": 4, "condensed_min": 2}
    if provider_name == "simple":
        config = {"keep_tail": 4, "store_dir": str(tmp_path / "mem")}
    provider = create_provider(
        provider_name,
        ProviderContext(engine=engine, summarizer=KeepingSummarizer(), config=config),
    )
    s = Session("tg-5", "default", 5)
    chat = _year()
    half = len(chat) // 2
    await provider.append(s, *chat[:half])
    await provider.compact(s, CompactionMode.FULL)
    await provider.append(s, *chat[half:])
    await provider.compact(s, CompactionMode.FULL)

    run = await run_retention(provider, cutoff_for(90))
    kept = [m for m in chat if m.created_at and m.created_at >= run.cutoff]
    assert run.owners == 1 and run.failed == 0
    assert run.report is not None and run.report.messages == len(chat) - len(kept)
    assert [m.content for m in await provider.load_history(s.id)] == [m.content for m in kept]

    old_words = {f"Zday{age}" for age in range(DAYS, 90, -STEP)}
    async with engine.connect() as conn:
        table, column = (
            ("summaries", "content")
            if provider_name == "lcm"
            else ("simple_compactions", "summary")
        )
        derived = " ".join(
            r[0] for r in await conn.execute(sa.text(f"SELECT {column} FROM {table}"))
        )
    assert derived and not old_words & set(derived.split())
    assert "Zday50" in derived  # what remains is still summarised
    window = " ".join(m.text() for m in await provider.assemble(s, 10**9, 10**6))
    assert not old_words & set(window.replace("]", " ").split())
    assert await check_shared(engine) == []
    assert await provider.check_integrity() == []
    # A second run finds nothing more.
    again = await run_retention(provider, cutoff_for(90))
    assert again.owners == 0
    await provider.close()
