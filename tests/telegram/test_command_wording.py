"""What the chat commands say, as a newcomer reads them through Telegram: answers that
agree with each other and say enough (issue 20, item 6)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.telegram_server import FakeTelegram
from tests.telegram.harness import running_bot
from tests.telegram.test_commands import ask

CLASS_NAMES = ("Compactor", "Searcher", "Explorer", "NoteStore", "Capabilities", "Provider,")


async def test_compact_status_and_usage_agree(
    tg: FakeTelegram, llm: FakeOpenAI, tmp_path: Path
) -> None:
    async with running_bot(tg, llm, tmp_path, provider="lcm") as bot:
        bot.settings.compaction.max_tokens = 10  # the context is above it after one turn
        tg.private(42).send("hello there, a first message")
        await tg.wait_for_message(42, contains="echo: hello there")
        status = await ask(tg, "/memory status", "automatic compaction above 10")
        for name in CLASS_NAMES:
            assert name not in status, status
        assert (
            "You can also use: /memory search, /memory ask, /memory why, /memory show, /memory expand"
            in status
        )
        assert "/memory notes" not in status  # lcm keeps no notes
        assert "rollback" not in status  # operator-only: /memory help marks it
        # Above the threshold, yet nothing to compact: the answer says why, in the same
        # terms as the status.
        nothing = await ask(tg, "/compact", "Nothing to compact yet: the context is ")
        assert "the newest 2 messages are always kept as they are" in nothing
        assert nothing.endswith("Automatic compaction (above 10 tokens) runs once there are some.")

        await ask(tg, "/compact now", "/compact takes no arguments. Usage: /compact — ")
        await ask(tg, "/new please", "/new takes no arguments. Usage: /new — start a new")
        await ask(tg, "/memory status", "Messages: 2")  # the same conversation: /new did not run

        help_lcm = await ask(tg, "/memory help", "/memory expand <summary_id>")
        assert "/memory notes" not in help_lcm
        await bot.conversations.drain()


async def test_simple_lists_its_own_sub_commands_and_names_a_missing_note(
    tg: FakeTelegram, llm: FakeOpenAI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # simple's default store_dir is relative
    async with running_bot(tg, llm, tmp_path, provider="simple") as bot:
        help_simple = await ask(tg, "/memory help", "/memory notes [name]")
        assert "/memory expand" not in help_simple
        await ask(
            tg, "/memory notes a b", "No note or archive is named “a b”; /memory notes lists them."
        )
        await bot.conversations.drain()
