"""Flood control (Telegram's 429 with `retry_after`): no stored answer is lost.

The fake Bot API applies flood control as Telegram does (`tg.flood`: a window per chat
in which every send or edit answers 429 with the seconds left) and records any call the
bot makes in a window after being told to wait (`tg.flood_violations`). The bot runs
with its database (update records), as in production, so an owed answer survives a
restart."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from memory.testing.databases import temp_database_url
from tests.fakes.openai_server import FakeOpenAI, gated, text, tool_calls
from tests.fakes.telegram_server import FakeTelegram
from tests.reliability.conftest import ask
from tests.telegram.harness import until_empty
from tests.telegram.test_polling import bot_on
from tests.telegram.test_resume import owed, undelivered, until_undelivered

LONG_WAIT = 120  # seconds: far beyond what a handler may wait (delivery.MAX_RETRY_AFTER_S)


async def test_a_long_flood_wait_owes_the_answer_and_the_next_start_sends_it(
    tg: FakeTelegram, llm: FakeOpenAI, tmp_path: Path, db_kind: str
) -> None:
    alice, bob = tg.private(41), tg.private(42)
    tg.flood(LONG_WAIT, chat_id=41)
    async with temp_database_url(db_kind, tmp_path) as url:
        async with bot_on(tg, llm, tmp_path, url) as services:
            first = alice.send("where is Lisbon?")
            await until_undelivered(services)  # owed, with its text, at once
            # Other chats are not held, and the flooded chat's messages are still taken.
            assert "echo: other chat" in await ask(tg, bob, "other chat")
            second = alice.send("are you there?")
            await until_undelivered(services, count=2)  # queued behind, never sent
            assert tg.bot_messages(41) == []
            assert tg.flood_violations == []  # nothing sent before retry_after
        requests = len(llm.requests)
        tg.end_flood()  # the wait is over

        async with bot_on(tg, llm, tmp_path, url) as services:
            await tg.wait_for(lambda: len(tg.bot_messages(41)) == 2)
            await until_empty(lambda: owed(services))
            assert await undelivered(services) == []
    assert [(m.text, m.reply_to) for m in tg.bot_messages(41)] == [
        ("echo: where is Lisbon?", first["message_id"]),
        ("echo: are you there?", second["message_id"]),
    ]
    assert len(llm.requests) == requests  # no second model call


async def test_a_short_flood_wait_is_honoured_and_the_answer_shown_once(
    tg: FakeTelegram, llm: FakeOpenAI, tmp_path: Path
) -> None:
    """Four 429s in a row on sendMessage (one more than the inline retries): the answer
    is owed, then sent by the outbox after retry_after, once."""
    tg.fail("sendMessage", 429, retry_after=1, times=4)
    chat = tg.private(41)
    async with (
        temp_database_url("sqlite", tmp_path) as url,
        bot_on(tg, llm, tmp_path, url) as services,
    ):
        chat.send("hello")
        reply = await tg.wait_for_message(41, contains="echo: hello", within=20)
        await until_empty(lambda: undelivered(services))
    assert [m.text for m in tg.bot_messages(41)] == ["echo: hello"]
    assert len(tg.calls_to("sendMessage", chat_id=41)) == 5
    assert reply.reply_to is not None  # late: it quotes the question


async def test_the_final_edit_of_a_streamed_answer_under_flood_control(
    tg: FakeTelegram, llm: FakeOpenAI, tmp_path: Path
) -> None:
    """A streamed answer whose final edits keep getting 429: the streamed message is
    completed later, not left cut."""
    gate = asyncio.Event()
    partial = "Let me look that up. " + "x" * 200
    final = "The whole answer: " + " ".join(f"word{i}" for i in range(450))  # ~3,500
    shown_whole = partial + "\n\n" + final  # what was said beside the call, kept
    llm.push(
        tool_calls([("memory", {"action": "status"})], content=partial),
        gated(gate, text(final, chunk_size=400)),
    )
    chat = tg.private(41)
    async with (
        temp_database_url("sqlite", tmp_path) as url,
        bot_on(tg, llm, tmp_path, url) as services,
    ):
        chat.send("a long question")
        shown = await tg.wait_for_message(41, contains="Let me look that up")
        tg.fail(
            "editMessageText",
            429,
            retry_after=1,
            times=6,
            when=lambda params: "whole answer" in str(params.get("text", "")),
        )
        gate.set()
        await tg.wait_for(
            lambda: any(m.text == shown_whole for m in tg.bot_messages(41)), within=30
        )
        await until_empty(lambda: undelivered(services))
    assert [m.text for m in tg.bot_messages(41)] == [shown_whole]
    assert tg.bot_messages(41)[0].message_id == shown.message_id  # completed in place


@pytest.mark.parametrize("method", ["sendMessage", "editMessageText"])
async def test_an_owed_answer_is_not_lost_when_the_flood_outlasts_the_run(
    tg: FakeTelegram, llm: FakeOpenAI, tmp_path: Path, method: str
) -> None:
    """Flood control starting on the final send or edit, lasting past a stop."""
    if method == "editMessageText":
        gate = asyncio.Event()
        llm.push(
            tool_calls([("memory", {"action": "status"})], content="Thinking… " * 30),
            gated(gate, text("the final answer")),
        )
    chat = tg.private(41)
    async with temp_database_url("sqlite", tmp_path) as url:
        async with bot_on(tg, llm, tmp_path, url) as services:
            chat.send("question")
            if method == "editMessageText":
                await tg.wait_for_message(41, contains="Thinking")
                tg.flood(
                    LONG_WAIT,
                    chat_id=41,
                    when=lambda params: "final answer" in str(params.get("text", "")),
                )
                gate.set()
            else:
                tg.flood(LONG_WAIT, chat_id=41)
            await until_undelivered(services)
            assert tg.flood_violations == []
        assert not any(
            "final answer" in m.text or "echo: question" in m.text for m in tg.bot_messages(41)
        )
        tg.end_flood()
        async with bot_on(tg, llm, tmp_path, url) as services:
            want = "the final answer" if method == "editMessageText" else "echo: question"
            sent = await tg.wait_for_message(41, contains=want)
            if method == "editMessageText":  # read back whole: what was said beside the call
                assert sent.text == ("Thinking… " * 30).strip() + "\n\n" + want, sent.text
            await until_empty(lambda: owed(services))
