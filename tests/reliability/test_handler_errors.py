"""An unexpected error in a handler (a bug, or a failure nothing was written for) ends
with one plain apology to the user, never silence, and never the error's text: the
handler's own failure is injected where a document is read and where a text turn looks
up its session, with the bot token in the exception's message."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bot.channels.telegram import handlers
from bot.channels.telegram.handlers import FAILED
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.telegram_server import FakeTelegram, User
from tests.reliability.conftest import SECRET_TOKEN, ask
from tests.reliability.corpus import looks_like_traceback
from tests.reliability.harness import live_bot, session_id, stored_history


class Bug(Exception):
    """Nothing in the bot expects this."""


def _said(tg: FakeTelegram, chat_id: int) -> list[str]:
    return [m.text for m in tg.bot_messages(chat_id)]


def _plain(lines: list[str]) -> None:
    for line in lines:
        assert SECRET_TOKEN not in line and "Bug" not in line and not looks_like_traceback(line)


async def test_a_document_whose_reading_fails_unexpectedly_gets_one_apology(
    tg: FakeTelegram, llm: FakeOpenAI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def broken(*_: Any) -> str:
        raise Bug(f"download of https://api.telegram.org/file/bot{SECRET_TOKEN}/x failed")

    monkeypatch.setattr(handlers, "read_text", broken)
    async with live_bot(tmp_path, tg, llm, record_updates=True) as bot:
        chat = tg.private(1)
        chat.send_document(file_name="notes.txt", content=b"hello", caption="read this")
        await tg.wait_for_message(1, contains=FAILED, within=15)
        # The chat goes on; the failed update got exactly one line, nothing stored.
        assert "echo: next" in await ask(tg, chat, "next")
        said = _said(tg, 1)
        assert said == [FAILED, "echo: next"]
        _plain(said)
        assert await stored_history(bot.engine, session_id(1)) == [
            ("user", "next"),
            ("assistant", "echo: next"),
        ]


async def test_a_text_turn_failing_unexpectedly_gets_one_apology(
    tg: FakeTelegram, llm: FakeOpenAI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with live_bot(tmp_path, tg, llm, record_updates=True) as bot:
        chat, group = tg.private(2), tg.group(-100)
        real = bot.services.conversations.current_session
        failing = {"once": True}

        async def current_session(base: Any) -> Any:
            if failing.pop("once", False):
                raise Bug(f"token {SECRET_TOKEN} in a bug's message")
            return await real(base)

        monkeypatch.setattr(bot.services.conversations, "current_session", current_session)
        assert await ask(tg, chat, "first") == FAILED
        assert "echo: second" in await ask(tg, chat, "second")
        assert _said(tg, 2) == [FAILED, "echo: second"]
        _plain(_said(tg, 2))
        # In a group the apology replies to the message that failed.
        failing["once"] = True
        asked = group.send(f"@{tg.username} in the group", user=User(7, "Alice"))
        reply = await tg.wait_for_message(-100, contains=FAILED, within=15)
        assert reply.reply_to == asked["message_id"]
        assert len(tg.bot_messages(-100)) == 1
