"""/memory forget and /memory search with text the databases cannot hold (NUL, a lone
UTF-16 surrogate), through the real bot on the fake servers, on both databases: the
text is cleaned as the chat path cleans it (U+FFFD), so it finds the message it was
stored as and forgets it, instead of failing as if the store were down."""

from __future__ import annotations

from pathlib import Path

import pytest

from memory.text.sanitize import storable
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.telegram_server import FakeTelegram
from tests.reliability.conftest import ask
from tests.reliability.harness import live_bot, session_id, stored_history
from tests.telegram.test_forget import code_of

CASES = [
    pytest.param("sqlite", "lcm"),
    pytest.param("sqlite", "simple"),
    pytest.param("postgres", "simple", marks=pytest.mark.postgres),
    pytest.param("postgres", "lcm", marks=pytest.mark.postgres),
]

HOSTILE = [
    ("nul", "Qvxnul\x00zeta"),
    ("lone_surrogate", "Qvxlone\ud800zeta"),
]


@pytest.mark.parametrize(("db_kind", "provider"), CASES)
async def test_forget_and_search_with_nul_and_lone_surrogate(
    db_kind: str, provider: str, tg: FakeTelegram, llm: FakeOpenAI, tmp_path: Path
) -> None:
    async with live_bot(tmp_path, tg, llm, db_kind=db_kind, provider=provider) as bot:
        for k, (label, word) in enumerate(HOSTILE):
            uid = 8100 + k
            chat = tg.private(uid)
            await ask(tg, chat, f"keep {word} please")
            await ask(tg, chat, "an unrelated line")
            stored = storable(word)
            history = await stored_history(bot.engine, session_id(uid))
            assert history[0] == ("user", f"keep {stored} please"), label

            found = await ask(tg, chat, f"/memory search {word}")
            assert stored in found, (label, found)
            assert "could not be reached" not in found, label

            preview = await ask(tg, chat, f"/memory forget {word}")
            # The user line and the echo that repeats it.
            assert "This would forget 2 message(s)" in preview, (label, preview)
            done = await ask(tg, chat, f"/memory forget confirm {code_of(preview)}")
            assert "Forgot 2 message(s)" in done, (label, done)

            after = await ask(tg, chat, f"/memory search {word}")
            assert "No matches" in after, (label, after)
            history = await stored_history(bot.engine, session_id(uid))
            assert all(stored not in content for _, content in history), label
            assert ("user", "an unrelated line") in history, label
