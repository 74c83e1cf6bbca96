"""A message stored but not answered before a stop or crash is answered at the next
start (bot.channels.telegram.delivery.resume), once; a turn that ended with an apology is not. An answer
stored but never sent (Telegram down past the retries) is sent then, and only that one.

The real bot in-process against the fake Bot API, as in test_polling."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from pathlib import Path

import pytest
import sqlalchemy as sa

from bot.app.services import Services
from bot.channels.telegram.delivery.handled import telegram_updates
from bot.channels.telegram.handlers import FAILED
from memory.storage.db import create_engine, write_transaction
from memory.testing.databases import temp_database_url
from tests.fakes.openai_server import FakeOpenAI, error, gated, text
from tests.fakes.telegram_server import FakeTelegram, User
from tests.telegram.harness import answer_origins, until_empty
from tests.telegram.test_polling import bot_on, user_texts


async def owed(services: Services) -> list[int]:
    """Update ids still marked as owed an answer."""
    async with services.engine.connect() as conn:
        rows = await conn.execute(
            sa.select(telegram_updates.c.update_id).where(telegram_updates.c.resume.is_(True))
        )
        return sorted(rows.scalars())


@pytest.mark.parametrize("provider", ["simple", "lcm"])
async def test_a_message_cut_off_by_a_stop_is_answered_at_the_next_start(
    tg: FakeTelegram, llm: FakeOpenAI, tmp_path: Path, db_kind: str, provider: str
) -> None:
    llm.push(gated(asyncio.Event(), text("never")))  # the first run stops at the model
    alice = tg.private(41)
    async with temp_database_url(db_kind, tmp_path) as url:
        async with bot_on(tg, llm, tmp_path, url, drain_s=0.2, provider=provider) as services:
            sent = alice.send("what is the capital of Portugal?")
            await llm.wait_for_requests(1)  # stored; the stop cancels the turn
        assert tg.bot_messages(41) == []

        async with bot_on(tg, llm, tmp_path, url, provider=provider) as services:
            reply = await tg.wait_for_message(41, contains="echo: what is the capital")
            assert reply.reply_to == sent["message_id"]  # says what it answers
            await until_empty(lambda: owed(services))
            # Linked to where it went, as an answer given at once is (memory/actions/origins.py).
            assert list((await answer_origins(services.engine, 41)).values()) == [reply.message_id]
            assert await user_texts(services, 41) == ["what is the capital of Portugal?"]

        # Answered: a third start owes nothing and asks the model nothing.
        async with bot_on(tg, llm, tmp_path, url, provider=provider):
            await asyncio.sleep(0.5)
    assert len(llm.requests) == 2
    assert [m.text for m in tg.bot_messages(41)] == ["echo: what is the capital of Portugal?"]


async def test_answered_and_apologised_turns_are_not_answered_again(
    tg: FakeTelegram, llm: FakeOpenAI, tmp_path: Path
) -> None:
    alice, bob = tg.private(41), tg.private(42)
    async with temp_database_url("sqlite", tmp_path) as url:
        async with bot_on(tg, llm, tmp_path, url) as services:
            alice.send("hello")
            await tg.wait_for_message(41, contains="echo: hello")
            llm.push(error(500), error(500))  # both attempts (max_retries 1) fail
            bob.send("are you there?")
            await tg.wait_for_message(42, contains="Sorry, I couldn't answer")
            assert 2 not in await owed(services)  # an apology clears the mark at once
        engine = create_engine(url)
        try:
            async with engine.connect() as conn:  # answers sent are cleared by the stop
                assert (
                    await conn.execute(
                        sa.select(telegram_updates.c.update_id).where(telegram_updates.c.resume)
                    )
                ).all() == []
            # As a crash within SETTLE_EVERY_S of alice's answer would leave her row:
            async with write_transaction(engine) as conn:
                await conn.execute(
                    sa.update(telegram_updates)
                    .values(resume=True)
                    .where(telegram_updates.c.update_id == 1)
                )
        finally:
            await engine.dispose()
        requests = len(llm.requests)
        async with bot_on(tg, llm, tmp_path, url) as services:
            await until_empty(lambda: owed(services))  # looked at: answered already
    assert len(llm.requests) == requests  # the model was not asked again
    assert [m.text for m in tg.bot_messages(41)] == ["echo: hello"]
    assert len(tg.bot_messages(42)) == 1


async def test_the_owed_answer_goes_to_its_forum_topic(
    tg: FakeTelegram, llm: FakeOpenAI, tmp_path: Path
) -> None:
    llm.push(gated(asyncio.Event(), text("never")))
    topic = tg.group(-1001, forum=True).topic(7)
    async with temp_database_url("sqlite", tmp_path) as url:
        async with bot_on(tg, llm, tmp_path, url, drain_s=0.2, group_mode="always"):
            sent = topic.send("summarise the thread", user=User(5, "Ana"))
            await llm.wait_for_requests(1)
        async with bot_on(tg, llm, tmp_path, url, group_mode="always"):
            reply = await tg.wait_for_message(-1001, contains="summarise the thread")
    assert reply.thread_id == 7
    assert reply.reply_to == sent["message_id"]


async def test_every_session_cut_off_is_answered(
    tg: FakeTelegram, llm: FakeOpenAI, tmp_path: Path
) -> None:
    stuck = asyncio.Event()
    chats = [tg.private(100 + i) for i in range(6)]  # more than RESUME_AT_ONCE
    llm.push(*(gated(stuck, text("never")) for _ in chats))
    async with temp_database_url("sqlite", tmp_path) as url:
        async with bot_on(tg, llm, tmp_path, url, drain_s=0.2):
            for i, chat in enumerate(chats):
                chat.send(f"question {i}")
            await llm.wait_for_requests(len(chats))
        async with bot_on(tg, llm, tmp_path, url) as services:
            for i in range(len(chats)):
                await tg.wait_for_message(100 + i, contains=f"echo: question {i}")
            await until_empty(lambda: owed(services))
    assert all(len(tg.bot_messages(100 + i)) == 1 for i in range(len(chats)))


async def undelivered(services: Services) -> list[int]:
    """Update ids marked as answered in the history but never sent."""
    async with services.engine.connect() as conn:
        rows = await conn.execute(
            sa.select(telegram_updates.c.update_id).where(telegram_updates.c.undelivered.is_(True))
        )
        return sorted(rows.scalars())


async def until_undelivered(services: Services, within: float = 10.0, *, count: int = 1) -> None:
    """Until `count` answers are marked undelivered (a database write: polled)."""
    for _ in range(int(within / 0.05)):
        if len(await undelivered(services)) >= count:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"not {count} answer(s) marked undelivered within {within} s")


def fail_answers_until_healed(tg: FakeTelegram, contains: str) -> Callable[[], None]:
    """Every attempt at sending the answer gets a 502 (past delivery.with_retry's
    MAX_ATTEMPTS and the outbox's later tries) until the returned function is called."""
    healed = asyncio.Event()
    tg.fail(
        "sendMessage",
        502,
        times=10_000,
        when=lambda params: not healed.is_set() and contains in str(params.get("text", "")),
    )
    return healed.set


@pytest.mark.parametrize("provider", ["simple", "lcm"])
async def test_an_answer_that_could_not_be_sent_is_sent_at_the_next_start(
    tg: FakeTelegram, llm: FakeOpenAI, tmp_path: Path, db_kind: str, provider: str
) -> None:
    alice = tg.private(41)
    heal = fail_answers_until_healed(tg, "echo: where is Lisbon")
    async with temp_database_url(db_kind, tmp_path) as url:
        async with bot_on(tg, llm, tmp_path, url, provider=provider) as services:
            sent = alice.send("where is Lisbon?")
            await until_undelivered(services)  # marked at once
        assert tg.bot_messages(41) == []
        requests = len(llm.requests)
        heal()

        async with bot_on(tg, llm, tmp_path, url, provider=provider) as services:
            reply = await tg.wait_for_message(41, contains="echo: where is Lisbon?")
            assert reply.reply_to == sent["message_id"]  # says what it answers
            await until_empty(lambda: owed(services))
            assert await undelivered(services) == []

        # Sent: a third start sends nothing more.
        async with bot_on(tg, llm, tmp_path, url, provider=provider):
            await asyncio.sleep(0.5)
    assert len(llm.requests) == requests  # the stored answer, not a new one
    assert [m.text for m in tg.bot_messages(41)] == ["echo: where is Lisbon?"]


async def test_an_answer_that_could_not_be_sent_is_sent_later_without_a_restart(
    tg: FakeTelegram, llm: FakeOpenAI, tmp_path: Path
) -> None:
    alice = tg.private(41)
    heal = fail_answers_until_healed(tg, "echo: where is Lisbon")
    async with (
        temp_database_url("sqlite", tmp_path) as url,
        bot_on(tg, llm, tmp_path, url) as services,
    ):
        sent = alice.send("where is Lisbon?")
        await until_undelivered(services)
        heal()  # Telegram is back: the outbox sends it
        reply = await tg.wait_for_message(41, contains="echo: where is Lisbon?")
        assert reply.reply_to == sent["message_id"]
        # Cleared once its origin is recorded, not in the batch (which never has it).
        await until_empty(lambda: undelivered(services))
    assert len(llm.requests) == 1


async def test_an_answer_sent_before_a_crash_is_not_sent_again(
    tg: FakeTelegram, llm: FakeOpenAI, tmp_path: Path, db_kind: str
) -> None:
    alice = tg.private(41)
    async with temp_database_url(db_kind, tmp_path) as url:
        async with bot_on(tg, llm, tmp_path, url):
            alice.send("hello")
            await tg.wait_for_message(41, contains="echo: hello")
        # As a crash within SETTLE_EVERY_S of the answer leaves its row: still owed.
        engine = create_engine(url)
        try:
            async with write_transaction(engine) as conn:
                await conn.execute(sa.update(telegram_updates).values(resume=True))
        finally:
            await engine.dispose()
        requests = len(llm.requests)
        async with bot_on(tg, llm, tmp_path, url) as services:
            await until_empty(lambda: owed(services))
            await asyncio.sleep(0.5)
    assert len(llm.requests) == requests
    assert [m.text for m in tg.bot_messages(41)] == ["echo: hello"]


async def test_every_missed_answer_is_sent_in_order_even_once_the_user_wrote_again(
    tg: FakeTelegram, llm: FakeOpenAI, tmp_path: Path
) -> None:
    alice = tg.private(41)
    heal = fail_answers_until_healed(tg, "echo: first")
    async with temp_database_url("sqlite", tmp_path) as url:
        async with bot_on(tg, llm, tmp_path, url) as services:
            first = alice.send("first")
            await until_undelivered(services)
            second = alice.send("second")  # its answer queues behind the first
            await llm.wait_for_requests(2)
            await until_undelivered(services, count=2)
        assert tg.bot_messages(41) == []  # nothing overtook the first answer
        heal()
        async with bot_on(tg, llm, tmp_path, url) as services:
            await tg.wait_for(lambda: len(tg.bot_messages(41)) == 2)
            await until_empty(lambda: owed(services))
    assert [(m.text, m.reply_to) for m in tg.bot_messages(41)] == [
        ("echo: first", first["message_id"]),
        ("echo: second", second["message_id"]),
    ]
    assert len(llm.requests) == 2


async def test_a_row_marked_before_answers_were_kept_reads_the_history(
    tg: FakeTelegram, llm: FakeOpenAI, tmp_path: Path
) -> None:
    """A row marked undelivered by a version without its text (before bot_0006): the
    latest answer is read back from the history, once, with no model call."""
    alice = tg.private(41)
    async with temp_database_url("sqlite", tmp_path) as url:
        async with bot_on(tg, llm, tmp_path, url):
            sent = alice.send("hello")
            await tg.wait_for_message(41, contains="echo: hello")
        engine = create_engine(url)
        try:
            async with write_transaction(engine) as conn:
                await conn.execute(
                    sa.update(telegram_updates).values(resume=True, undelivered=True, answer=None)
                )
        finally:
            await engine.dispose()
        async with bot_on(tg, llm, tmp_path, url) as services:
            await tg.wait_for(lambda: len(tg.bot_messages(41)) == 2)
            await until_empty(lambda: owed(services))
    assert [(m.text, m.reply_to) for m in tg.bot_messages(41)] == [
        ("echo: hello", None),
        ("echo: hello", sent["message_id"]),
    ]
    assert len(llm.requests) == 1


async def test_an_answer_telegram_refused_is_not_sent_again_at_the_next_start(
    tg: FakeTelegram, llm: FakeOpenAI, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A 400 on the send (the chat is gone, the bot was blocked) is not worth another
    try: its row is cleared at once, so the restart does not take the stored answer,
    which has no origin, for one a crash kept from Telegram."""
    alice = tg.private(41)
    tg.fail(
        "sendMessage",
        400,
        description="Bad Request: chat not found",
        when=lambda params: "echo: hello" in str(params.get("text", "")),
    )
    async with temp_database_url("sqlite", tmp_path) as url:
        async with bot_on(tg, llm, tmp_path, url) as services:
            alice.send("hello")
            await llm.wait_for_requests(1)
            await until_empty(lambda: owed(services))  # cleared at once, not in a batch
        caplog.set_level(logging.INFO, logger="bot.channels.telegram.delivery.resume")
        async with bot_on(tg, llm, tmp_path, url):
            for _ in range(200):  # until the start has looked at what was owed
                if "owed answers looked at" in caplog.text:
                    break
                await asyncio.sleep(0.05)
            assert "owed answers looked at: 0 session(s)" in caplog.text
    # The refused answer is never shown (nor tried again); the user heard one apology,
    # from the handler that failed, not from the restart.
    assert [m.text for m in tg.bot_messages(41)] == [FAILED]
    assert sum("echo: hello" in str(c.params.get("text")) for c in tg.calls_to("sendMessage")) == 1


async def test_an_owed_answer_the_outbox_sent_before_a_crash_is_not_sent_again(
    tg: FakeTelegram, llm: FakeOpenAI, tmp_path: Path, db_kind: str
) -> None:
    """The outbox sent an answer marked undelivered and recorded its origin; the crash
    came before the mark was cleared. The origin says it went: nothing is resent."""
    alice = tg.private(41)
    async with temp_database_url(db_kind, tmp_path) as url:
        async with bot_on(tg, llm, tmp_path, url) as services:
            alice.send("hello")
            await tg.wait_for_message(41, contains="echo: hello")
            await answer_origins(services.engine, 41)
        engine = create_engine(url)
        try:
            async with write_transaction(engine) as conn:
                await conn.execute(
                    sa.update(telegram_updates).values(
                        resume=True, undelivered=True, answer="echo: hello"
                    )
                )
        finally:
            await engine.dispose()
        async with bot_on(tg, llm, tmp_path, url) as services:
            await until_empty(lambda: owed(services))
    assert [m.text for m in tg.bot_messages(41)] == ["echo: hello"]
