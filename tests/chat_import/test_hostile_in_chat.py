"""Hostile exports sent to the bot in a private chat (issue #32), on the fake Bot API: a
file nested past the depth limit, one whose reading needs more memory than the reader's
cap, one that takes longer than the time budget. Each is refused in one line, the bot
keeps answering, and the update is recorded as handled: redelivered after a restart,
it is neither downloaded nor read again (no crash loop).

The files are small, so that without the limits these tests fail by their assertions
(another refusal, or an offer) with a bounded cost (the 10,000-deep file took 300 MB
before; the wide one 140 MB), never by the machine's memory."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from bot.channels.telegram import imports
from bot.chat_import import sandbox
from memory.testing.databases import temp_database_url
from tests.chat_import.hostile import deep_export, wide_conversation
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.telegram_server import FakeTelegram
from tests.telegram.harness import running_bot
from tests.telegram.test_polling import bot_on, offsets, unacknowledged

REFUSED = "I can't import that file: "


async def test_a_deep_export_is_refused_once_and_not_read_again_after_a_restart(
    tg: FakeTelegram, llm: FakeOpenAI, tmp_path: Path, db_kind: str
) -> None:
    acknowledging = unacknowledged(tg)  # as if the bot died after refusing: redelivered
    async with temp_database_url(db_kind, tmp_path) as url:
        async with bot_on(tg, llm, tmp_path, url):
            tg.private(42).send_document(
                file_name="result.json", content=deep_export("telegram", 10_000)
            )
            refusal = await tg.wait_for_message(42, contains=REFUSED)
        assert refusal.text.startswith(f"{REFUSED}result.json: nested deeper than 64 levels")
        assert "\n" not in refusal.text
        acknowledging[0] = False
        async with bot_on(tg, llm, tmp_path, url):
            await tg.wait_for(lambda: 2 in offsets(tg))  # the redelivery, handled: skipped
            tg.private(42).send("still there?")
            await tg.wait_for_message(42, contains="echo: still there?")
    assert [m.text for m in tg.bot_messages(42)] == [refusal.text, "echo: still there?"]
    assert len(tg.calls_to("getFile")) == 1  # downloaded (and read) once


async def test_an_export_needing_more_memory_than_the_cap_is_refused(
    tg: FakeTelegram, llm: FakeOpenAI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Shallow and 2.7 MB, but read whole (one conversation) it takes ~140 MB.
    monkeypatch.setattr(imports, "IN_CHAT", dataclasses.replace(imports.IN_CHAT, memory_mb=48))
    async with running_bot(tg, llm, tmp_path):
        alice = tg.private(42)
        alice.send_document(file_name="conversations.json", content=wide_conversation(200_000))
        refusal = await tg.wait_for_message(42, contains=REFUSED)
        assert refusal.text == (
            f"{REFUSED}conversations.json: reading it needs more than 48 MB of memory: refused"
        )
        alice.send("still there?")
        await tg.wait_for_message(42, contains="echo: still there?")
    assert list((tmp_path / "data" / "imports").iterdir()) == []  # the file is gone


@pytest.mark.parametrize("where", ["reader", "parent"])
async def test_an_export_read_past_the_time_budget_is_refused(
    tg: FakeTelegram,
    llm: FakeOpenAI,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    where: str,
) -> None:
    # "reader": the child's deadline, checked as it reads; "parent": the child killed
    # by the bot, its deadline (with the start's margin) past before it answered.
    monkeypatch.setattr(imports, "IN_CHAT", dataclasses.replace(imports.IN_CHAT, seconds=0.0))
    if where == "parent":
        monkeypatch.setattr(sandbox, "START_S", 0.0)
    async with running_bot(tg, llm, tmp_path):
        tg.private(42).send_document(
            file_name="result.json",
            content=(Path(__file__).parent / "fixtures" / "telegram_chat.json").read_bytes(),
        )
        refusal = await tg.wait_for_message(42, contains=REFUSED)
        assert refusal.text == f"{REFUSED}result.json: reading it took longer than 0 s: refused"
