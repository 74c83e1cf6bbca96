"""Fixtures of the operator tests: a populated database, a second empty one, settings."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from bot.config.settings import Settings
from memory.compaction.summarizer import TruncatingSummarizer
from memory.contract.capabilities import ProviderContext
from memory.contract.context import with_change_source, with_session_id
from memory.contract.registry import create_provider
from memory.contract.types import ChangeSource, Message, Session, ToolCall
from memory.storage.db import create_engine, migrate
from memory.testing.databases import temp_database_url

T0 = datetime(2026, 3, 1, 12, 0, 0, 123456, tzinfo=UTC)
ALICE = Session("tg:alice", "default", 1001, "telegram")
GROUP = Session("tg:group#2", "default", -5002, "telegram")


def make_settings(url: str, tmp: Path, provider: str = "simple", llm_url: str = "") -> Settings:
    raw: dict[str, Any] = {
        "database": {"url": url},
        "data_dir": str(tmp / "data"),
        "memory": {
            "provider": provider,
            "simple": {"store_dir": str(tmp / "notes")},
            "lcm": {"leaf_chunk_size": 4},
        },
        "compaction": {"keep_tail": 2},
        "llm": {
            "api_key": "test-key",
            "max_retries": 0,
            **({"base_url": llm_url} if llm_url else {}),
        },
    }
    return Settings.model_validate(raw)


def conversation(n: int, start: datetime = T0) -> list[Message]:
    """n user/assistant exchanges, every third one through a tool call, awkward text."""
    out: list[Message] = []
    for i in range(n):
        t = start + timedelta(minutes=i)
        out.append(Message("user", f"question {i}: what's C++ 'quoted' 100% _x_ 🙂", created_at=t))
        if i % 3 == 0:
            call = ToolCall(f"call_{i}", "memory", '{"action": "search", "text": "x"}')
            out.append(
                Message("assistant", "", tool_calls=[call], reasoning=f"think {i}", created_at=t)
            )
            out.append(
                Message("tool", f"result {i}", tool_call_id=call.id, name="memory", created_at=t)
            )
        out.append(Message("assistant", f"answer {i}\nline two", created_at=t))
    return out


async def populate(settings: Settings, tmp: Path, *, compact: bool = True) -> None:
    """Two sessions with tool calls, memory writes (profile, soul, constraints, a
    rollback), snapshots, and a compaction when `compact`."""
    engine = create_engine(settings.database.url)
    try:
        await migrate(engine)
        ctx = ProviderContext(
            engine=engine,
            summarizer=TruncatingSummarizer(),
            agent_id=settings.agent.id,
            data_dir=tmp,
            config=settings.provider_config(),
        )
        provider = create_provider(settings.memory.provider, ctx)
        try:
            for session, n in ((ALICE, 9), (GROUP, 4)):
                await provider.bootstrap(session)
                await provider.append(session, *conversation(n))
                with with_session_id(session.id), with_change_source(ChangeSource.AGENT):
                    await provider.get_or_create_snapshot(
                        session.id, session.user_id, session.agent_id
                    )
                    await provider.set_profile(
                        session.user_id, session.agent_id, f"profile of {session.user_id}"
                    )
                    await provider.set_soul(session.user_id, session.agent_id, "calm")
                    await provider.add_constraint(session.user_id, session.agent_id, "no emoji")
                    await provider.set_profile(session.user_id, session.agent_id, "changed")
                    await provider.rollback(session.user_id, session.agent_id, "profile", 1)
                    await provider.advance_snapshot(session.id, session.user_id, session.agent_id)
            if compact:
                with with_change_source(ChangeSource.SYSTEM):
                    from memory.contract.types import CompactionMode

                    await provider.compact(ALICE, CompactionMode.FULL)
        finally:
            await provider.close()
    finally:
        await engine.dispose()


@pytest.fixture
async def other_db_url(db_kind: str, tmp_path: Path) -> AsyncIterator[str]:
    """A second empty database of the same kind (the import target)."""
    target = tmp_path / "other"
    target.mkdir()
    async with temp_database_url(db_kind, target) as url:
        yield url
