"""Reflect inside the real app (`bot.app.services.build_services`, the pool, the slash commands):
what reflect learns reaches the session's system prompt at its next compaction (not
before: the cached prefix stays), `/memory history` shows it with its source, and
`/memory rollback` undoes it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from bot.app.services import Services, build_services
from bot.config.settings import Settings
from bot.conversation.commands import handle_command
from bot.jobs.reflect.job import build_reflector
from memory.contract.types import Session
from tests.fakes.openai_server import FakeOpenAI, text, tool_call


@pytest.fixture
async def services(tmp_path: Path, fake_llm: FakeOpenAI) -> AsyncIterator[Services]:
    data = tmp_path / "data"
    data.mkdir()
    (data / "USER.md").write_text("Likes gliders.", encoding="utf-8")  # seeds version 1
    settings = Settings.model_validate(
        {
            "database": {"url": f"sqlite+aiosqlite:///{tmp_path / 'mnemo.db'}"},
            "llm": {"base_url": fake_llm.base_url, "api_key": "test", "max_retries": 0},
            "data_dir": str(data),
            "memory": {"provider": "simple", "simple": {"store_dir": str(data / "notes")}},
            "compaction": {"max_tokens": -1, "keep_tail": 2},
        }
    )
    app = await build_services(settings)
    yield app
    await app.close()


def system_prompt(request: dict) -> str:
    return request["messages"][0]["content"]


async def test_reflect_through_the_app(services: Services, fake_llm: FakeOpenAI) -> None:
    pool = services.conversations
    base = Session("tg:9", "default", 9, "telegram")
    session = await pool.current_session(base)
    assert not (await pool.chat(session, "Hi, I'm Zoe and I fly planes for a living.")).error
    assert "Name: Zoe" not in system_prompt(fake_llm.requests[-1])
    before = fake_llm.requests[-1]["messages"]

    fake_llm.push(
        tool_call(
            "memory",
            {
                "action": "profile_update",
                "content": "Likes gliders.\nName: Zoe\nJob: airline pilot",
            },
        ),
        text("profile updated"),
    )
    report = await build_reflector(services).run_cycle()
    assert [(s.session_id, s.status, s.changes) for s in report.sessions] == [
        (session.id, "changed", 1)
    ]

    # Reflect's write waits for the session's next compaction: the running chat's prompt
    # stays byte for byte what the model server has cached ...
    await pool.chat(session, "What do I do for a living?")
    assert fake_llm.requests[-1]["messages"][: len(before)] == before
    # ... and the compaction, which rewrites the prompt's start anyway, brings it in.
    await pool.chat(session, "Thanks!")
    assert "Compacted 4 messages" in await handle_command(pool, base, "compact", "", is_admin=False)
    await pool.chat(session, "What do I do for a living?")
    assert "Job: airline pilot" in system_prompt(fake_llm.requests[-1])

    history = await handle_command(pool, base, "memory", "history", is_admin=False)
    assert "profile update by reflect v1→v2" in history
    assert "by system" in history  # the USER.md seed, version 1

    undone = await handle_command(pool, base, "memory", "rollback profile 1", is_admin=True)
    assert "now version 3" in undone
    assert await services.provider.get_profile(9, "default") == "Likes gliders."
    history = await handle_command(pool, base, "memory", "history", is_admin=False)
    assert history.index("by user v2→v3") < history.index("by reflect v1→v2")  # newest first


async def test_reflect_usage_is_recorded_for_the_user_and_guarded(
    services: Services, fake_llm: FakeOpenAI
) -> None:
    import sqlalchemy as sa

    from memory.storage.usage import usage_records

    pool = services.conversations
    session = await pool.current_session(Session("tg:9", "default", 9, "telegram"))
    await pool.chat(session, "I moved to Lisbon last spring.")
    fake_llm.push(text("nothing to change"))
    report = await build_reflector(services).run_cycle()
    assert [s.status for s in report.sessions] == ["unchanged"]
    async with services.engine.connect() as conn:
        rows = (
            await conn.execute(sa.select(usage_records).where(usage_records.c.kind == "reflect"))
        ).all()
    assert [(r.user_id, r.agent_id, r.session_id) for r in rows] == [(9, "default", session.id)]
    assert rows[0].prompt_tokens > 0 and not rows[0].estimated

    # Over the guard's cap for this user: the next review is put off, nothing spent.
    await pool.chat(session, "And I adopted a cat.")
    services.settings.limits.background.calls_per_user = 1
    asked = len(fake_llm.requests)
    report = await build_reflector(services).run_cycle()
    assert [s.status for s in report.sessions] == ["deferred"]
    assert "1 put off (spend guard)" in report.summary()
    assert len(fake_llm.requests) == asked
