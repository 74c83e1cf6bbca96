"""Every request alternates user/assistant after the system prompt (bot.model.alternation), so
a model behind a strict chat template (Gemma's, Mistral's) answers every turn: after a
compaction, after a failed turn, with either provider. The fake server here refuses, as
llama.cpp does with such a template, anything else (its default, `FakeOpenAI.strict`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.fakes.openai_server import FakeOpenAI, error
from tests.fakes.telegram_server import FakeTelegram
from tests.telegram.harness import running_bot

pytestmark = pytest.mark.parametrize("provider", ["lcm", "simple"])


async def say(tg: FakeTelegram, text: str, expect: str) -> str:
    before = len(tg.bot_messages(42))
    tg.private(42).send(text)
    await tg.wait_for(lambda: len(tg.bot_messages(42)) > before)
    answer = tg.bot_messages(42)[before].text
    assert expect in answer, answer
    return answer


def roles(body: dict[str, Any]) -> list[str]:
    return [m["role"] for m in body["messages"]]


async def test_the_turn_after_a_compaction_alternates(
    tg: FakeTelegram, llm: FakeOpenAI, tmp_path: Path, provider: str, db_kind: str
) -> None:
    async with running_bot(tg, llm, tmp_path, provider=provider, db=db_kind) as bot:
        for i in range(6):
            await say(tg, f"note number {i} about the zebras", f"echo: note number {i}")
        await say(tg, "/compact", "Compacted")
        # The summary (a user message) and the kept tail, then the new message: the
        # request merges what would be two user turns in a row.
        await say(tg, "after the summary", "after the summary")
        await say(tg, "and once more", "echo: and once more")
        await bot.conversations.drain()
    assert llm.rejected == []
    after = llm.requests[-2]
    assert roles(after)[0] == "system" and roles(after)[1] == "user"
    assert "a short summary" in after["messages"][1]["content"]


async def test_the_message_a_failed_turn_left_is_answered_with_the_next(
    tg: FakeTelegram, llm: FakeOpenAI, tmp_path: Path, provider: str, db_kind: str
) -> None:
    async with running_bot(tg, llm, tmp_path, provider=provider, db=db_kind) as bot:
        await say(tg, "hello", "echo: hello")
        llm.push(error(500), error(500))  # both attempts of the turn fail
        await say(tg, "what about zebras", "language model")
        # "please try again": the unanswered message and this one go as one user turn.
        answer = await say(tg, "please try again", "please try again")
        assert "what about zebras" in answer
        await say(tg, "thanks", "echo: thanks")
        await bot.conversations.drain()
    assert llm.rejected == []
    merged = llm.requests[-2]["messages"]
    assert roles(llm.requests[-2]) == ["system", "user", "assistant", "user"]
    assert merged[-1]["content"] == "what about zebras\n\nplease try again"
