"""One chat flooding the bot does not hide the others: updates waiting behind their
chat's turn are parked in the database (bot.channels.telegram.delivery.inbox), acknowledged, and handled
in order, after a restart too.

The real bot in-process against the fake Bot API, as in test_polling."""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from bot.app.services import Services
from bot.channels.telegram.delivery.inbox import Inbox, telegram_inbox
from memory.contract.types import utcnow
from memory.storage.db import write_transaction
from memory.testing.databases import temp_database_url
from tests.fakes.openai_server import FakeOpenAI, gated, text
from tests.fakes.telegram_server import FakeTelegram
from tests.telegram.harness import until_empty
from tests.telegram.test_polling import bot_on, free_port, offsets, user_texts

FLOOD = 105  # more than one getUpdates can see past the oldest waiting update


async def parked(services: Services, besides: int | None = None) -> int:
    query = sa.select(sa.func.count()).select_from(telegram_inbox)
    if besides is not None:
        query = query.where(telegram_inbox.c.update_id != besides)
    async with services.engine.connect() as conn:
        return int(await conn.scalar(query))


@pytest.mark.slow  # about 20 s of flooding: `make test-slow`
async def test_a_flooding_chat_does_not_hide_other_chats(
    tg: FakeTelegram, llm: FakeOpenAI, tmp_path: Path, db_kind: str
) -> None:
    gate = asyncio.Event()
    llm.push(gated(gate, text("first answer")))
    alice, bob = tg.private(41), tg.private(42)
    async with (
        temp_database_url(db_kind, tmp_path) as url,
        bot_on(tg, llm, tmp_path, url) as services,
    ):
        alice.send("a0")  # holds alice's turn at the model
        await llm.wait_for_requests(1)
        for i in range(1, FLOOD + 1):
            alice.send(f"a{i}")  # all wait behind a0
        bob.send("hello")  # update FLOOD + 2: beyond 100 of them
        await tg.wait_for_message(42, contains="echo: hello")
        await tg.wait_for(lambda: max(offsets(tg)) > FLOOD)  # acknowledged past the flood
        assert await parked(services) >= FLOOD - 20

        gate.set()
        await tg.wait_for(lambda: len(tg.bot_messages(41)) == FLOOD + 1, within=60)
        assert await user_texts(services, 41) == [f"a{i}" for i in range(FLOOD + 1)]
        assert [m.text for m in tg.bot_messages(41)][-1] == f"echo: a{FLOOD}"
        await until_empty(lambda: parked(services))  # each row goes once handled


async def test_parked_updates_are_handled_after_a_restart_in_order(
    tg: FakeTelegram, llm: FakeOpenAI, tmp_path: Path
) -> None:
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
            await tg.wait_for(
                lambda: any(m.text == f"echo: a{FLOOD}" for m in tg.bot_messages(41)), within=60
            )
            assert await user_texts(services, 41) == [f"a{i}" for i in range(FLOOD + 1)]
            await until_empty(lambda: parked(services))


def parked_row(bot_id: int, update_id: int, chat: int, text: str, **columns: Any) -> dict[str, Any]:
    message = {
        "message_id": update_id,
        "date": 0,
        "chat": {"id": chat, "type": "private"},
        "from": {"id": chat, "is_bot": False, "first_name": "Ana"},
        "text": text,
    }
    return {
        "bot_id": bot_id,
        "update_id": update_id,
        "parked_at": utcnow(),
        "payload": json.dumps({"update_id": update_id, "message": message}),
        **columns,
    }


async def insert_parked(services: Services, rows: list[dict[str, Any]]) -> None:
    async with write_transaction(services.engine) as conn:
        await conn.execute(sa.insert(telegram_inbox), rows)


