"""The hostile corpus as chat text and as every command's arguments, through the real
bot (Telegram handlers, pool, real provider and database): each input is answered or
refused in one clear line, no traceback reaches the user, and what is stored is the
message itself, once (text the databases cannot hold is stored with U+FFFD)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from bot.channels.telegram.handlers import MAX_INPUT_CHARS
from memory.text.sanitize import storable
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.telegram_server import FakeTelegram
from tests.reliability.conftest import ask
from tests.reliability.corpus import CORPUS, looks_like_traceback
from tests.reliability.harness import live_bot, session_id, stored_history
from tests.waits import eventually

# Each test covers both providers and both databases between its two runs.
CHAT_CASES = [
    pytest.param("sqlite", "lcm"),
    pytest.param("postgres", "simple", marks=pytest.mark.postgres),
]
COMMAND_CASES = [
    pytest.param("sqlite", "simple"),
    pytest.param("postgres", "lcm", marks=pytest.mark.postgres),
]

COMMAND_LINES = [
    "/memory {x}",
    "/memory search {x}",
    "/memory show {x}",
    "/memory expand {x}",
    "/memory constrain {x}",
    "/memory unconstrain {x}",
    "/memory rollback {x}",
    "/memory rollback profile {x}",
    "/memory notes {x}",
    "/memory status {x}",
    "/memory history {x}",
    "/memory forget confirm {x}",
    "/compact {x}",
    "/new {x}",
    "/start {x}",
]


@pytest.mark.parametrize(("db_kind", "provider"), CHAT_CASES)
async def test_chat_text_corpus(
    db_kind: str, provider: str, tg: FakeTelegram, llm: FakeOpenAI, tmp_path: Path
) -> None:
    async with live_bot(tmp_path, tg, llm, db_kind=db_kind, provider=provider) as bot:

        async def stored(uid: int) -> list[tuple[str, str]]:
            # Polled until the answer is stored: it is seen while it streams, before
            # its turn's rows commit.
            return await eventually(
                lambda: stored_history(bot.engine, session_id(uid)),
                lambda history: any(role == "assistant" for role, _ in history),
            )

        async def one(i: int, label: str, value: str) -> None:
            uid = 5000 + i
            chat = tg.private(uid)
            if value == "":
                # Telegram never delivers an empty text; nothing may be stored for it.
                chat.send(value)
                answer = await ask(tg, chat, "ping")
                assert "echo: ping" in answer, label
                assert await stored(uid) == [
                    ("user", "ping"),
                    ("assistant", "echo: ping"),
                ], label
                return
            answer = await ask(tg, chat, value)
            assert answer.strip(), label
            assert not looks_like_traceback(answer), (label, answer[:300])
            if not value.strip() or len(value) > MAX_INPUT_CHARS:
                assert await stored_history(bot.engine, session_id(uid)) == [], label  # refused
                assert "echo" not in answer, label
                return
            assert answer.startswith("echo:"), (label, answer[:200])
            history = await stored(uid)
            assert [role for role, _ in history] == ["user", "assistant"], label
            assert history[0][1] == storable(value), label

        await asyncio.gather(*(one(i, label, value) for i, (label, value) in enumerate(CORPUS)))


@pytest.mark.parametrize(("db_kind", "provider"), COMMAND_CASES)
async def test_command_argument_corpus(
    db_kind: str, provider: str, tg: FakeTelegram, llm: FakeOpenAI, tmp_path: Path
) -> None:
    # Admin, so rollback parses its arguments instead of refusing early.
    async with live_bot(
        tmp_path,
        tg,
        llm,
        db_kind=db_kind,
        provider=provider,
        telegram={"admin_ids": list(range(7000, 7100))},
    ) as bot:
        uid_base = 7000

        async def line(k: int, template: str) -> list[tuple[str, str]]:
            chat = tg.private(uid_base + k)
            await ask(tg, chat, "remember me")  # some history to search and compact
            bad = []
            for label, value in CORPUS:
                answer = await ask(tg, chat, template.format(x=value))
                if (
                    not answer.strip()
                    or looks_like_traceback(answer)
                    or "failed on my side" in answer
                ):
                    bad.append((template, label, answer[:200]))
            return bad

        results = await asyncio.gather(*(line(k, t) for k, t in enumerate(COMMAND_LINES)))
        problems = [p for batch in results for p in batch]
        assert problems == []
        # The stores stayed consistent through all of it.
        from memory.transfer.integrity import check_shared

        assert await check_shared(bot.engine) == []
