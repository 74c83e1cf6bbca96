"""PostgreSQL dropping the bot's connections: what a restart, a failover or a proxy's
idle timeout does, done here with `pg_terminate_backend` on the bot's own connections
(every connection to the test's database but the killer's). Between turns, mid-turn
(while the model answers; inside the user message's transaction; at its COMMIT; inside
the answer's transaction) and in a storm of terminations, every message is stored
exactly once and answered, never "NOT saved"; and every update was acknowledged to
Telegram (the last getUpdates offset is past it), which, with nothing lost, means none
was acknowledged before it was stored."""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from sqlalchemy.pool import NullPool

from bot.channels.telegram.delivery.handled import telegram_updates
from bot.conversation.store_wait import DELAYED, NOT_SAVED_YET
from memory.testing.databases import PG_ADMIN_URL
from tests.fakes.openai_server import FakeOpenAI, gated, text
from tests.fakes.telegram_server import FakeTelegram
from tests.reliability.conftest import ask
from tests.reliability.harness import LiveBot, live_bot, session_id, stored_history

pytestmark = pytest.mark.postgres

# Every backend of the test's database except the caller's, waited for (up to 5 s) so
# the next statement meets a dead connection, not one still dying.
_TERMINATE = (
    "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid, 5000)) FROM pg_stat_activity"
    " WHERE datname = %(db)s AND pid <> pg_backend_pid() AND backend_type = 'client backend'"
)


@pytest.fixture
async def admin() -> AsyncIterator[AsyncEngine]:
    engine = create_async_engine(PG_ADMIN_URL, poolclass=NullPool, isolation_level="AUTOCOMMIT")
    yield engine
    await engine.dispose()


async def terminate(admin: AsyncEngine, bot: LiveBot) -> int:
    """Terminate every connection the bot holds to its database; how many there were."""
    async with admin.connect() as conn:
        return (
            await conn.exec_driver_sql(_TERMINATE, {"db": bot.engine.url.database})
        ).scalar_one()