async def test_a_start_leaves_alone_the_rows_a_live_process_holds(
    tg: FakeTelegram, llm: FakeOpenAI, tmp_path: Path, db_kind: str
) -> None:
    """A rolling restart, or a webhook replica: another process parked a row and still
    renews its lease; a row whose owner stopped renewing (gone) is taken, once."""
    now = utcnow()
    async with temp_database_url(db_kind, tmp_path) as url:
        async with bot_on(tg, llm, tmp_path, url) as services:  # migrates
            await insert_parked(
                services,
                [
                    parked_row(
                        tg.bot_id,
                        600,
                        41,
                        "held elsewhere",
                        owner="live",
                        lease_until=now + timedelta(hours=1),
                    ),
                    parked_row(
                        tg.bot_id,
                        601,
                        43,
                        "orphan",
                        owner="gone",
                        lease_until=now - timedelta(seconds=1),
                    ),
                ],
            )
        async with bot_on(tg, llm, tmp_path, url) as services:
            await tg.wait_for_message(43, contains="echo: orphan")
            tg.private(42).send("ping")  # polled only once the start's replay ran
            await tg.wait_for_message(42, contains="echo: ping")
            await until_empty(lambda: parked(services, besides=600))  # 601 once handled
            async with services.engine.connect() as conn:
                left = (
                    await conn.execute(
                        sa.select(telegram_inbox.c.update_id, telegram_inbox.c.owner)
                    )
                ).all()
            assert [tuple(r) for r in left] == [(600, "live")]
            assert tg.bot_messages(41) == []
            assert await user_texts(services, 41) == []
            assert [m.text for m in tg.bot_messages(43)] == ["echo: orphan"]


async def test_two_processes_never_take_the_same_parked_row(engine: AsyncEngine) -> None:
    rows = [parked_row(7, i, 41, f"m{i}", owner="gone", lease_until=None) for i in range(1, 61)]
    async with write_transaction(engine) as conn:
        await conn.execute(sa.insert(telegram_inbox), rows)
    first, second = Inbox(engine, 7, "first"), Inbox(engine, 7, "second")
    a, b = await asyncio.gather(first.claim(), second.claim())
    taken = [uid for uid, _payload in a + b]
    assert sorted(taken) == list(range(1, 61))  # each row by exactly one of them
    assert [uid for uid, _ in a] == sorted(uid for uid, _ in a)  # oldest first
    assert await first.claim() == [] and await second.claim() == []  # leases now fresh


async def test_an_unreadable_parked_update_is_set_aside_once(
    tg: FakeTelegram,
    llm: FakeOpenAI,
    tmp_path: Path,
    db_kind: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with temp_database_url(db_kind, tmp_path) as url:
        async with bot_on(tg, llm, tmp_path, url) as services:  # migrates
            await insert_parked(
                services,
                [
                    {
                        "bot_id": tg.bot_id,
                        "update_id": 500,
                        "payload": '{not json "secret',
                        "parked_at": utcnow(),
                    },
                    parked_row(tg.bot_id, 501, 41, "parked hi"),
                ],
            )
        async with bot_on(tg, llm, tmp_path, url) as services:
            await tg.wait_for_message(41, contains="echo: parked hi")
            await until_empty(lambda: parked(services, besides=500))
            async with services.engine.connect() as conn:
                kept = (
                    await conn.execute(
                        sa.select(telegram_inbox.c.update_id, telegram_inbox.c.unreadable)
                    )
                ).all()
            assert [tuple(r) for r in kept] == [(500, True)]  # kept for a human
        assert "parked update 500 could not be read" in caplog.text
        assert "secret" not in caplog.text  # its size is logged, not its text
        caplog.clear()
        async with bot_on(tg, llm, tmp_path, url) as services:  # not reported again
            tg.private(42).send("ping")
            await tg.wait_for_message(42, contains="echo: ping")
            assert await parked(services) == 1
        assert "could not be read" not in caplog.text


async def test_webhook_answers_a_flooding_chat_once_its_updates_are_parked(
    tg: FakeTelegram, llm: FakeOpenAI, tmp_path: Path
) -> None:
    """Telegram holds a handful of webhook connections: POSTs answered only when their
    chat's turn comes would hold them all, and the other chats' updates with them."""
    gate = asyncio.Event()
    llm.push(gated(gate, text("first answer")))
    port = free_port()
    webhook = {
        "url": f"http://127.0.0.1:{port}/hook",
        "listen": "127.0.0.1",
        "port": port,
        "secret_token": "s3cret",
    }
    alice = tg.private(41)
    async with (
        temp_database_url("sqlite", tmp_path) as url,
        bot_on(tg, llm, tmp_path, url, webhook=webhook) as services,
    ):
        alice.send("a0")
        await llm.wait_for_requests(1)
        for i in range(1, 26):
            alice.send(f"a{i}")
        # every POST answered while a0's turn still holds the chat
        await tg.wait_for(lambda: len((tg.webhook or {}).get("responses", [])) == 26)
        assert set(tg.webhook["responses"]) == {200}
        assert len(llm.requests) == 1  # a0's turn is still at the model
        assert await parked(services) >= 5
        gate.set()
        await tg.wait_for_message(41, contains="echo: a25", within=30)
        assert await user_texts(services, 41) == [f"a{i}" for i in range(26)]
        await until_empty(lambda: parked(services))
