"""Faults around a running bot: the model failing (5xx, 429, timeouts, garbage, empty
answers, refusals), Telegram failing (flood control, refused formatting, 5xx, dropped
connections), the database down at start and mid-turn (our own cluster, stopped and
restarted), the simple provider's disk full. Each time the user gets the answer after a
retry or one clear line, nothing stored is lost or duplicated, other chats go on."""

from __future__ import annotations

import asyncio
import errno
import os
import subprocess
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest

from memory.contract.maintenance import IntegrityChecker
from memory.contract.tracing import unwrap
from memory.transfer.integrity import check_shared
from plugins.simple import notes_file
from tests.fakes.openai_server import (
    FakeOpenAI,
    empty,
    error,
    garbage,
    gated,
    hang,
    text,
)
from tests.fakes.telegram_server import FakeTelegram
from tests.reliability.conftest import ask
from tests.reliability.corpus import looks_like_traceback
from tests.reliability.faultproxy import FaultProxy
from tests.reliability.harness import (
    LiveBot,
    answered_history,
    live_bot,
    session_id,
    stored_history,
    tool_text,
)
from tests.reliability.process import REPO, write_config
from tests.waits import scaled


async def assert_consistent(bot: LiveBot) -> None:
    faults = await check_shared(bot.engine)
    inner = unwrap(bot.provider)
    if isinstance(inner, IntegrityChecker):
        faults += await inner.check_integrity()
    assert faults == []


LLM_CASES = [
    # label, scripted responses, answered after retries?
    ("http_500_thrice", [error(500), error(500), error(500)], False),
    ("http_503_once", [error(503)], True),
    ("http_429_retry_after", [error(429, retry_after=0.3)], True),
    ("timeout_once", [hang()], True),
    ("garbage_thrice", [garbage(), garbage(), garbage()], False),
    ("garbage_once", [garbage()], True),
    ("empty_answer", [empty()], False),
    ("http_400", [error(400)], False),
    ("http_401", [error(401)], False),
]


async def test_model_faults(tg: FakeTelegram, llm: FakeOpenAI, tmp_path: Path) -> None:
    async with live_bot(tmp_path, tg, llm, provider="lcm", llm={"timeout_s": 1}) as bot:
        for i, (label, script, recovers) in enumerate(LLM_CASES):
            uid = 100 + i
            chat = tg.private(uid)
            llm.push(*script)
            question = f"question {label}"
            answer = await ask(tg, chat, question, within=20)
            if recovers:
                await tg.wait_for_message(uid, contains=f"echo: {question}", within=20)
            else:
                assert answer.startswith("Sorry, I couldn't answer: "), (label, answer)
                assert "saved" in answer and not looks_like_traceback(answer), label
            assert llm.pending == 0, label
            # The same chat goes on; the failed question stays in the history, once, and
            # is answered with the next message (one user turn for the model).
            reply = "echo: next" if recovers else f"echo: {question}\n\nnext"
            assert reply in await ask(tg, chat, "next")
            expected = [("user", question)]
            if recovers:
                expected.append(("assistant", f"echo: {question}"))
            expected += [("user", "next"), ("assistant", reply)]
            assert await answered_history(bot.engine, session_id(uid), reply) == expected, label
        await assert_consistent(bot)


async def test_a_stuck_model_call_does_not_hold_other_chats(
    tg: FakeTelegram, llm: FakeOpenAI, tmp_path: Path
) -> None:
    async with live_bot(tmp_path, tg, llm) as bot:
        gate = asyncio.Event()
        llm.push(gated(gate, text("the slow answer")))
        tg.private(1).send("slow question")
        await llm.wait_for_requests(1)
        assert "echo: quick" in await ask(tg, tg.private(2), "quick")
        assert "echo: quick too" in await ask(tg, tg.private(3), "quick too")
        gate.set()
        await tg.wait_for_message(1, contains="the slow answer")
        assert await answered_history(bot.engine, session_id(1), "the slow answer") == [
            ("user", "slow question"),
            ("assistant", "the slow answer"),
        ]


async def test_telegram_faults(tg: FakeTelegram, llm: FakeOpenAI, tmp_path: Path) -> None:
    async with live_bot(tmp_path, tg, llm) as bot:
        chat = tg.private(1)
        sent: list[str] = []

        async def turn(question: str, contains: str) -> None:
            chat.send(question)
            sent.append(question)
            await tg.wait_for_message(1, contains=contains, within=20)

        tg.fail("sendMessage", 429, retry_after=1)
        await turn("flood", "echo: flood")
        tg.fail("sendMessage", 500)
        tg.fail("sendMessage", 502)
        await turn("server error", "echo: server error")
        tg.fail("sendChatAction", 500, times=5)  # the typing indicator is cosmetic
        await turn("no typing", "echo: no typing")
        llm.push(text("**bold** and `code`"))
        tg.reject_entities()
        await turn("formatted", "bold")
        shown = [m for m in tg.bot_messages(1) if "bold" in m.text]
        assert len(shown) == 1 and shown[0].entities == []  # plain text, sent once
        # Every answer was shown exactly once, every turn stored once.
        for question in ("flood", "server error", "no typing"):
            assert len([m for m in tg.bot_messages(1) if m.text == f"echo: {question}"]) == 1
        history = await answered_history(bot.engine, session_id(1), "**bold** and `code`")
        assert [c for r, c in history if r == "user"] == sent
        assert len([r for r, _ in history if r == "assistant"]) == len(sent)


