"""End to end: the real bot (python-telegram-bot, pool, reference provider) against the
fake Bot API and the fake OpenAI server."""

from __future__ import annotations

import asyncio
from pathlib import Path

from memory.contract.types import Session
from tests.fakes.openai_server import FakeOpenAI, gated, text
from tests.fakes.telegram_server import FakeTelegram
from tests.telegram.harness import running_bot
from tests.waits import eventually, scaled


def private_session(user_id: int, generation: int = 0) -> Session:
    sid = f"default:telegram:{user_id}" + (f"#{generation}" if generation else "")
    return Session(id=sid, user_id=user_id, channel="telegram")


async def test_round_trip_and_startup(tg: FakeTelegram, llm: FakeOpenAI, tmp_path: Path) -> None:
    async with running_bot(tg, llm, tmp_path) as bot:
        assert [c["command"] for c in tg.commands] == ["start", "help", "new", "compact", "memory"]
        alice = tg.private(42, "Alice")
        alice.send("hello there")
        reply = await tg.wait_for_message(42, contains="echo: hello there")
        assert reply.reply_to is None  # private chats need no quoting
        # Polled: a streamed answer is seen before its turn's rows commit.
        stats = await eventually(
            lambda: bot.provider.stats(private_session(42)), lambda s: s.message_count >= 2
        )
        assert stats.message_count == 2
        # the next turn sees the history
        alice.send("second")
        await tg.wait_for_message(42, contains="echo: second")
    sent = [m["content"] for m in llm.requests[-1]["messages"] if m["role"] != "system"]
    assert sent == ["hello there", "echo: hello there", "second"]


async def test_typing_is_shown_while_a_slow_answer_is_worked_on(
    tg: FakeTelegram, llm: FakeOpenAI, tmp_path: Path
) -> None:
    gate = asyncio.Event()
    llm.push(gated(gate, text("slow answer")))
    async with running_bot(tg, llm, tmp_path):
        tg.private(42).send("take your time")
        await tg.wait_for(lambda: tg.calls_to("sendChatAction", chat_id=42))
        assert tg.calls_to("sendChatAction", chat_id=42)[0].params["action"] == "typing"
        gate.set()
        await tg.wait_for_message(42, contains="slow answer")


async def test_markdown_is_sent_as_entities(
    tg: FakeTelegram, llm: FakeOpenAI, tmp_path: Path
) -> None:
    llm.push(text("Some **bold** and `code`"))
    async with running_bot(tg, llm, tmp_path):
        tg.private(42).send("format please")
        msg = await tg.wait_for_message(42, contains="Some bold and code")
    kinds = {e["type"] for e in msg.entities}
    assert kinds == {"bold", "code"}


async def test_two_chats_are_answered_in_parallel(
    tg: FakeTelegram, llm: FakeOpenAI, tmp_path: Path
) -> None:
    gate = asyncio.Event()
    llm.push(gated(gate, text("first answer")), gated(gate, text("second answer")))
    async with running_bot(tg, llm, tmp_path):
        tg.private(1).send("one")
        tg.private(2).send("two")
        # both turns reach the model before either is answered: they run side by side
        await asyncio.wait_for(llm.wait_for_requests(2), scaled(10))
        assert tg.bot_messages(1) == [] and tg.bot_messages(2) == []
        gate.set()
        answers = {
            (await tg.wait_for_message(1, contains="answer")).text,
            (await tg.wait_for_message(2, contains="answer")).text,
        }
    assert answers == {"first answer", "second answer"}


async def test_one_chat_is_answered_in_order(
    tg: FakeTelegram, llm: FakeOpenAI, tmp_path: Path
) -> None:
    async with running_bot(tg, llm, tmp_path) as bot:
        chat = tg.private(42)
        for i in range(4):
            chat.send(f"message {i}")
        await tg.wait_for(lambda: len(tg.bot_messages(42)) == 4)
        assert [m.text for m in tg.bot_messages(42)] == [f"echo: message {i}" for i in range(4)]
        stats = await eventually(
            lambda: bot.provider.stats(private_session(42)), lambda s: s.message_count >= 8
        )
        assert stats.message_count == 8


async def test_new_rotates_the_session(tg: FakeTelegram, llm: FakeOpenAI, tmp_path: Path) -> None:
    async with running_bot(tg, llm, tmp_path) as bot:
        chat = tg.private(42)
        chat.send("before")
        await tg.wait_for_message(42, contains="echo: before")
        chat.send("/new")
        await tg.wait_for_message(42, contains="Started a new conversation")
        chat.send("after")
        await tg.wait_for_message(42, contains="echo: after")
        old = await bot.provider.stats(private_session(42))
        new = await bot.provider.stats(private_session(42, generation=1))
    assert (old.message_count, new.message_count) == (2, 2)
    # the new conversation does not carry the old one's history to the model
    sent = [m["content"] for m in llm.requests[-1]["messages"] if m["role"] != "system"]
    assert sent == ["after"]


async def test_model_failure_is_told_plainly(
    tg: FakeTelegram, llm: FakeOpenAI, tmp_path: Path
) -> None:
    from tests.fakes.openai_server import error

    llm.push(error(500), error(500), error(500))
    async with running_bot(tg, llm, tmp_path) as bot:
        tg.private(42).send("are you there?")
        msg = await tg.wait_for_message(42, contains="Sorry")
        stats = await bot.provider.stats(private_session(42))
    assert "saved" in msg.text
    assert stats.message_count == 1  # the user's message, and no half answer


async def test_a_busy_chat_does_not_hold_up_the_others(
    tg: FakeTelegram, llm: FakeOpenAI, tmp_path: Path
) -> None:
    gate = asyncio.Event()
    llm.push(gated(gate, text("first answer")))
    async with running_bot(tg, llm, tmp_path, concurrent_updates=4):
        alice, bob = tg.private(1), tg.private(2)
        alice.send("a0")
        await llm.wait_for_requests(1)  # alice's first turn is held at the model
        for i in range(1, 20):
            alice.send(f"a{i}")
        bob.send("hello")
        # 19 updates of alice wait, more than the 4 slots: bob is answered all the same
        await tg.wait_for_message(2, contains="echo: hello")
        assert tg.bot_messages(1) == []
        gate.set()
        expected = ["first answer"] + [f"echo: a{i}" for i in range(1, 20)]
        await tg.wait_for(lambda: [m.text for m in tg.bot_messages(1)] == expected, within=30)
    # each of alice's turns saw the one before it
    last = [m["content"] for m in llm.requests[-1]["messages"] if m["role"] != "system"]
    assert last[-3:] == ["a18", "echo: a18", "a19"]
