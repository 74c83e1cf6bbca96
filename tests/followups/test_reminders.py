"""An explicit reminder through the bot on the fake servers (docs/CHAT.md "Follow-ups"):
made by the model's tool, confirmed in one line with Undo, listed with buttons that act
only on their own follow-up, delivered at the right local time with its source quoted,
after quiet hours, late or dropped past the grace window; on SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from bot.runtime.metrics import count_followup, sample
from memory.followups import store
from memory.followups.store import observe
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.telegram_server import FakeTelegram
from tests.followups.kit import (
    USER,
    all_followups,
    ask,
    at,
    bot_with_delivery,
    buttons,
    delivered,
    press,
    remind,
)


async def test_reminder_in_tokyo_time_delivered_once_quoting_its_source(
    tg: FakeTelegram, llm: FakeOpenAI, tmp_path: Path, db_kind: str
) -> None:
    observe(count_followup)  # as build_services does: /metrics counts them
    made, sent = _count("created"), _count("sent")
    async with bot_with_delivery(tg, llm, tmp_path, db=db_kind) as (bot, delivery, clock):
        await ask(tg, "/memory timezone Mars/Olympus", "unknown time zone")
        await ask(tg, "/memory timezone Asia/Tokyo", "Time zone set: Asia/Tokyo")
        said = "remind me to call the notary on 6 May 2030 at 9"
        line = await remind(tg, llm, said, "2030-05-06T09:00", "call the notary")
        assert line.text == "⏰ I'll follow up Mon 6 May 09:00 (Asia/Tokyo): call the notary"
        assert [t for t, _ in buttons(line)[0]] == ["Undo"]
        [item] = await all_followups(bot)
        assert item.due_at == at("2030-05-06T00:00+00:00")  # 09:00 in Tokyo
        # The model read the result: the time, the zone, the UTC time.
        tool_result = llm.requests[-1]["messages"][-1]["content"]
        assert "Asia/Tokyo" in tool_result and "2030-05-06 00:00 UTC" in tool_result

        asked = next(m for m in tg.private(USER).server._messages.values() if m.get("text") == said)
        sent_before = len(tg.bot_messages(USER))
        clock.now = at("2030-05-05T23:59+00:00")
        assert await delivery.tick() == 0
        clock.now = at("2030-05-06T00:00:30+00:00")
        assert await delivery.tick() == 1
        [out] = delivered(tg, sent_before)
        assert out.text.startswith("⏰ call the notary\nYou mentioned on ")
        assert f"“{said}”" in out.text and "late" not in out.text
        assert out.reply_to == asked["message_id"]  # a reply: the original is linked
        clock.now += timedelta(hours=1)
        assert await delivery.tick() == 0  # sent once
        [item] = await all_followups(bot)
        assert item.state == store.SENT
    assert (_count("created") - made, _count("sent") - sent) == (1, 1)


def _count(event: str) -> float:
    return sample("mnemo_followups_total", {"event": event})


async def test_snooze_dismiss_undo_act_only_on_their_own_followup(
    tg: FakeTelegram, llm: FakeOpenAI, tmp_path: Path, db_kind: str
) -> None:
    async with bot_with_delivery(tg, llm, tmp_path, db=db_kind) as (bot, delivery, clock):
        await ask(tg, "/memory timezone Europe/Berlin", "Time zone set")
        await remind(tg, llm, "remind me to water the plants", "2030-03-02T10:00", "water")
        await remind(tg, llm, "remind me to pay rent", "2030-03-03T10:00", "pay rent")
        c = await remind(tg, llm, "remind me to buy milk", "2030-03-04T10:00", "buy milk")
        undo_c = buttons(c)[0][0][1]
        assert "Undone" in await press(tg, c, undo_c)
        assert c.reply_markup is None  # its button went
        assert "no longer pending" in await press(tg, c, undo_c)  # pressed again: stale
        listing = await ask(tg, "/memory followups", "Follow-ups pending:")
        assert "water" in listing.text and "pay rent" in listing.text
        assert "buy milk" not in listing.text
        rows = buttons(listing)
        assert [t for t, _ in rows[0]] == ["✕ 1", "1 h", "tomorrow", "next week"]
        [dismiss_a, _, tomorrow_a, _] = [d for _, d in rows[0]]
        [_, _, _, week_b] = [d for _, d in rows[1]]

        # Snoozing a to tomorrow: 09:00 Berlin the day after the press (real time).
        answer = await press(tg, listing, tomorrow_a)
        assert answer.startswith("Snoozed until ") and "09:00: water" in answer
        assert listing.reply_markup is not None and len(buttons(listing)) == 1  # a's row went
        # Its old buttons act no more (its version moved): dismissing it is refused.
        assert "no longer pending" in await press(tg, listing, dismiss_a)
        snoozed = {i.text: i for i in await all_followups(bot)}["water"]
        assert snoozed.state == store.SNOOZED
        assert snoozed.due_at.astimezone(store_zone("Europe/Berlin")).hour == 9

        # b's "next week" acts on b only.
        assert "Snoozed until" in await press(tg, listing, week_b)
        now = {i.text: i for i in await all_followups(bot)}
        assert now["pay rent"].state == store.SNOOZED and now["water"].due_at == snoozed.due_at

        # Delivery: nothing before the snoozed time, then exactly the one due.
        since = len(tg.bot_messages(USER))
        clock.now = snoozed.due_at - timedelta(minutes=1)
        assert await delivery.tick() == 0
        clock.now = snoozed.due_at
        assert await delivery.tick() == 1
        assert [m.text.split("\n")[0] for m in delivered(tg, since)] == ["⏰ water"]

        # Dismissed by command: never delivered.
        b_id = now["pay rent"].id
        await ask(tg, f"/memory followups dismiss {b_id}", "Dismissed follow-up")
        await ask(tg, f"/memory followups dismiss {b_id}", "No pending follow-up")
        clock.now = now["pay rent"].due_at + timedelta(minutes=1)
        assert await delivery.tick() == 0


def store_zone(name: str):  # type: ignore[no-untyped-def]
    from zoneinfo import ZoneInfo

    return ZoneInfo(name)


async def test_quiet_hours_late_and_dropped(
    tg: FakeTelegram, llm: FakeOpenAI, tmp_path: Path
) -> None:
    async with bot_with_delivery(tg, llm, tmp_path) as (bot, delivery, clock):
        await ask(tg, "/memory timezone Asia/Tokyo", "Time zone set")
        await remind(tg, llm, "at 23:00 remind me to stretch", "2030-05-06T23:00", "stretch")
        since = len(tg.bot_messages(USER))
        clock.now = at("2030-05-06T23:00+09:00")  # due, but in the default 22:00-08:00
        assert await delivery.tick() == 0
        clock.now = at("2030-05-07T07:59+09:00")
        assert await delivery.tick() == 0
        clock.now = at("2030-05-07T08:00+09:00")
        assert await delivery.tick() == 1
        [out] = delivered(tg, since)
        assert out.text.startswith("⏰ stretch") and "late" not in out.text

        # The user's own quiet hours, then a delivery behind schedule: late, with its time.
        await ask(tg, "/memory followups quiet 25:00-07:00", "quiet hours are HH:MM-HH:MM")
        await ask(tg, "/memory followups quiet 01:00-06:00", "Quiet hours: 01:00-06:00")
        await remind(tg, llm, "remind me about the call", "2030-05-08T09:00", "the call")
        await remind(tg, llm, "remind me about taxes", "2030-05-09T09:00", "taxes")
        since = len(tg.bot_messages(USER))
        clock.now = at("2030-05-08T12:00+09:00")  # the bot was down for 3 h
        assert await delivery.tick() == 1
        [late] = delivered(tg, since)
        assert "⏰ the call\n(due Wed 8 May 09:00; sent late)" in late.text
        clock.now = at("2030-05-10T12:00+09:00")  # 27 h past: beyond followups.grace (12h)
        assert await delivery.tick() == 1
        [note] = delivered(tg, since + 1)
        assert note.text.startswith("I missed a follow-up due Thu 9 May 09:00")
        states = {i.text: i.state for i in await all_followups(bot)}
        assert states == {"stretch": store.SENT, "the call": store.SENT, "taxes": store.DROPPED}


async def test_bad_times_are_refused_and_nothing_is_made(
    tg: FakeTelegram, llm: FakeOpenAI, tmp_path: Path
) -> None:
    async with bot_with_delivery(tg, llm, tmp_path) as (bot, _, _):
        from tests.fakes.openai_server import text, tool_call

        llm.push(
            tool_call("memory", {"action": "followup_add", "due": "next blursday", "text": "x"}),
            text("Sorry."),
        )
        await ask(tg, "remind me next blursday", "Sorry.")
        assert "due must be a date and time" in llm.requests[-1]["messages"][-1]["content"]
        llm.push(
            tool_call("memory", {"action": "followup_add", "due": "2001-01-01T09:00", "text": "x"}),
            text("Sorry again."),
        )
        await ask(tg, "remind me in 2001", "Sorry again.")
        assert "in the past" in llm.requests[-1]["messages"][-1]["content"]
        assert await all_followups(bot) == []
        # Without a zone: read as UTC, and the line says so.
        line = await remind(tg, llm, "remind me to rest", "2030-01-02T09:00", "rest")
        assert "times are UTC until you set your zone" in line.text


async def test_why_shows_the_followup_action(
    tg: FakeTelegram, llm: FakeOpenAI, tmp_path: Path
) -> None:
    async with bot_with_delivery(tg, llm, tmp_path) as _:
        await remind(tg, llm, "remind me to call the notary", "2030-05-06T09:00", "the notary")
        why = await ask(tg, "/memory why", "Memory actions it used:")
        assert "1. followup_add “the notary” → follow-up set" in why.text
