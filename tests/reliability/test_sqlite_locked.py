"""SQLite's file locked by another process for longer than the bot's busy wait (a
backup, a long `sqlite3` session): the message is held, the user told once that the
answer is delayed, and it is stored and answered once the lock is gone, never
acknowledged before it was stored."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

from bot.conversation.store_wait import DELAYED
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.telegram_server import FakeTelegram
from tests.reliability.conftest import ask
from tests.reliability.harness import live_bot, session_id, stored_history


def _acknowledged(tg: FakeTelegram) -> int:
    return max((int(c.params.get("offset") or 0) for c in tg.calls_to("getUpdates")), default=0)


async def test_a_locked_sqlite_file_holds_the_message(
    tg: FakeTelegram, llm: FakeOpenAI, tmp_path: Path
) -> None:
    path = tmp_path / "mnemo.db"
    url = f"sqlite+aiosqlite:///{path}?timeout=0.5"  # the bot's busy wait: half a second
    async with live_bot(tmp_path, tg, llm, db_url=url, record_updates=True) as bot:
        chat = tg.private(1)
        assert "echo: before" in await ask(tg, chat, "before")
        other = sqlite3.connect(path, isolation_level=None)
        try:
            other.execute("BEGIN IMMEDIATE")  # another process holds the write lock
            chat.send("while locked")
            held = tg.last_update_id
            await tg.wait_for_message(1, contains=DELAYED, within=30)
            await asyncio.sleep(1)
            assert _acknowledged(tg) <= held
            assert ("user", "while locked") not in await stored_history(bot.engine, session_id(1))
        finally:
            other.execute("ROLLBACK")
            other.close()
        await tg.wait_for_message(1, contains="echo: while locked", within=30)
        await tg.wait_for(lambda: _acknowledged(tg) > held, within=30)
        assert [m.text for m in tg.bot_messages(1)] == [
            "echo: before",
            DELAYED,
            "echo: while locked",
        ]
        assert await stored_history(bot.engine, session_id(1)) == [
            ("user", "before"),
            ("assistant", "echo: before"),
            ("user", "while locked"),
            ("assistant", "echo: while locked"),
        ]
