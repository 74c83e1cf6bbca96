"""Getting replies through: splitting, flood control, server errors, refused
formatting, streaming edits."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from telegram import Bot

from bot.channels.telegram.delivery.sent import Target
from bot.channels.telegram.render.replies import EditPacer, ReplyStream, typing
from bot.channels.telegram.render.splitting import utf16_len
from tests.fakes.openai_server import FakeOpenAI, text
from tests.fakes.telegram_server import FakeTelegram
from tests.telegram.harness import running_bot


def long_reply() -> str:
    """About 20 kB of Markdown: paragraphs, emoji and one long code block."""
    paras = [f"Paragraph {i} 😀 " + "some words to read " * 22 for i in range(30)]
    code = "\n".join(f"    value_{i} = compute({i})  # step {i}" for i in range(200))
    return "\n\n".join(paras[:15]) + f"\n\n```python\n{code}\n```\n\n" + "\n\n".join(paras[15:])


async def test_a_20_kB_reply_is_split(tg: FakeTelegram, llm: FakeOpenAI, tmp_path: Path) -> None:
    reply = long_reply()
    assert len(reply.encode()) > 20_000
    llm.push(text(reply, chunk_size=2000))
    async with running_bot(tg, llm, tmp_path):
        tg.private(42).send("write a lot")
        await tg.wait_for_message(42, contains="Paragraph 29")
        messages = tg.bot_messages(42)
    assert len(messages) >= 5
    for m in messages:
        assert utf16_len(m.text) <= 4096
    shown = "".join(m.text for m in messages)
    positions = [shown.index(f"Paragraph {i} ") for i in range(30)]
    assert positions == sorted(positions)  # nothing lost, in order
    for i in range(200):
        assert f"value_{i} = compute({i})" in shown
    # the code block spans several messages, each showing its part as code
    with_code = [m for m in messages if "compute(" in m.text]
    assert len(with_code) >= 2
    for m in with_code:
        assert any(e["type"] == "pre" and e.get("language") == "python" for e in m.entities)
    assert "```" not in shown  # fences became entities, none left dangling


async def test_flood_control_is_honoured(tg: FakeTelegram, llm: FakeOpenAI, tmp_path: Path) -> None:
    tg.fail("sendMessage", 429, retry_after=1)
    async with running_bot(tg, llm, tmp_path):
        tg.private(42).send("hi")
        await tg.wait_for_message(42, contains="echo: hi")
    first, second = tg.calls_to("sendMessage")
    assert second.at - first.at >= 0.9  # waited as told (1 s), then succeeded
    assert len(tg.bot_messages(42)) == 1


async def test_server_errors_are_retried(tg: FakeTelegram, llm: FakeOpenAI, tmp_path: Path) -> None:
    tg.fail("sendMessage", 502, times=2)
    async with running_bot(tg, llm, tmp_path):
        tg.private(42).send("hi")
        await tg.wait_for_message(42, contains="echo: hi")
    assert len(tg.calls_to("sendMessage")) == 3


async def test_refused_formatting_falls_back_to_plain_text(
    tg: FakeTelegram, llm: FakeOpenAI, tmp_path: Path
) -> None:
    llm.push(text("This is **important** and `exact`."))
    tg.reject_entities()
    async with running_bot(tg, llm, tmp_path):
        tg.private(42).send("hi")
        msg = await tg.wait_for_message(42, contains="important")
    assert msg.text == "This is **important** and `exact`."  # the source, nothing lost
    assert msg.entities == []
    refused, sent = tg.calls_to("sendMessage")
    assert refused.params["entities"] and "entities" not in sent.params


@pytest.fixture
async def bot(tg: FakeTelegram) -> AsyncIterator[Bot]:
    async with Bot(tg.token, base_url=f"{tg.base_url}/bot") as b:
        yield b


async def test_streaming_edits_one_message_then_formats_it(tg: FakeTelegram, bot: Bot) -> None:
    gap = 0.05
    stream = ReplyStream(bot, Target(42), EditPacer(gap), interval=gap)
    await stream.on_delta("Hello")
    await tg.wait_for_message(42, contains="Hello")
    await stream.on_delta("Hello **wor")
    await tg.wait_for_message(42, contains="**wor")  # plain while streaming
    await stream.on_delta("Hello **world**")
    await tg.wait_for_message(42, contains="**world**")
    ids = await stream.finish("Hello **world**")
    [msg] = tg.bot_messages(42)
    assert ids == [msg.message_id]
    assert msg.text == "Hello world" and msg.entities[0]["type"] == "bold"
    edits = tg.calls_to("editMessageText")
    assert len(edits) >= 3
    for a, b in zip(edits, edits[1:], strict=False):
        assert b.at - a.at >= gap * 0.8  # the per-chat pacing held


async def test_streaming_past_one_message_and_shrinking(tg: FakeTelegram, bot: Bot) -> None:
    stream = ReplyStream(bot, Target(42), EditPacer(0.01), interval=0.01)
    long_text = "\n".join(f"line {i} " + "x" * 60 for i in range(100))  # ~7 kB: 2 messages
    await stream.on_delta(long_text)
    await tg.wait_for(lambda: len(tg.bot_messages(42)) == 2)
    # the model's final answer turned out short (a retried call): the extra message goes
    await stream.finish("short answer")
    assert [m.text for m in tg.bot_messages(42)] == ["short answer"]
    assert len(tg.calls_to("deleteMessage")) == 1


async def test_a_quick_answer_is_one_message_without_edits(tg: FakeTelegram, bot: Bot) -> None:
    stream = ReplyStream(bot, Target(42), EditPacer(1.0), interval=5.0)
    await stream.on_delta("par")
    await stream.on_delta("partial")
    await stream.finish("the *whole* answer")
    assert [m.text for m in tg.bot_messages(42)] == ["the whole answer"]
    assert tg.calls_to("editMessageText") == []
    assert not re.search("partial", str([c.params for c in tg.calls]))


async def test_typing_shows_only_for_a_turn_still_running(tg: FakeTelegram, bot: Bot) -> None:
    async with typing(bot, Target(42), after=0.3):
        pass  # an instant answer: no "typing…" call at all
    async with typing(bot, Target(43), after=0.01):
        await tg.wait_for(lambda: tg.calls_to("sendChatAction", chat_id=43))
    assert tg.calls_to("sendChatAction", chat_id=42) == []
    assert tg.calls_to("sendChatAction", chat_id=43)[0].params["action"] == "typing"
