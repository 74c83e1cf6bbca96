"""Fixtures of the bot-core tests: a fake OpenAI server, settings pointing at it, and a
pool over the conformance kit's reference provider."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncEngine

from bot.config.settings import Settings
from bot.conversation.service import Conversations
from bot.model.client import LLMClient
from memory.contract.capabilities import ProviderContext, Summarizer
from memory.contract.types import SummarizeOptions
from memory.storage.session_lock import SessionLocks
from memory.testing import reference
from memory.testing.databases import temp_engine
from tests.fakes.openai_server import FakeOpenAI


@dataclass
class GatedSummarizer:
    """A summarizer that waits for `release` before answering: a stand-in for a slow
    LLM, so tests observe ordering instead of measuring time."""

    release: asyncio.Event = field(default_factory=asyncio.Event)
    started: asyncio.Event = field(default_factory=asyncio.Event)
    fail: bool = False
    calls: int = 0

    async def summarize(self, text: str, opts: SummarizeOptions) -> str:
        self.calls += 1
        self.started.set()
        await self.release.wait()
        if self.fail:
            raise RuntimeError("summarizer exploded")
        return f"summary of {len(text)} characters"


@pytest.fixture
async def llm_server() -> AsyncIterator[FakeOpenAI]:
    async with FakeOpenAI() as srv:
        yield srv


@pytest.fixture
async def sqlite_engine(tmp_path: Path) -> AsyncIterator[AsyncEngine]:
    async with temp_engine("sqlite", tmp_path) as eng:
        yield eng


def make_settings(server: FakeOpenAI, data_dir: Path, **sections: dict[str, Any]) -> Settings:
    raw: dict[str, Any] = {
        "llm": {
            "base_url": server.base_url,
            "api_key": "test-key",
            "timeout_s": 5,
            "max_retries": 2,
        },
        "data_dir": str(data_dir),
        "memory": {"provider": "reference", "budget_tokens": 4000, "fresh_tail": 6},
        "compaction": {"max_tokens": -1, "keep_tail": 2},
    }
    for key, value in sections.items():
        raw[key] = {**raw.get(key, {}), **value}
    return Settings.model_validate(raw)


PoolFactory = Callable[..., Conversations]


@pytest.fixture
async def make_pool(tmp_path: Path, llm_server: FakeOpenAI) -> AsyncIterator[PoolFactory]:
    """`make_pool(engine, summarizer=None, compactor=True, notes=True, **settings)`."""
    made: list[tuple[Conversations, LLMClient, SessionLocks]] = []

    def factory(
        engine: AsyncEngine,
        *,
        summarizer: Summarizer | None = None,
        compactor: bool = True,
        notes: bool = True,
        provider: Any = None,
        **sections: dict[str, Any],
    ) -> Conversations:
        settings = make_settings(llm_server, tmp_path / "data", **sections)
        llm = LLMClient(settings.llm, backoff_s=0.001)
        if provider is None:
            ctx = ProviderContext(
                engine=engine,
                summarizer=summarizer or GatedSummarizer(),
                agent_id=settings.agent.id,
                data_dir=tmp_path / "data",
                config={
                    "keep_tail": settings.compaction.keep_tail,
                    "compactor": compactor,
                    "notes": notes,
                },
            )
            provider = reference.create(ctx)
        locks = SessionLocks(engine)
        pool = Conversations(provider, llm, settings, locks=locks)
        made.append((pool, llm, locks))
        return pool

    yield factory
    for pool, llm, locks in made:
        await pool.close(timeout_s=1)
        await locks.close()
        await llm.close()


@contextmanager
def sql_statements(engine: AsyncEngine) -> Iterator[list[str]]:
    """The SQL `engine` sends while the block runs, in order."""
    statements: list[str] = []

    def count(conn, cursor, statement, *args) -> None:  # type: ignore[no-untyped-def]
        statements.append(statement)

    event.listen(engine.sync_engine, "before_cursor_execute", count)
    try:
        yield statements
    finally:
        event.remove(engine.sync_engine, "before_cursor_execute", count)
