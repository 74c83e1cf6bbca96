"""End to end: the real bot (python-telegram-bot, pool, reference provider) against the
fake Bot API and the fake OpenAI server."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from memory.types import Session
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.telegram_server import FakeTelegram
from tests.telegram.harness import running_bot


@pytest.fixture
async def tg() -> AsyncIterator[FakeTelegram]:
    async with FakeTelegram() as server:
        yield server


@pytest.fixture
async def llm() -> AsyncIterator[FakeOpenAI]:
    async with FakeOpenAI() as server:
        yield server


async def test_round_trip_and_startup(tg: FakeTelegram, llm: FakeOpenAI, tmp_path: Path) -> None:
    async with running_bot(tg, llm, tmp_path) as bot:
        assert [c["command"] for c in tg.commands] == ["start", "help", "new", "compact", "memory"]
        alice = tg.private(42, "Alice")
        alice.send("hello there")
        reply = await tg.wait_for_message(42, contains="echo: hello there")
        assert reply.reply_to is None  # private chats need no quoting
        assert tg.calls_to("sendChatAction", chat_id=42)[0].params["action"] == "typing"
        stats = await bot.provider.stats(Session(id="default:telegram:42", user_id=42,
                                                 channel="telegram"))
        assert stats.message_count == 2
    # the model saw the user's text
    assert llm.requests[-1]["messages"][-1]["content"] == "hello there"
