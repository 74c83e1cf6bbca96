"""Pacing into groups: about 20 messages a minute per group (Telegram's limit), posts and
edits counted, nothing else held; private chats and other groups unaffected."""

from __future__ import annotations

import asyncio
from pathlib import Path

from bot.channels.telegram.delivery.pacing import GroupPacer
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.telegram_server import FakeTelegram
from tests.telegram.harness import running_bot

GROUP, OTHER_GROUP, PRIVATE = -1001, -1002, 42


async def _settle() -> None:
    """Let every task that can run, run (a held request stays held: it waits a timer)."""
    for _ in range(50):
        await asyncio.sleep(0)


async def test_the_bot_holds_the_21st_message_a_minute_into_a_group(
    tg: FakeTelegram, llm: FakeOpenAI, tmp_path: Path
) -> None:
    tg.group(GROUP)
    tg.group(OTHER_GROUP)
    tg.private(PRIVATE)
    async with running_bot(tg, llm, tmp_path) as bot:
        send = bot.app.bot.send_message
        for i in range(20):
            await send(GROUP, f"message {i}")
        held = asyncio.create_task(send(GROUP, "one too many"))
        try:
            # Other chats, and what does not post a message, are not held meanwhile.
            await send(PRIVATE, "private")
            await send(OTHER_GROUP, "elsewhere")
            await bot.app.bot.send_chat_action(GROUP, "typing")
            await _settle()
            assert not held.done()
            assert len(tg.calls_to("sendMessage", GROUP)) == 20
        finally:
            held.cancel()
    assert isinstance(bot.app.bot.rate_limiter, GroupPacer)


async def test_edits_count_and_an_id_as_text_is_the_same_group() -> None:
    pacer = GroupPacer(per_period=2, period_s=3600)
    done: list[str] = []

    async def call(what: str) -> bool:
        done.append(what)
        return True

    async def request(endpoint: str, chat_id: int | str, what: str) -> None:
        await pacer.process_request(call, (what,), {}, endpoint, {"chat_id": chat_id}, None)

    await request("sendMessage", GROUP, "post")
    await request("editMessageText", str(GROUP), "edit")
    held = asyncio.create_task(request("editMessageText", GROUP, "held"))
    await request("getChat", GROUP, "not a post")
    await request("sendMessage", "@channel", "a channel by name")
    await _settle()
    assert done == ["post", "edit", "not a post", "a channel by name"] and not held.done()
    held.cancel()
