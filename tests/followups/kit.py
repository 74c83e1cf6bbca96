"""The real bot on the fake servers with a follow-up delivery on a clock the test moves
(`FollowupDelivery.tick` is what the root's scheduler runs every `followups.interval`)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bot.config.settings import FollowupsSettings
from bot.followups.delivery import FollowupDelivery
from bot.followups.telegram import TelegramSender
from memory.followups import store
from tests.fakes.openai_server import FakeOpenAI, text, tool_call
from tests.fakes.telegram_server import BotMessage, FakeTelegram
from tests.telegram.harness import RunningBot, running_bot

USER = 42


class Clock:
    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


def at(text: str) -> datetime:
    """An ISO time with offset, as UTC."""
    return datetime.fromisoformat(text).astimezone(UTC)


@asynccontextmanager
async def bot_with_delivery(
    tg: FakeTelegram, llm: FakeOpenAI, tmp_path: Path, **kw: Any
) -> AsyncIterator[tuple[RunningBot, FollowupDelivery, Clock]]:
    settings = kw.pop("followups", {})
    async with running_bot(tg, llm, tmp_path, provider="simple", **kw) as bot:
        clock = Clock(datetime(2030, 1, 1, tzinfo=UTC))
        delivery = FollowupDelivery(
            bot.provider.engine,
            FollowupsSettings(**settings),
            senders={"telegram": TelegramSender(bot.app.bot)},
            clock=clock,
        )
        yield bot, delivery, clock


async def ask(tg: FakeTelegram, command: str, expect: str = "") -> BotMessage:
    """`command` sent; its one answer."""
    before = len(tg.bot_messages(USER))
    tg.private(USER).send(command)
    await tg.wait_for(lambda: len(tg.bot_messages(USER)) > before)
    answer = tg.bot_messages(USER)[before]
    assert expect in answer.text, answer.text
    return answer


async def remind(
    tg: FakeTelegram, llm: FakeOpenAI, said: str, due: str, what: str, **extra: Any
) -> BotMessage:
    """The user asks `said`; the model calls followup_add; the confirmation line."""
    before = len(tg.bot_messages(USER))
    llm.push(
        tool_call("memory", {"action": "followup_add", "due": due, "text": what, **extra}),
        text("Noted."),
    )
    tg.private(USER).send(said)

    def confirmation() -> BotMessage | None:
        for m in tg.bot_messages(USER)[before:]:
            if m.text.startswith("⏰ I'll follow up") and what[:40] in m.text:
                return m
        return None

    found: BotMessage = await tg.wait_for(confirmation)
    return found


def delivered(tg: FakeTelegram, since: int) -> list[BotMessage]:
    return [m for m in tg.bot_messages(USER)[since:] if m.text.startswith(("⏰ ", "I missed"))]


async def all_followups(bot: RunningBot) -> list[store.Followup]:
    return await store.listed(
        bot.provider.engine,
        None,
        (store.PENDING, store.SNOOZED, store.SENDING, store.SENT, store.DISMISSED, store.DROPPED),
    )


def buttons(message: BotMessage) -> list[list[tuple[str, str]]]:
    assert message.reply_markup is not None, message.text
    return [
        [(b["text"], b["callback_data"]) for b in row]
        for row in message.reply_markup["inline_keyboard"]
    ]


async def press(tg: FakeTelegram, message: BotMessage, data: str) -> str:
    before = len(tg.bot_messages(USER))
    tg.private(USER).press(message, data)
    await tg.wait_for(lambda: len(tg.bot_messages(USER)) > before)
    return tg.bot_messages(USER)[before].text
