"""Follow-ups delivered exactly once (claimed in the database, memory/followups/store.py):
two bots on one PostgreSQL database racing for the same due follow-ups, a restart at the
due time, real `mnemo run` processes on the root's scheduler; a user who blocked the bot
pauses; proactive ones (reflect's) obey off, the day's limit, the user's token limits,
and make one counted model call each."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa

from bot.config.settings import FollowupsSettings, LimitsSettings
from bot.conversation.budgets import Budgets
from bot.followups.delivery import FollowupDelivery
from bot.followups.telegram import TelegramSender
from memory.actions.tool import run_tool
from memory.contract.context import with_change_source
from memory.contract.types import ChangeSource, Owner, Session
from memory.followups import store
from memory.storage.usage import UsageRecorder, UsageStore, usage_records
from memory.testing.databases import temp_engine
from tests.fakes.openai_server import FakeOpenAI, text
from tests.fakes.telegram_server import FakeTelegram
from tests.followups.kit import (
    USER,
    Clock,
    all_followups,
    ask,
    at,
    bot_with_delivery,
    delivered,
    remind,
)
from tests.reliability.process import BotProcess
from tests.reliability.test_logs import run_config
from tests.telegram.harness import running_bot
from tests.waits import eventually


def _delivery(bot, clock, **settings):  # type: ignore[no-untyped-def]
    return FollowupDelivery(
        bot.provider.engine,
        FollowupsSettings(**settings),
        senders={"telegram": TelegramSender(bot.app.bot)},
        clock=clock,
    )


async def test_two_bots_on_postgresql_and_a_restart_send_each_once(
    tg: FakeTelegram, llm: FakeOpenAI, tmp_path: Path
) -> None:
    async with temp_engine("postgres", tmp_path) as engine:
        url = engine.url.render_as_string(hide_password=False)
        clock = Clock(datetime(2030, 1, 1, tzinfo=UTC))
        async with running_bot(tg, llm, tmp_path / "a", provider="simple", url=url) as a:
            for n in range(1, 7):
                await remind(tg, llm, f"remind me of task {n}", f"2030-02-01T1{n}:00", f"t{n}")
            async with running_bot(tg, llm, tmp_path / "b", provider="simple", url=url) as b:
                one, two = _delivery(a, clock), _delivery(b, clock)
                since = len(tg.bot_messages(USER))
                clock.now = at("2030-02-01T15:00+00:00")  # five are due: both race for them
                counts = await asyncio.gather(one.tick(), two.tick(), one.tick(), two.tick())
                assert sum(counts) == 5
                texts = sorted(m.text.split("\n")[0] for m in delivered(tg, since))
                assert texts == [f"⏰ t{d}" for d in range(1, 6)]
        # A restart at the due time: the new process finds them sent, and sends only t6.
        async with running_bot(tg, llm, tmp_path / "c", provider="simple", url=url) as c:
            again = _delivery(c, clock)
            assert await again.tick() == 0
            clock.now = at("2030-02-01T16:00+00:00")
            assert await again.tick() == 1
            assert len(delivered(tg, since)) == 6


async def test_a_claim_left_by_a_dead_process_is_taken_again_after_the_timeout(
    tg: FakeTelegram, llm: FakeOpenAI, tmp_path: Path
) -> None:
    async with bot_with_delivery(tg, llm, tmp_path) as (bot, delivery, clock):
        await remind(tg, llm, "remind me to stretch", "2030-02-01T12:00", "stretch")
        [item] = await all_followups(bot)
        clock.now = at("2030-02-01T12:00+00:00")
        assert await store.claim(bot.provider.engine, item, clock.now)  # then it died
        assert await delivery.tick() == 0
        clock.now += store.CLAIM_TIMEOUT + timedelta(seconds=1)
        assert await delivery.tick() == 1


@pytest.mark.slow
async def test_two_mnemo_run_processes_on_postgresql_deliver_once(
    tg: FakeTelegram, llm: FakeOpenAI, tmp_path: Path
) -> None:
    """The root's scheduler runs the job (`background_jobs`), the Telegram channel gives
    it its sender: two real processes on one database, one delivery."""
    async with temp_engine("postgres", tmp_path) as engine:
        url = engine.url.render_as_string(hide_password=False)
        async with running_bot(tg, llm, tmp_path / "a", provider="simple", url=url):
            await ask(tg, "/memory followups quiet 00:00-00:00", "Quiet hours")
            due = datetime.now(UTC) + timedelta(seconds=20)
            await remind(tg, llm, "remind me to leave", due.strftime("%Y-%m-%dT%H:%M:%S"), "leave")
        since = len(tg.bot_messages(USER))
        procs = []
        for name in ("p1", "p2"):
            (tmp_path / name).mkdir()
            config = run_config(tmp_path / name, tg, llm, url, followups={"interval": "1s"})
            procs.append(BotProcess(tmp_path / name, config, tg))
        try:
            for proc in procs:
                await proc.start()
            await tg.wait_for(lambda: delivered(tg, since), within=60)

            async def state() -> str:
                async with engine.connect() as conn:
                    return str(await conn.scalar(sa.select(store.followups.c.state)))

            await eventually(state, lambda s: s == store.SENT, what="the follow-up sent")
        finally:
            for proc in procs:
                assert await proc.stop() == 0
        assert [m.text.split("\n")[0] for m in delivered(tg, since)] == ["⏰ leave"]


async def test_a_user_who_blocked_the_bot_is_paused_until_they_are_back(
    tg: FakeTelegram, llm: FakeOpenAI, tmp_path: Path
) -> None:
    async with bot_with_delivery(tg, llm, tmp_path) as (bot, delivery, clock):
        await remind(tg, llm, "remind me to call mum", "2030-02-01T12:00", "call mum")
        tg.fail("sendMessage", status=403, description="Forbidden: bot was blocked by the user")
        clock.now = at("2030-02-01T12:00+00:00")
        assert await delivery.tick() == 0
        prefs = await store.get_prefs(bot.provider.engine, Owner(USER, "default"))
        assert prefs.paused
        tries = len(tg.calls_to("sendMessage"))
        clock.now += timedelta(minutes=5)
        assert await delivery.tick() == 0
        assert len(tg.calls_to("sendMessage")) == tries  # not retried while paused
        await ask(tg, "/memory followups", "call mum")  # they are back
        assert await delivery.tick() == 1
        [item] = await all_followups(bot)
        assert item.state == store.SENT


async def test_a_blocked_user_who_writes_again_gets_what_came_due_meanwhile(
    tg: FakeTelegram, llm: FakeOpenAI, tmp_path: Path, db_kind: str
) -> None:
    """Any message answered as a turn resumes them (not only `/memory followups`): the
    one due while they were away is sent late, one past `followups.grace` is a note."""
    grace = {"grace": "1h"}
    async with bot_with_delivery(tg, llm, tmp_path, db=db_kind, followups=grace) as (
        bot,
        delivery,
        clock,
    ):
        owner = Owner(USER, "default")
        await remind(tg, llm, "remind me to call mum", "2030-02-01T12:00", "call mum")
        await remind(tg, llm, "remind me to water the plants", "2030-02-01T13:30", "water")
        tg.fail("sendMessage", status=403, description="Forbidden: bot was blocked by the user")
        clock.now = at("2030-02-01T12:00+00:00")
        assert await delivery.tick() == 0
        assert (await store.get_prefs(bot.provider.engine, owner)).paused
        tries = len(tg.calls_to("sendMessage"))

        clock.now = at("2030-02-01T13:45+00:00")  # both due now: neither is tried
        assert await delivery.tick() == 0
        assert len(tg.calls_to("sendMessage")) == tries
        assert {i.state for i in await all_followups(bot)} == {store.PENDING}

        since = len(tg.bot_messages(USER))
        llm.push(text("Welcome back."))
        await ask(tg, "I unblocked you, hi again", "Welcome back.")  # a plain turn
        assert not (await store.get_prefs(bot.provider.engine, owner)).paused
        assert await delivery.tick() == 2
        said = [m.text.split("\n")[0] for m in delivered(tg, since)]
        assert said[0].startswith("I missed a follow-up due ") and "call mum" in said[0]
        assert said[1:] == ["⏰ water"]
        states = {i.text: i.state for i in await all_followups(bot)}
        assert states == {"call mum": store.DROPPED, "water": store.SENT}
        assert await delivery.tick() == 0


async def test_proactive_followups_off_limits_and_one_counted_model_call(
    tg: FakeTelegram, llm: FakeOpenAI, tmp_path: Path
) -> None:
    async with bot_with_delivery(tg, llm, tmp_path) as (bot, _, clock):
        engine = bot.provider.engine
        await ask(tg, "my interview is on 3 Feb 2030 at 10", "echo:")
        session_id = (await _session_ids(engine))[0]
        assert session_id == "default:telegram:42"
        for hour in (9, 10, 11):
            said = await _proposed_in(bot, session_id, f"2030-02-05T{hour:02}:00", f"check {hour}")
            assert said.startswith("follow-up"), said
        assert all(i.proactive for i in await all_followups(bot))

        # One a day (followups.max_per_day: 1), phrased by one model call, as the user's.
        bot.conversations.llm.usage = UsageRecorder(UsageStore(engine))
        delivery = FollowupDelivery(
            engine,
            FollowupsSettings(max_per_day=1),
            senders={"telegram": TelegramSender(bot.app.bot)},
            llm=bot.conversations.llm,
            budgets=Budgets(UsageStore(engine), LimitsSettings(tokens_per_day=10_000)),
            clock=clock,
        )
        since, calls = len(tg.bot_messages(USER)), len(llm.requests)
        llm.push(text("How did the interview go?"))
        clock.now = at("2030-02-05T12:00+00:00")
        assert await delivery.tick() == 1
        assert len(llm.requests) == calls + 1
        [out] = delivered(tg, since)
        assert out.text.startswith("⏰ How did the interview go?\n")
        async with engine.connect() as conn:
            users = (await conn.execute(sa.select(usage_records.c.user_id))).scalars().all()
        assert users == [USER]  # the phrasing's tokens are the user's
        assert await delivery.tick() == 0  # the day's one is used

        # Over their token limit: none, and no model call.
        tight = FollowupDelivery(
            engine,
            FollowupsSettings(max_per_day=5),
            senders={"telegram": TelegramSender(bot.app.bot)},
            llm=bot.conversations.llm,
            budgets=Budgets(UsageStore(engine), LimitsSettings(tokens_per_day=1)),
            clock=clock,
        )
        assert await tight.tick() == 0 and len(llm.requests) == calls + 1

        # Off: the proposed ones are dropped, new ones refused; asked-for ones still go.
        await ask(tg, "/memory followups off", "reminders you ask for still work")
        said = await _proposed_in(bot, session_id, "2030-02-09T12:00", "another")
        assert "turned follow-ups you propose off" in said
        await remind(tg, llm, "remind me to sleep", "2030-02-05T13:00", "sleep")
        clock.now = at("2030-02-05T13:00+00:00")
        assert await _delivery(bot, clock, max_per_day=5).tick() == 1
        states = sorted((i.text, i.state) for i in await all_followups(bot))
        assert states == [
            ("check 10", store.DISMISSED),
            ("check 11", store.DISMISSED),
            ("check 9", store.SENT),
            ("sleep", store.SENT),
        ]


async def _session_ids(engine) -> list[str]:  # type: ignore[no-untyped-def]
    from memory.storage.history import conversations

    async with engine.connect() as conn:
        return list((await conn.execute(sa.select(conversations.c.session_id))).scalars())


async def _proposed_in(bot, session_id: str, due: str, what: str) -> str:  # type: ignore[no-untyped-def]
    session = Session(session_id, "default", USER, "telegram")
    with with_change_source(ChangeSource.REFLECT):
        return await run_tool(
            bot.provider,
            session,
            {"action": "followup_add", "due": due, "text": what},
            source=ChangeSource.REFLECT,
        )
