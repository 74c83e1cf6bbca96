"""Fixtures of the reliability suite: the fake Bot API and the scripted fake model."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.telegram_server import Chat, FakeTelegram, User
from tests.reliability.harness import scripted

SECRET_TOKEN = "424242:SECRET-bot-token-do-not-log"


@pytest.fixture
async def tg() -> AsyncIterator[FakeTelegram]:
    async with FakeTelegram(token=SECRET_TOKEN) as server:
        yield server


@pytest.fixture
async def llm() -> AsyncIterator[FakeOpenAI]:
    async with FakeOpenAI(scripted) as server:
        yield server


async def ask(
    tg: FakeTelegram, chat: Chat, text: str, *, user: User | None = None, within: float = 15.0
) -> str:
    """Send `text` in `chat` and return the bot's answer: the first new bot message, once
    the bot has stopped editing it (a streamed answer is final when typing stops)."""
    before = {m.message_id for m in tg.bot_messages(chat.id, chat.thread_id, include_deleted=True)}
    chat.send(text, user=user)

    def new() -> list[str]:
        return [
            m.text for m in tg.bot_messages(chat.id, chat.thread_id) if m.message_id not in before
        ]

    await tg.wait_for(new, within)
    return "\n".join(new())