def _port(url: str) -> int:
    return int(urlparse(url).port or 0)


async def test_dropped_connections(tg: FakeTelegram, llm: FakeOpenAI, tmp_path: Path) -> None:
    async with (
        FaultProxy(tg.port) as tgp,
        FaultProxy(_port(llm.base_url)) as llmp,
        live_bot(
            tmp_path, tg, llm, telegram={"base_url": tgp.url()}, llm={"base_url": llmp.url("/v1")}
        ) as bot,
    ):
        chat = tg.private(1)
        assert "echo: one" in await ask(tg, chat, "one")
        # Telegram unreachable for a while: the long poll is cut, reconnects are refused.
        tgp.refusing = True
        tgp.drop_all()
        chat.send("two")
        await asyncio.sleep(1.0)
        tgp.refusing = False
        await tg.wait_for_message(1, contains="echo: two", within=30)
        # The model's connection cut mid-answer: retried, answered once.
        gate = asyncio.Event()
        llm.push(gated(gate, text("never delivered")))
        chat.send("three")
        await llm.wait_for_requests(len(llm.requests) + 1)
        llmp.drop_all()
        gate.set()
        await tg.wait_for_message(1, contains="echo: three", within=20)
        assert tgp.dropped and llmp.dropped
        assert await answered_history(bot.engine, session_id(1), "echo: three") == [
            ("user", "one"),
            ("assistant", "echo: one"),
            ("user", "two"),
            ("assistant", "echo: two"),
            ("user", "three"),
            ("assistant", "echo: three"),
        ]


@pytest.mark.parametrize(
    "url",
    [
        "postgresql+psycopg://postgres@127.0.0.1:1/nothing_listens",
        "sqlite+aiosqlite:////proc/no/such/dir/mnemo.db",
    ],
)
def test_database_unavailable_at_start(url: str, tmp_path: Path) -> None:
    config = write_config(
        tmp_path / "config.yaml",
        {
            "database": {"url": url},
            "llm": {"api_key": "k", "base_url": "http://127.0.0.1:1/v1"},
            "telegram": {"token": "1:abcdefgh", "base_url": "http://127.0.0.1:1"},
            "reflect": {"enabled": False},
        },
    )
    done = subprocess.run(
        [sys.executable, "-m", "bot.cli", "--config", str(config), "run"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=scaled(60),
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert done.returncode == 3, done.stderr[-2000:]
    assert not looks_like_traceback(done.stderr), done.stderr[-2000:]
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr


def _tree(root: Path) -> list[Path]:
    return sorted(root.rglob("*"))


class _FullDisk:
    """`os` for the notes file module, with a disk that is full at fsync time."""

    def __getattr__(self, name: str) -> Any:
        return getattr(os, name)

    @staticmethod
    def fsync(fd: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


async def test_disk_full_for_the_simple_notes_file(
    tg: FakeTelegram, llm: FakeOpenAI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with live_bot(tmp_path, tg, llm, provider="simple", compaction={"keep_tail": 1}) as bot:
        chat = tg.private(1)
        for i in range(3):
            await ask(tg, chat, f"message {i}")
        assert "added" in await ask(
            tg, chat, tool_text({"action": "note_add", "name": "kept", "content": "a note"})
        )
        store = Path(bot.settings.memory.simple.store_dir)
        files = _tree(store)
        notes = [p for p in files if p.suffix == ".mem"]
        assert len(notes) == 1
        saved = notes[0].read_bytes()

        monkeypatch.setattr(notes_file, "os", _FullDisk())
        answer = await ask(
            tg, chat, tool_text({"action": "note_add", "name": "lost", "content": "no room"})
        )
        assert answer.startswith("tool said: error"), answer
        compact = await ask(tg, chat, "/compact")
        assert "nothing was changed" in compact and not looks_like_traceback(compact), compact
        assert "echo: still here" in await ask(tg, chat, "still here")
        assert notes[0].read_bytes() == saved
        assert _tree(store) == files  # no temp file left behind
        monkeypatch.undo()

        assert "Compacted" in await ask(tg, chat, "/compact")
        listing = await ask(tg, chat, "/memory notes")
        assert "kept" in listing and "lost" not in listing
        assert listing.count("Archive") == 1, listing
        users = [c for r, c in await stored_history(bot.engine, session_id(1)) if r == "user"]
        assert len(users) == len(set(users)) == 6
        await assert_consistent(bot)