class KillInTransaction:
    """Terminates the bot's connection from inside its own transaction, once: just
    before the (`skip` + 1)-th statement containing `marker` is sent or, `at_commit`,
    just before that statement's transaction commits. The statement (or the COMMIT)
    then meets a dead connection, as when the server goes away mid-write."""

    def __init__(
        self, bot: LiveBot, marker: str, *, skip: int = 0, at_commit: bool = False
    ) -> None:
        self.engine = bot.engine.sync_engine
        self.db = bot.engine.url.database
        self.marker, self.skip, self.at_commit = marker, skip, at_commit
        self.killed = 0
        self._armed: Any = None  # the connection whose COMMIT is to fail
        sa.event.listen(self.engine, "before_cursor_execute", self._statement)
        sa.event.listen(self.engine, "commit", self._commit)

    def _statement(self, conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if self.killed or self._armed is not None or self.marker not in statement:
            return
        if self.skip:
            self.skip -= 1
        elif self.at_commit:
            self._armed = conn
        else:
            self._kill()

    def _commit(self, conn: Any) -> None:
        if self._armed is conn and not self.killed:
            self._kill()

    def _kill(self) -> None:
        # A blocking connection of its own: this runs inside the bot's statement.
        dsn = PG_ADMIN_URL.replace("postgresql+psycopg://", "postgresql://")
        with psycopg.connect(dsn, autocommit=True) as admin:
            row = admin.execute(
                _TERMINATE.replace(
                    "backend_type = 'client backend'", "state = 'idle in transaction'"
                ),
                {"db": self.db},
            ).fetchone()
        self.killed = row[0] if row else 0

    def remove(self) -> None:
        sa.event.remove(self.engine, "before_cursor_execute", self._statement)
        sa.event.remove(self.engine, "commit", self._commit)


def acknowledged(tg: FakeTelegram) -> int:
    """The highest getUpdates offset the bot sent: every update below it is confirmed."""
    return max((int(c.params.get("offset") or 0) for c in tg.calls_to("getUpdates")), default=0)


async def assert_stored_once_and_acknowledged(
    bot: LiveBot, tg: FakeTelegram, chats: dict[int, list[str]]
) -> None:
    """Each chat's messages stored once, in order, each with its answer; one update
    record per message, and Telegram told of every one of them."""
    for chat_id, texts in chats.items():
        history = await stored_history(bot.engine, session_id(chat_id))
        assert history == [
            pair for t in texts for pair in (("user", t), ("assistant", f"echo: {t}"))
        ]
    async with bot.engine.connect() as conn:
        ids = list((await conn.execute(sa.select(telegram_updates.c.update_id))).scalars())
    assert len(ids) == sum(len(t) for t in chats.values())
    await tg.wait_for(lambda: acknowledged(tg) > max(ids), within=20)


@pytest.mark.parametrize("provider", ["lcm", "simple"])
async def test_connections_terminated_between_turns(
    tg: FakeTelegram, llm: FakeOpenAI, admin: AsyncEngine, tmp_path: Path, provider: str
) -> None:
    async with live_bot(
        tmp_path, tg, llm, db_kind="postgres", provider=provider, record_updates=True
    ) as bot:
        chat = tg.private(1)
        texts = []
        for n in range(8):
            if n:  # the turn lock's connection, at least, and whatever the pool kept
                assert await terminate(admin, bot) >= 1
            texts.append(f"round {n}")
            assert await ask(tg, chat, texts[-1], within=20) == f"echo: round {n}"
        await assert_stored_once_and_acknowledged(bot, tg, {1: texts})


async def test_connections_terminated_mid_turn(
    tg: FakeTelegram, llm: FakeOpenAI, admin: AsyncEngine, tmp_path: Path
) -> None:
    async with live_bot(
        tmp_path, tg, llm, db_kind="postgres", provider="lcm", record_updates=True
    ) as bot:
        chat = tg.private(1)
        texts = ["warm up"]
        assert await ask(tg, chat, texts[-1], within=20) == "echo: warm up"
        # While the model answers: the turn holds its lock on a connection that dies.
        gate = asyncio.Event()
        llm.push(gated(gate, text("echo: while the model answers")))
        texts.append("while the model answers")
        chat.send(texts[-1])
        await llm.wait_for_requests(len(llm.requests) + 1)
        assert await terminate(admin, bot) >= 1
        gate.set()
        await tg.wait_for_message(1, contains="echo: while the model answers", within=20)
        # Inside a transaction: the user's message, its COMMIT, the answer.
        insert = "INSERT INTO messages"
        for where, kill in (
            ("user message", lambda: KillInTransaction(bot, insert)),
            ("commit", lambda: KillInTransaction(bot, insert, at_commit=True)),
            ("answer", lambda: KillInTransaction(bot, insert, skip=1)),
        ):
            texts.append(f"killed at the {where}")
            killer = kill()
            try:
                assert await ask(tg, chat, texts[-1], within=20) == f"echo: {texts[-1]}"
            finally:
                killer.remove()
            assert killer.killed == 1, where
        # Another chat too, after all that.
        assert await ask(tg, tg.private(2), "other chat", within=20) == "echo: other chat"
        await assert_stored_once_and_acknowledged(bot, tg, {1: texts, 2: ["other chat"]})


STORM_KILLS = 30


async def ask_through_storm(tg: FakeTelegram, chat: Any, text: str, *, within: float) -> str:
    """Send `text` and return the bot's answer. Kills closer together
    than the reconnect retries' pauses can outlast those retries: the turn then waits
    for the store (`StoreWait`) and says once that the answer is delayed, which is the
    designed outcome. The answer must still follow, and nothing else may be said."""
    before = {m.message_id for m in tg.bot_messages(chat.id, include_deleted=True)}
    chat.send(text)

    def said() -> list[str]:
        return [m.text for m in tg.bot_messages(chat.id) if m.message_id not in before]

    await tg.wait_for(lambda: any(t.startswith("echo: ") for t in said()), within)
    answers = [t for t in said() if t not in (DELAYED, NOT_SAVED_YET)]
    assert len(answers) == 1, said()
    return answers[0]


@pytest.mark.slow
async def test_storm_of_terminations(
    tg: FakeTelegram, llm: FakeOpenAI, admin: AsyncEngine, tmp_path: Path
) -> None:
    """Three chats talk while the bot's connections are terminated 30 times at random
    moments, 5-60 ms apart; each chat sends at least 10 messages, and goes on until the
    storm is over."""
    rng = random.Random(15)
    async with live_bot(
        tmp_path, tg, llm, db_kind="postgres", provider="lcm", record_updates=True
    ) as bot:
        chats: dict[int, list[str]] = {1: [], 2: [], 3: []}
        over = asyncio.Event()

        async def storm() -> None:
            for _ in range(STORM_KILLS):
                await asyncio.sleep(rng.uniform(0.005, 0.06))
                await terminate(admin, bot)
            over.set()

        async def talk(uid: int) -> None:
            chat = tg.private(uid)
            while len(chats[uid]) < 10 or not over.is_set():
                chats[uid].append(f"chat {uid} message {len(chats[uid])}")
                answer = await ask_through_storm(tg, chat, chats[uid][-1], within=30)
                assert answer == f"echo: {chats[uid][-1]}"

        async with asyncio.TaskGroup() as group:  # a failing chat cancels the rest
            group.create_task(storm())
            for uid in chats:
                group.create_task(talk(uid))
        await assert_stored_once_and_acknowledged(bot, tg, chats)
