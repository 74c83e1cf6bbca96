"""Updates are acknowledged to Telegram only once durable, and redeliveries are skipped.

The real bot in-process (build_services: real provider, real database; our polling loop
or webhook against the fake Bot API), as `mnemo run` builds it."""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from telegram import Update

from bot.app.services import Services, build_services
from bot.channels.telegram.channel import build_application, running
from bot.channels.telegram.delivery.handled import HandledUpdates, telegram_updates
from bot.config.settings import Settings
from bot.conversation.commands import HELP
from bot.conversation.service import Conversations
from bot.model.client import LLMClient
from memory.compaction.summarizer import StaticSummarizer
from memory.contract.capabilities import ProviderContext
from memory.storage.history import conversations, messages
from memory.testing.databases import temp_database_url, temp_engine
from memory.testing.reference import create as create_reference
from tests.fakes.openai_server import FakeOpenAI, gated, text
from tests.fakes.telegram_server import FakeTelegram, User


def settings_for(
    tg: FakeTelegram,
    llm: FakeOpenAI,
    tmp_path: Path,
    url: str,
    provider: str,
    *,
    transcription_model: str = "",
    vision: bool = False,
    **telegram: Any,
) -> Settings:
    return Settings.model_validate(
        {
            "database": {"url": url},
            "data_dir": str(tmp_path / "data"),
            "llm": {
                "base_url": llm.base_url,
                "api_key": "test-key",
                "timeout_s": 5,
                "max_retries": 1,
                "transcription_model": transcription_model,
                "vision": vision,
            },
            "telegram": {
                "token": tg.token,
                "base_url": tg.base_url,
                "concurrent_updates": 8,
                "stream_edit_interval_s": 1,
                **telegram,
            },
            "memory": {
                "provider": provider,
                "fresh_tail": 4,
                "simple": {"store_dir": str(tmp_path / "data" / "memory")},
            },
            "compaction": {"max_tokens": -1, "keep_tail": 2},
            "reflect": {"enabled": False},
        }
    )


@asynccontextmanager
async def bot_on(
    tg: FakeTelegram,
    llm: FakeOpenAI,
    tmp_path: Path,
    url: str,
    *,
    provider: str = "simple",
    drain_s: float = 2,
    transcription_model: str = "",
    vision: bool = False,
    **telegram: Any,
) -> AsyncIterator[Services]:
    settings = settings_for(
        tg,
        llm,
        tmp_path,
        url,
        provider,
        transcription_model=transcription_model,
        vision=vision,
        **telegram,
    )
    services = await build_services(
        settings,
        llm=LLMClient(settings.llm, backoff_s=0.01),
        summarizer=StaticSummarizer("summary"),
    )
    try:
        app = build_application(settings, services.conversations, engine=services.engine)
        async with running(app, settings, poll_timeout=1, drain_s=drain_s):
            yield services
    finally:
        await services.close()


async def user_texts(services: Services, chat: int) -> list[str]:
    query = (
        sa.select(messages.c.content)
        .join(conversations, conversations.c.id == messages.c.conversation_id)
        .where(conversations.c.session_id == f"default:telegram:{chat}", messages.c.role == "user")
        .order_by(messages.c.seq)
    )
    async with services.engine.connect() as conn:
        return list((await conn.execute(query)).scalars())


def offsets(tg: FakeTelegram) -> list[int]:
    return [int(c.params.get("offset") or 0) for c in tg.calls_to("getUpdates")]


def unacknowledged(tg: FakeTelegram) -> list[bool]:
    """Every getUpdates that would acknowledge something fails while the flag returned
    is `[True]`: as if the bot died after handling, before Telegram heard of it."""
    acknowledging = [True]
    tg.fail(
        "getUpdates",
        502,
        times=10_000,
        when=lambda params: acknowledging[0] and bool(params.get("offset")),
    )
    return acknowledging


