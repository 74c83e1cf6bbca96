"""An answer stored just before a `kill -9`, which Telegram never took, is sent at the
next start, once (bot/channels/telegram/delivery/resume.py), and with two processes starting together
on PostgreSQL still once.

The kill lands in a known place: Telegram answers the answer's `sendMessage` with a 502
twice, so the bot is inside `bot.channels.telegram.delivery.sent`'s retry backoff (the answer stored,
nothing marked `undelivered` yet) when it dies."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import sqlalchemy as sa

from bot.config.settings import load_settings
from bot.ops.common import open_memory
from memory.storage.history import messages, origins
from memory.testing.databases import temp_database_url
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.telegram_server import FakeTelegram
from tests.reliability.harness import session_id, stored_history
from tests.reliability.process import BotProcess
from tests.reliability.test_crash import config

pytestmark = pytest.mark.slow  # crash trials, bot processes killed: `make test-slow`

CHAT = 11
QUESTION = "where is Lisbon?"
ANSWER = f"echo: {QUESTION}"
LOOKED = "owed answers looked at"  # bot.channels.telegram.delivery.resume logs it once it is done


async def stored_unshown(config_path: Path) -> tuple[list[tuple[str, str]], int]:
    """(the chat's stored history, how many of its answers have an origin)."""
    async with open_memory(load_settings(config_path)) as opened:
        history = await stored_history(opened.engine, session_id(CHAT))
        async with opened.engine.connect() as conn:
            sent = await conn.scalar(
                sa.select(sa.func.count())
                .select_from(origins.join(messages, messages.c.id == origins.c.message_id))
                .where(messages.c.role == "assistant")
            )
    return history, int(sent or 0)


def process(workdir: Path, tg: FakeTelegram, llm: FakeOpenAI, url: str) -> BotProcess:
    workdir.mkdir()
    return BotProcess(workdir, config(workdir, tg, llm, url), tg)


async def logged(bot: BotProcess, line: str, within: float = 30.0) -> None:
    """Until `bot` has logged `line` (a log file: polled)."""
    for _ in range(int(within / 0.05)):
        if line in bot.stderr_text():
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"{line!r} not logged within {within} s:\n{bot.stderr_text()[-3000:]}")


async def kill_while_sending(bot: BotProcess, tg: FakeTelegram) -> dict[str, object]:
    """Start `bot`, ask QUESTION, and kill it while Telegram refuses the answer."""
    tg.fail("sendMessage", 502, times=2, when=lambda p: ANSWER in str(p.get("text", "")))
    await bot.start()
    asked = tg.private(CHAT).send(QUESTION)

    def refused() -> bool:
        return any(ANSWER in str(c.params.get("text", "")) for c in tg.calls_to("sendMessage"))

    await tg.wait_for(refused, within=30)
    bot.kill()  # in the backoff after the first 502: stored, not taken, not marked
    await bot.wait()
    return asked


@pytest.mark.parametrize("provider", ["simple", "lcm"])
@pytest.mark.parametrize(
    "db_kind", [pytest.param("sqlite"), pytest.param("postgres", marks=pytest.mark.postgres)]
)
async def test_an_answer_stored_just_before_a_kill_is_sent_at_the_next_start(
    db_kind: str, provider: str, tmp_path: Path
) -> None:
    async with (
        FakeTelegram() as tg,
        FakeOpenAI() as llm,
        temp_database_url(db_kind, tmp_path) as url,
    ):
        raw = config(tmp_path, tg, llm, url)
        raw["memory"]["provider"] = provider
        bot = BotProcess(tmp_path, raw, tg)
        asked = await kill_while_sending(bot, tg)
        assert tg.bot_messages(CHAT) == []
        history, sent = await stored_unshown(bot.config_path)
        assert ("assistant", ANSWER) in history and sent == 0  # stored, never shown

        await bot.start()
        try:
            reply = await tg.wait_for_message(CHAT, contains=ANSWER, within=30)
            assert reply.reply_to == asked["message_id"]  # says what it answers
            await bot.stop()
            await bot.start()  # sent and recorded: a third start sends nothing more
            tg.private(CHAT).send("probe")
            await tg.wait_for_message(CHAT, contains="echo: probe", within=30)
        finally:
            await bot.stop()
        assert [m.text for m in tg.bot_messages(CHAT)] == [ANSWER, "echo: probe"]
        assert len(llm.requests) == 2  # the stored answer, not a second model call
        history, sent = await stored_unshown(bot.config_path)
        assert sent == 2


@pytest.mark.postgres
async def test_two_processes_starting_together_send_it_once(tmp_path: Path) -> None:
    async with (
        FakeTelegram() as tg,
        FakeOpenAI() as llm,
        temp_database_url("postgres", tmp_path) as url,
    ):
        first, second = (process(tmp_path / d, tg, llm, url) for d in "ab")
        await kill_while_sending(first, tg)
        # Three 502s in all (one left from the kill): the resend takes a few seconds of
        # delivery retries, so both processes look at it while it is being sent.
        tg.fail("sendMessage", 502, times=2, when=lambda p: ANSWER in str(p.get("text", "")))
        try:
            await asyncio.gather(first.start(), second.start())
            await tg.wait_for_message(CHAT, contains=ANSWER, within=30)
            for bot in (first, second):  # both have looked: nothing more can come
                await logged(bot, LOOKED)
            await first.stop()
            await second.stop()
        finally:
            first.kill()
            second.kill()
        assert [m.text for m in tg.bot_messages(CHAT)] == [ANSWER]
        _, sent = await stored_unshown(first.config_path)
        assert sent == 1
