"""Slash commands through Telegram: each answered in one plain-text message."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.telegram_server import FakeTelegram
from tests.telegram.harness import running_bot


async def ask(tg: FakeTelegram, command: str, expect: str) -> str:
    before = len(tg.bot_messages(42))
    tg.private(42).send(command)
    await tg.wait_for(lambda: len(tg.bot_messages(42)) > before)
    [answer] = tg.bot_messages(42)[before:]  # exactly one message per command
    assert expect in answer.text, answer.text
    assert answer.entities == []  # plain: "<text>" in a usage line is not markup
    return answer.text


@pytest.mark.parametrize("provider", ["reference", "lcm"])
async def test_commands(tg: FakeTelegram, llm: FakeOpenAI, tmp_path: Path, provider: str) -> None:
    async with running_bot(tg, llm, tmp_path, provider=provider, admin_ids=[7]) as bot:
        await ask(tg, "/start", "I'm mnemo")
        await ask(tg, "/help", "/compact")
        await ask(tg, "/compact", "Nothing to compact")
        for i in range(6):
            tg.private(42).send(f"note number {i} about zebras" if i == 1 else f"note number {i}")
            await tg.wait_for_message(42, contains=f"echo: note number {i}")
        status = await ask(tg, "/memory status", "Messages: 12")
        assert "default:telegram:42" in status
        await ask(tg, "/memory search zebras", "zebras")
        await ask(tg, "/memory search", "Usage: /memory search <text>")
        await ask(tg, "/memory bogus", "Unknown sub-command")
        compacted = await ask(tg, "/compact", "Compacted")
        assert "summar" in compacted
        status = await ask(tg, "/memory status", "Summaries: 1")
        context = re.search(r"Conversation kept in context: (\d+) tokens", status)
        assert context is not None and int(context[1]) > 0
        # The next turn's context, in parts that add up (the console shows the same).
        parts = re.search(
            r"Next turn's context: ([\d,]+) of ([\d,]+) tokens \(system prompt (\d+), "
            r"memory tool ([\d,]+), summaries (\d+), messages (\d+)\)",
            status,
        )
        assert parts is not None, status
        total, budget, *each = (int(p.replace(",", "")) for p in parts.groups())
        assert total == sum(each) and total <= budget and each[2] > 0  # the summary is in it
        # Nothing left to compact: the answer still gives the context's real size.
        await ask(tg, "/compact", f"Nothing to compact yet: the context is {context[1]} tokens")
        await ask(tg, "/memory rollback profile 1", "operators only")  # 42 is no admin
        await ask(tg, f"/help@{tg.username}", "/new")
        tg.private(7).send("/memory rollback profile 1")
        admin_answer = await tg.wait_for(lambda: tg.bot_messages(7))
        assert "operators only" not in admin_answer[0].text
        await bot.conversations.drain()
    # commands never reach the model
    assert all(
        not m["content"].startswith("/")
        for r in llm.requests
        for m in r["messages"]
        if m["role"] == "user"
    )


@pytest.mark.parametrize("provider", ["lcm", "simple"])
async def test_memory_search_counts_hits_names_their_conversation_and_shows_one(
    tg: FakeTelegram, llm: FakeOpenAI, tmp_path: Path, provider: str
) -> None:
    async with running_bot(tg, llm, tmp_path, provider=provider):
        for i in range(6):
            tg.private(42).send(f"kiwi fact {i}")
            await tg.wait_for_message(42, contains=f"echo: kiwi fact {i}")
        await ask(tg, "/new", "")
        tg.private(42).send("it's fine, the kiwi sleeps")
        await tg.wait_for_message(42, contains="echo: it's fine")
        found = await ask(tg, "/memory search kiwi", "matches for “kiwi”")
        # 7 messages and their 7 echoes hold the word: the answer says how many it shows.
        assert found.startswith("First 10 of 14 matches for “kiwi”:"), found
        # The conversation is named once, above its hits, with the dates of its messages
        # (all of one day here); the ten best are all in it.
        [group] = [line for line in found.splitlines() if line.startswith("From ")]
        assert re.fullmatch(r"From conversation “kiwi fact 0”, \d{4}-\d\d-\d\d:", group), found
        assert found.splitlines()[1] == group
        found = await ask(tg, "/memory search sleeping kiwis", "matches for “sleeping kiwis”")
        assert found.splitlines()[1] == "From this conversation:"  # the best hit is here
        best = found.splitlines()[2]
        assert best.endswith(": it's fine, the kiwi sleeps")
        message_id = re.search(r"\[message (\d+)\]", best)[1]  # type: ignore[index]
        shown = await ask(tg, f"/memory show {message_id}", f"Message {message_id} (user, ")
        assert shown.endswith("it's fine, the kiwi sleeps") and "this conversation" in shown
        # The query is echoed once, as typed; another user cannot read the message.
        quoted = await ask(tg, '/memory search "it\'s fine"', 'for “"it\'s fine"”')
        assert "\\'" not in quoted
        tg.private(43).send(f"/memory show {message_id}")
        [other] = await tg.wait_for(lambda: tg.bot_messages(43))
        assert other.text == "Not found."


async def test_a_newline_ends_the_command_word_like_a_space(
    tg: FakeTelegram, llm: FakeOpenAI, tmp_path: Path
) -> None:
    async with running_bot(tg, llm, tmp_path):
        status = await ask(tg, "/memory\nstatus", "Memory provider")
        assert "Unknown" not in status
        await ask(tg, "/memory\tprofile", "")  # any whitespace, not only a space
        await ask(tg, "/help\n", "/compact")
    assert llm.requests == []  # commands, not turns
