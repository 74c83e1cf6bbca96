"""One chat flooding the bot does not hide the others: updates waiting behind their
chat's turn are parked in the database (bot.telegram.inbox), acknowledged, and handled
in order, after a restart too.

The real bot in-process against the fake Bot API, as in test_polling."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
import sqlalchemy as sa

from bot.app import Services
from bot.telegram.inbox import telegram_inbox
from memory.db import write_transaction
from memory.testing.databases import temp_database_url
from memory.types import utcnow
from tests.fakes.openai_server import FakeOpenAI, gated, text
from tests.fakes.telegram_server import FakeTelegram
from tests.telegram.harness import until_empty
from tests.telegram.test_polling import bot_on, free_port, offsets, user_texts

FLOOD = 105  # more than one getUpdates can see past the oldest waiting update


async def parked(services: Services) -> int:
    async with services.engine.connect() as conn:
        return int(await conn.scalar(sa.select(sa.func.count()).select_from(telegram_inbox)))


async def test_a_flooding_chat_does_not_hide_other_chats(
        tg: FakeTelegram, llm: FakeOpenAI, tmp_path: Path, db_kind: str) -> None:
    gate = asyncio.Event()
    llm.push(gated(gate, text("first answer")))
    alice, bob = tg.private(41), tg.private(42)
    async with temp_database_url(db_kind, tmp_path) as url, \
            bot_on(tg, llm, tmp_path, url) as services:
        alice.send("a0")                        # holds alice's turn at the model
        await llm.wait_for_requests(1)
        for i in range(1, FLOOD + 1):
            alice.send(f"a{i}")                 # all wait behind a0
        bob.send("hello")                       # update FLOOD + 2: beyond 100 of them
        await tg.wait_for_message(42, contains="echo: hello")
        await tg.wait_for(lambda: max(offsets(tg)) > FLOOD)  # acknowledged past the flood
        assert await parked(services) >= FLOOD - 20

        gate.set()
        await tg.wait_for(lambda: len(tg.bot_messages(41)) == FLOOD + 1, within=60)
        assert await user_texts(services, 41) == [f"a{i}" for i in range(FLOOD + 1)]
        assert [m.text for m in tg.bot_messages(41)][-1] == f"echo: a{FLOOD}"
        await until_empty(lambda: parked(services))  # each row goes once handled


async def test_parked_updates_are_handled_after_a_restart_in_order(
        tg: FakeTelegram, llm: FakeOpenAI, tmp_path: Path) -> None:
    llm.push(gated(asyncio.Event(), text("never")))  # the first run never gets past a0
    alice = tg.private(41)
    async with temp_database_url("sqlite", tmp_path) as url:
        async with bot_on(tg, llm, tmp_path, url, drain_s=0.2) as services:
            alice.send("a0")
            await llm.wait_for_requests(1)
            for i in range(1, FLOOD + 1):
                alice.send(f"a{i}")
            await tg.wait_for(lambda: max(offsets(tg)) > FLOOD + 1)  # all acknowledged
        assert tg.bot_messages(41) == []

        # Telegram will not send them again: the inbox has them.
        async with bot_on(tg, llm, tmp_path, url) as services:
            await tg.wait_for(lambda: any(m.text == f"echo: a{FLOOD}"
                                          for m in tg.bot_messages(41)), within=60)
            assert await user_texts(services, 41) == [f"a{i}" for i in range(FLOOD + 1)]
            await until_empty(lambda: parked(services))


async def test_an_unreadable_parked_update_does_not_block_the_others(
        tg: FakeTelegram, llm: FakeOpenAI, tmp_path: Path,
        caplog: pytest.LogCaptureFixture) -> None:
    message = {"message_id": 1, "date": 0, "chat": {"id": 41, "type": "private"},
               "from": {"id": 41, "is_bot": False, "first_name": "Ana"}, "text": "parked hi"}
    async with temp_database_url("sqlite", tmp_path) as url:
        async with bot_on(tg, llm, tmp_path, url) as services:  # migrates
            async with write_transaction(services.engine) as conn:
                await conn.execute(sa.insert(telegram_inbox), [
                    {"bot_id": tg.bot_id, "update_id": 500, "payload": "{not json",
                     "parked_at": utcnow()},
                    {"bot_id": tg.bot_id, "update_id": 501, "parked_at": utcnow(),
                     "payload": json.dumps({"update_id": 501, "message": message})}])
        async with bot_on(tg, llm, tmp_path, url) as services:
            await tg.wait_for_message(41, contains="echo: parked hi")
            assert await parked(services) == 1  # the unreadable one, left for a human
    assert "a parked update could not be read" in caplog.text


async def test_webhook_answers_a_flooding_chat_once_its_updates_are_parked(
        tg: FakeTelegram, llm: FakeOpenAI, tmp_path: Path) -> None:
    """Telegram holds a handful of webhook connections: POSTs answered only when their
    chat's turn comes would hold them all, and the other chats' updates with them."""
    gate = asyncio.Event()
    llm.push(gated(gate, text("first answer")))
    port = free_port()
    webhook = {"url": f"http://127.0.0.1:{port}/hook", "listen": "127.0.0.1", "port": port,
               "secret_token": "s3cret"}
    alice = tg.private(41)
    async with temp_database_url("sqlite", tmp_path) as url, \
            bot_on(tg, llm, tmp_path, url, webhook=webhook) as services:
        alice.send("a0")
        await llm.wait_for_requests(1)
        for i in range(1, 26):
            alice.send(f"a{i}")
        # every POST answered while a0's turn still holds the chat
        await tg.wait_for(lambda: len((tg.webhook or {}).get("responses", [])) == 26)
        assert set(tg.webhook["responses"]) == {200}
        assert len(llm.requests) == 1           # a0's turn is still at the model
        assert await parked(services) >= 5
        gate.set()
        await tg.wait_for_message(41, contains="echo: a25", within=30)
        assert await user_texts(services, 41) == [f"a{i}" for i in range(26)]
        await until_empty(lambda: parked(services))