async def test_offset_waits_for_the_message_to_be_stored(
    tg: FakeTelegram, llm: FakeOpenAI, tmp_path: Path, db_kind: str
) -> None:
    gate = asyncio.Event()
    llm.push(gated(gate, text("first answer")))
    alice, bob = tg.private(41), tg.private(42)
    async with (
        temp_database_url(db_kind, tmp_path) as url,
        bot_on(tg, llm, tmp_path, url) as services,
    ):
        alice.send("m1")  # update 1: its turn hangs at the model
        await llm.wait_for_requests(1)  # so m1 is stored (appended before the call)
        alice.send("m2")  # update 2: waits for alice's turn
        bob.send("b1")  # update 3: another chat, answered meanwhile
        await tg.wait_for_message(42, contains="echo: b1")
        # Update 1 and 3 are durable, 2 is not: acknowledged up to 2, never past it.
        await tg.wait_for(lambda: 2 in offsets(tg))
        assert max(offsets(tg)) == 2
        assert await user_texts(services, 41) == ["m1"]

        gate.set()
        await tg.wait_for_message(41, contains="echo: m2")
        await tg.wait_for(lambda: 4 in offsets(tg))
        assert await user_texts(services, 41) == ["m1", "m2"]
        assert [m.text for m in tg.bot_messages(41)] == ["first answer", "echo: m2"]
        async with services.engine.connect() as conn:
            handled = sorted(
                (await conn.execute(sa.select(telegram_updates.c.update_id))).scalars()
            )
        assert handled == [1, 2, 3]  # written with each message


