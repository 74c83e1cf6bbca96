"""Automatic compaction through the pool, for lcm and simple, as config.yaml sets it up:
it never runs when it cannot shrink the context (the kept tail alone over
`compaction.max_tokens` used to make simple summarise every turn), and once it runs it
brings the context down to `compaction.target_fraction` of the threshold, so the next
one is a whole gap of conversation away (memory/compaction/goal.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from bot.config.settings import Settings
from bot.conversation.service import Conversations
from bot.model.client import LLMClient
from memory.compaction.summarizer import TruncatingSummarizer
from memory.contract.capabilities import ProviderContext
from memory.contract.registry import create_provider
from memory.contract.types import Session
from memory.storage.db import create_engine, migrate
from tests.bot.conftest import make_settings
from tests.fakes.openai_server import FakeOpenAI, text, tool_call

S = Session("tg:7", "default", 7, "telegram")
# ~250 tokens; the fake model echoes it, so a turn adds about 500 tokens.
MESSAGE = "Tell me about the history of gliders and soaring flight. " * 18


async def _pool(
    tmp_path: Path, server: FakeOpenAI, provider: str, **compaction: Any
) -> tuple[Conversations, TruncatingSummarizer, Settings]:
    settings = make_settings(
        server,
        tmp_path / "data",
        database={"url": f"sqlite+aiosqlite:///{tmp_path / 'mnemo.db'}"},
        memory={
            "provider": provider,
            "budget_tokens": 100_000,
            "simple": {"store_dir": str(tmp_path / "notes")},
            "lcm": {"leaf_chunk_size": 4},
        },
        compaction=compaction,
    )
    engine = create_engine(settings.database.url)
    await migrate(engine)
    summarizer = TruncatingSummarizer()
    ctx = ProviderContext(
        engine=engine,
        summarizer=summarizer,
        agent_id=settings.agent.id,
        data_dir=tmp_path / "data",
        config=settings.provider_config(),
    )
    pool = Conversations(create_provider(provider, ctx), LLMClient(settings.llm), settings)
    return pool, summarizer, settings


@pytest.fixture
async def server() -> AsyncIterator[FakeOpenAI]:
    async with FakeOpenAI() as srv:
        yield srv


async def _turn(pool: Conversations) -> int:
    """One turn, its background compaction finished; the context's size after."""
    assert not (await pool.chat(S, MESSAGE)).error
    await pool.drain()
    return (await pool.provider.stats(S)).context_tokens


@pytest.mark.parametrize("provider", ["simple", "lcm"])
async def test_no_compaction_loop_when_the_kept_tail_alone_is_over_the_threshold(
    tmp_path: Path, server: FakeOpenAI, provider: str
) -> None:
    # 10 kept messages hold ~2,600 tokens: over max_tokens whatever a compaction does.
    # Before the fix, simple summarised the 2 messages leaving the tail on every turn
    # from the 6th on (5 archives in 10 turns).
    pool, summarizer, _ = await _pool(tmp_path, server, provider, max_tokens=2000, keep_tail=10)
    try:
        sizes = [await _turn(pool) for _ in range(10)]
        compactions = len(await pool.provider.read_changelog(7, "default", "compaction"))
        # A compaction waits for the gap (1,000 tokens: two turns) past the kept tail.
        assert 1 <= compactions <= 2, sizes
    finally:
        await pool.close()
        await pool.llm.close()  # type: ignore[attr-defined]


@pytest.mark.parametrize("provider", ["simple", "lcm"])
async def test_a_compaction_goes_to_the_target_and_brings_the_agents_write_into_the_prompt(
    tmp_path: Path, server: FakeOpenAI, provider: str
) -> None:
    pool, _, settings = await _pool(tmp_path, server, provider, max_tokens=4000, keep_tail=2)
    target = settings.compaction.target_tokens
    server.push(
        tool_call("memory", {"action": "profile_update", "content": "Flies gliders."}),
        text("Noted."),
    )
    await _turn(pool)
    try:
        compacted_at = None
        for turn in range(2, 12):
            previous = server.requests[-1]["messages"]
            size = await _turn(pool)
            request = server.requests[-1]["messages"]
            if compacted_at is None:
                # Until the compaction, every request begins with the whole previous one:
                # the agent's write did not touch the system prompt (the cache holds).
                assert request[: len(previous)] == previous, turn
                assert "Flies gliders." not in request[0]["content"]
                if (await pool.provider.stats(S)).summary_count:
                    compacted_at = turn
                    # Down to the target (estimated: the summary's own lines on top).
                    assert size <= target + 200, size
            elif turn == compacted_at + 1:
                # The compaction moved the snapshot: the profile is in the prompt now.
                assert "Flies gliders." in request[0]["content"]
        assert compacted_at is not None
    finally:
        await pool.close()
        await pool.llm.close()  # type: ignore[attr-defined]
