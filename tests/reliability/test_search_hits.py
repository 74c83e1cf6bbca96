"""What the model reads back from a memory search, on the real bot and the fake servers:
the question being answered is never a hit (it is stored before the model is called), the
hits come grouped by conversation, each named once with the dates of its messages, and a
hit found through the message before it says "after"."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.telegram_server import FakeTelegram
from tests.reliability.conftest import ask
from tests.reliability.harness import live_bot, tool_text

ALICE = 42
ON_BOTH_DATABASES = pytest.mark.parametrize(
    "db_kind", [pytest.param("sqlite"), pytest.param("postgres", marks=pytest.mark.postgres)]
)


@ON_BOTH_DATABASES
@pytest.mark.parametrize("provider", ["simple", "lcm"])
async def test_the_model_never_finds_its_question_and_reads_hits_by_conversation(
    provider: str, db_kind: str, tg: FakeTelegram, llm: FakeOpenAI, tmp_path: Path
) -> None:
    async with live_bot(tmp_path, tg, llm, db_kind=db_kind, provider=provider):
        alice = tg.private(ALICE)
        assert "echo:" in await ask(tg, alice, "my axolotl is called Pink")
        assert "Started a new conversation" in await ask(tg, alice, "/new")
        assert "echo:" in await ask(tg, alice, "the axolotl likes worms")
        question = tool_text({"action": "search", "text": "axolotl", "mode": "full_text"})
        said = await ask(tg, alice, question)
        assert said.startswith("tool said: "), said
        # The user's message being answered holds "axolotl" too: it is not a hit.
        assert "TOOL" not in said.removeprefix("tool said: "), said
        lines = said.removeprefix("tool said: ").splitlines()
        groups = [line for line in lines if line.startswith("in ")]
        assert groups[0] == "in this conversation:", said
        assert re.fullmatch(r"in conversation “.*”, \d{4}-\d\d-\d\d:", groups[1]), said
        assert len(groups) == 2, said  # each conversation named once
        assert "the axolotl likes worms" in said and "my axolotl is called Pink" in said
        # The echoes hold the word themselves; nothing here is a reply.
        assert "replying to" not in said
        # Outside a turn, /memory search finds the last message like any other.
        found = await ask(tg, alice, "/memory search axolotl")
        assert "TOOL" in found, found