async def test_an_update_sent_again_while_it_waits_is_parsed_once(
    tg: FakeTelegram, llm: FakeOpenAI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    parsed: list[int] = []
    de_json = Update.de_json

    def counting(cls: type[Update], data: dict[str, Any], bot: Any = None) -> Update:
        parsed.append(data["update_id"])
        return de_json(data, bot)

    monkeypatch.setattr(Update, "de_json", classmethod(counting))
    gate = asyncio.Event()
    llm.push(gated(gate, text("first answer")))
    alice = tg.private(41)
    async with (
        temp_database_url("sqlite", tmp_path) as url,
        bot_on(tg, llm, tmp_path, url) as services,
    ):
        alice.send("m1")  # update 1: its turn hangs at the model
        await llm.wait_for_requests(1)
        alice.send("m2")  # update 2: waits undurable behind it
        # Telegram sends update 2 again with every poll from offset 2 meanwhile.
        await tg.wait_for(lambda: offsets(tg).count(2) >= 3)
        assert parsed == [1, 2]
        gate.set()
        await tg.wait_for_message(41, contains="echo: m2")
        await tg.wait_for(lambda: 3 in offsets(tg))
        assert await user_texts(services, 41) == ["m1", "m2"]
    assert parsed == [1, 2]
    assert [m.text for m in tg.bot_messages(41)] == ["first answer", "echo: m2"]


async def test_no_polling_while_updates_wait_for_a_slot(
    tg: FakeTelegram, llm: FakeOpenAI, tmp_path: Path
) -> None:
    """Slots take updates in arrival order: while one waits for the only slot, anything
    fetched would run after it anyway, so the loop does not fetch (and decode) the
    waiting updates again and again; what arrives meanwhile is fetched once it can run."""
    gate = asyncio.Event()
    llm.push(gated(gate, text("first answer")))
    alice, bob, carol = tg.private(41), tg.private(42), tg.private(43)
    async with (
        temp_database_url("sqlite", tmp_path) as url,
        bot_on(tg, llm, tmp_path, url, concurrent_updates=1) as services,
    ):
        alice.send("a1")  # update 1: holds the slot, at the model
        await llm.wait_for_requests(1)
        bob.send("b1")  # update 2: waits for the slot, undurable
        await tg.wait_for(
            lambda: any(c.params.get("offset") == 2 for c in tg.calls_to("getUpdates"))
        )
        await asyncio.sleep(0.6)  # the loop notices bob waiting
        before = len(tg.calls_to("getUpdates"))
        carol.send("c1")  # update 3: not fetched while bob waits
        await asyncio.sleep(1.0)  # the loop polled every <= 0.5 s before
        assert len(tg.calls_to("getUpdates")) == before

        gate.set()
        await tg.wait_for_message(43, contains="echo: c1")
        assert [m.text for m in tg.bot_messages(41)] == ["first answer"]
        assert [m.text for m in tg.bot_messages(42)] == ["echo: b1"]
        assert await user_texts(services, 43) == ["c1"]


async def test_a_redelivered_update_is_neither_stored_nor_answered_twice(
    tg: FakeTelegram, llm: FakeOpenAI, tmp_path: Path, db_kind: str
) -> None:
    alice = tg.private(41)
    acknowledging = unacknowledged(tg)  # as if the bot died after storing and answering
    async with temp_database_url(db_kind, tmp_path) as url:
        async with bot_on(tg, llm, tmp_path, url):
            alice.send("only once")
            await tg.wait_for_message(41, contains="echo: only once")
        acknowledging[0] = False
        async with bot_on(tg, llm, tmp_path, url) as services:
            # The next process receives update 1 again: recognised and skipped.
            await tg.wait_for(lambda: 2 in offsets(tg))
            alice.send("then this")
            await tg.wait_for_message(41, contains="echo: then this")
            assert await user_texts(services, 41) == ["only once", "then this"]
    assert [m.text for m in tg.bot_messages(41)] == ["echo: only once", "echo: then this"]
    assert len(llm.requests) == 2


async def test_an_update_another_replica_stores_meanwhile_is_skipped_quietly(
    tg: FakeTelegram,
    llm: FakeOpenAI,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Another replica got the same (redelivered) update and stores it right after this
    # one checked it was new: this one's append meets the record and rolls back.
    checked = HandledUpdates.seen

    async def seen_then_stored_elsewhere(self: HandledUpdates, update_id: int) -> bool:
        seen = await checked(self, update_id)
        if update_id == 1:
            await self.record(update_id)
        return seen

    monkeypatch.setattr(HandledUpdates, "seen", seen_then_stored_elsewhere)
    caplog.set_level(logging.INFO)
    alice = tg.private(41)
    async with (
        temp_database_url("sqlite", tmp_path) as url,
        bot_on(tg, llm, tmp_path, url) as services,
    ):
        alice.send("twice delivered")
        alice.send("next")
        await tg.wait_for_message(41, contains="echo: next")
        assert await user_texts(services, 41) == ["next"]  # the other replica has the first
    assert [m.text for m in tg.bot_messages(41)] == ["echo: next"]
    assert len(llm.requests) == 1
    skipped = [r for r in caplog.records if "stored by another replica" in r.getMessage()]
    assert [(r.levelno, r.exc_info) for r in skipped] == [(logging.INFO, None)]
    # a normal event between replicas: nothing anywhere logs it as an error
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []


async def test_once_appends_are_atomic_the_insert_alone_refuses_a_redelivery(
    tg: FakeTelegram, llm: FakeOpenAI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # After the first text turn (lcm appends through memory.storage.history: atomic), text
    # updates are not read from telegram_updates first; an update recorded elsewhere
    # is still neither stored nor answered, refused by the append's own insert.
    checked: list[int] = []
    seen = HandledUpdates.seen

    async def counting_seen(self: HandledUpdates, update_id: int) -> bool:
        checked.append(update_id)
        return await seen(self, update_id)

    monkeypatch.setattr(HandledUpdates, "seen", counting_seen)
    alice = tg.private(41)
    async with (
        temp_database_url("sqlite", tmp_path) as url,
        bot_on(tg, llm, tmp_path, url) as services,
    ):
        alice.send("first")
        await tg.wait_for_message(41, contains="echo: first")
        await HandledUpdates(services.engine, tg.bot_id).record(2)  # stored elsewhere
        alice.send("redelivered")  # update 2
        alice.send("third")
        await tg.wait_for_message(41, contains="echo: third")
        assert await user_texts(services, 41) == ["first", "third"]
    assert checked == [1]
    assert [m.text for m in tg.bot_messages(41)] == ["echo: first", "echo: third"]
    assert len(llm.requests) == 2


async def test_a_stop_acknowledges_only_what_is_durable(
    tg: FakeTelegram, llm: FakeOpenAI, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    llm.push(gated(asyncio.Event(), text("never")))  # m1's turn never ends
    alice = tg.private(41)
    async with temp_database_url("sqlite", tmp_path) as url:
        settings = settings_for(tg, llm, tmp_path, url, "simple")
        services = await build_services(
            settings, llm=LLMClient(settings.llm), summarizer=StaticSummarizer("summary")
        )
        try:
            app = build_application(settings, services.conversations, engine=services.engine)
            async with running(app, settings, poll_timeout=1, drain_s=0.2):
                alice.send("m1")  # stored, then stuck at the model
                await llm.wait_for_requests(1)
                alice.send("m2")  # behind it: not stored yet
                # Fetched: with m2 undurable the loop polls without waiting, from 2.
                await tg.wait_for(
                    lambda: any(
                        c.params.get("offset") == 2 and c.params.get("timeout") == 0
                        for c in tg.calls_to("getUpdates")
                    )
                )
        finally:
            await services.close()
        # The stop cancelled both handlers: m1 is acknowledged (stored), m2 is not.
        assert offsets(tg)[-1] == 2
        assert "could not acknowledge" not in caplog.text  # the stop's last getUpdates
        async with bot_on(tg, llm, tmp_path, url) as again:
            await tg.wait_for_message(41, contains="echo: m2")
            assert await user_texts(again, 41) == ["m1", "m2"]
    # m1, stored but cut off at the model, is answered at the start (bot.channels.telegram.delivery.resume),
    # before m2 (sent again by Telegram) takes its turn.
    assert [m.text for m in tg.bot_messages(41)] == ["echo: m1", "echo: m2"]


async def test_a_redelivered_command_is_not_run_twice(
    tg: FakeTelegram, llm: FakeOpenAI, tmp_path: Path
) -> None:
    alice = tg.private(41)
    acknowledging = unacknowledged(tg)
    async with temp_database_url("sqlite", tmp_path) as url:
        async with bot_on(tg, llm, tmp_path, url):
            alice.send("/new")
            await tg.wait_for(lambda: tg.bot_messages(41))
        acknowledging[0] = False
        async with bot_on(tg, llm, tmp_path, url):
            await tg.wait_for(lambda: 2 in offsets(tg))
            alice.send("/help")
            await tg.wait_for_message(41, contains="Commands:")
    texts = [m.text for m in tg.bot_messages(41)]
    assert [t.split(";")[0] for t in texts] == ["Started a new conversation", HELP.split(";")[0]]


async def test_updates_no_handler_takes_are_acknowledged(
    tg: FakeTelegram, llm: FakeOpenAI, tmp_path: Path
) -> None:
    group = tg.group(-100, "Team")
    async with temp_database_url("sqlite", tmp_path) as url, bot_on(tg, llm, tmp_path, url):
        member = User(5, "Member")
        tg.inject(
            {
                "message": {
                    "message_id": 1,
                    "date": 0,
                    "chat": group.to_dict(),
                    "from": member.to_dict(),
                    "new_chat_members": [member.to_dict()],
                }
            }
        )
        group.send("just chatting, not to the bot", user=member)
        tg.private(41).send("hello")
        await tg.wait_for_message(41, contains="echo: hello")
        await tg.wait_for(lambda: 4 in offsets(tg))
    assert tg.bot_messages(-100) == []


async def test_a_provider_outside_the_shared_history_still_records(
    tg: FakeTelegram, llm: FakeOpenAI, tmp_path: Path
) -> None:
    # The reference provider keeps its history in memory: no append transaction to join,
    # so the record is written right after the append.
    async with temp_database_url("sqlite", tmp_path) as url:
        settings = settings_for(tg, llm, tmp_path, url, "simple")
        async with temp_engine("sqlite", tmp_path) as engine:
            provider = create_reference(
                ProviderContext(
                    engine=engine,
                    summarizer=StaticSummarizer("s"),
                    agent_id="default",
                    data_dir=tmp_path,
                    config={},
                )
            )
            client = LLMClient(settings.llm, backoff_s=0.01)
            pool = Conversations(provider, client, settings)
            app = build_application(settings, pool, engine=engine)
            try:
                async with running(app, settings, poll_timeout=1, drain_s=2):
                    tg.private(41).send("kept")
                    await tg.wait_for_message(41, contains="echo: kept")
            finally:
                await pool.close()
                await provider.close()
                await client.close()
            async with engine.connect() as conn:
                rows = (await conn.execute(sa.select(telegram_updates))).all()
    assert [(r.bot_id, r.update_id) for r in rows] == [(tg.bot_id, 1)]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def test_webhook_answers_once_the_message_is_stored(
    tg: FakeTelegram, llm: FakeOpenAI, tmp_path: Path
) -> None:
    gate = asyncio.Event()
    llm.push(gated(gate, text("answer")))
    port = free_port()
    webhook = {
        "url": f"http://127.0.0.1:{port}/hook",
        "listen": "127.0.0.1",
        "port": port,
        "secret_token": "s3cret",
    }
    async with (
        temp_database_url("sqlite", tmp_path) as url,
        bot_on(tg, llm, tmp_path, url, webhook=webhook) as services,
    ):
        assert tg.webhook is not None
        tg.private(41).send("through the hook")
        # Answered 200 while the model is still held: the store, not the reply, is the
        # point the answer waits for; and by then the message is in the history.
        await tg.wait_for(lambda: (tg.webhook or {}).get("responses"))
        assert tg.webhook["responses"] == [200]
        assert await user_texts(services, 41) == ["through the hook"]
        gate.set()
        await tg.wait_for_message(41, contains="answer")
