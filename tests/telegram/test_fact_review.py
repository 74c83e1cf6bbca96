"""What changed in a memory, in the chat: `/memory timeline` (each fact with its interval
and its source: a link in a supergroup, the date and first words in a private chat) and
the review of reflect's changes with Keep / Revert buttons (a replayed or stale press
refused; Revert recorded with source user); the digest after a reflect cycle, private
chats only, off with `/memory review off`."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from bot.jobs.reflect.job import build_reflector
from memory.contract.facts import FactOp
from memory.contract.options import WriteOptions
from memory.contract.types import ChangeSource
from memory.storage.history import messages
from tests.fakes.openai_server import FakeOpenAI, text, tool_call
from tests.fakes.telegram_server import BotMessage, FakeTelegram, User
from tests.reliability.harness import live_bot

ALICE = 42
GROUP = -1001234567  # a supergroup: Telegram's internal id is 1234567
REFLECT = WriteOptions(ChangeSource.REFLECT, "default:telegram:42")


async def said(tg: FakeTelegram, chat: Any, words: str, *, user: User | None = None) -> str:
    """Send `words` and return the bot's one answer to it."""
    before = len(tg.bot_messages(chat.id))
    chat.send(words, user=user)
    await tg.wait_for(lambda: len(tg.bot_messages(chat.id)) > before)
    return tg.bot_messages(chat.id)[-1].text


async def message_id(bot: Any, content: str) -> int:
    async with bot.engine.connect() as conn:
        return int(
            (
                await conn.execute(
                    sa.select(messages.c.id).where(
                        messages.c.role == "user", messages.c.content.endswith(content)
                    )
                )
            )
            .scalars()
            .one()
        )


def buttons(shown: BotMessage) -> dict[str, str]:
    """Label -> callback data of the buttons `shown` carries now."""
    return {
        b["text"]: b["callback_data"] for row in shown.reply_markup["inline_keyboard"] for b in row
    }


async def press(tg: FakeTelegram, chat: Any, shown: BotMessage, data: str) -> str:
    before = len(tg.bot_messages(chat.id))
    chat.press(shown, data)
    await tg.wait_for(lambda: len(tg.bot_messages(chat.id)) > before)
    return tg.bot_messages(chat.id)[-1].text


@pytest.mark.parametrize(("provider", "db"), [("simple", "sqlite"), ("lcm", "postgres")])
async def test_timeline_and_review_in_the_chat(
    tg: FakeTelegram, llm: FakeOpenAI, tmp_path: Path, provider: str, db: str
) -> None:
    sections = {"telegram": {"group_mode": "always"}}
    async with live_bot(tmp_path, tg, llm, provider=provider, db_kind=db, **sections) as bot:
        alice, group, member = tg.private(ALICE, "Alice"), tg.group(GROUP, "Team"), User(ALICE)
        await said(tg, alice, "I live in London")
        await said(tg, alice, "I just moved to Berlin")
        await said(tg, group, "our standup is on Mondays", user=member)
        london = await message_id(bot, "I live in London")
        berlin = await message_id(bot, "I just moved to Berlin")
        standup = await message_id(bot, "our standup is on Mondays")
        store = bot.provider
        [first] = await store.apply_facts(
            ALICE, "default", [FactOp("set", "home city", "London", [london])], REFLECT
        )
        [moved] = await store.apply_facts(
            ALICE, "default", [FactOp("set", "home city", "Berlin", [berlin])], REFLECT
        )
        await store.set_soul(ALICE, "default", "Be brief.", options=REFLECT)
        await store.apply_facts(
            GROUP, "default", [FactOp("set", "standup", "Mondays", [standup])], REFLECT
        )

        # The timeline: both intervals, who wrote them, the sources quoted in private.
        shown = await said(tg, alice, "/memory timeline")
        assert re.search(
            r"• home city: London \(\d{4}-\d\d-\d\d → \d{4}-\d\d-\d\d, superseded; by reflect\), "
            r"then Berlin\n   source: \d{4}-\d\d-\d\d “I live in London”",
            shown,
        ), shown
        assert re.search(
            r"• home city: Berlin \(\d{4}-\d\d-\d\d → now; by reflect\)\n"
            r"   source: \d{4}-\d\d-\d\d “I just moved to Berlin”",
            shown,
        ), shown
        assert "home city" in await said(tg, alice, "/memory timeline city")
        assert (await said(tg, alice, "/memory timeline dog")) == "No facts about “dog” yet."
        # In the supergroup: the group's facts, their source a link to the message.
        in_group = await said(tg, group, "/memory timeline", user=member)
        assert "• standup: Mondays" in in_group and "home city" not in in_group
        link = re.search(r"source: (https://t\.me/c/1234567/\d+)$", in_group, re.M)
        assert link, in_group

        # The review: reflect's three changes, newest first, each with its buttons.
        await said(tg, alice, "/memory review")
        listing = tg.bot_messages(ALICE)[-1]
        assert listing.text.startswith("Reflect changed your memory"), listing.text
        ids = [int(i) for i in re.findall(r"^#(\d+) ", listing.text, re.M)]
        soul_id = ids[0]
        assert ids[1:] == [moved.changelog_id, first.changelog_id], listing.text
        assert "facts: home city: Berlin (was London)" in listing.text
        assert "evidence: " in listing.text and "“I just moved to Berlin”" in listing.text
        shown_with = buttons(listing)  # an old copy's buttons, pressed again later
        assert list(shown_with)[:2] == [f"Keep #{soul_id}", f"Revert #{soul_id}"]

        # Revert the move: Berlin closed, London current again, recorded as the user's.
        answer = await press(tg, alice, listing, shown_with[f"Revert #{moved.changelog_id}"])
        assert answer.startswith(f"Reverted #{moved.changelog_id}"), answer
        [current] = await store.current_facts(ALICE, "default")
        assert (current.key, current.value) == ("home city", "London")
        rows = await store.read_changelog(ALICE, "default", "fact", 1)
        assert rows[0].source == "user"
        # Its row of buttons is gone from the message; the others stay.
        assert f"Revert #{moved.changelog_id}" not in buttons(listing)
        assert f"Revert #{first.changelog_id}" in buttons(listing)
        # The same button again (a replay, an old copy): refused, nothing changes.
        again = await press(tg, alice, listing, shown_with[f"Revert #{moved.changelog_id}"])
        assert "already kept or reverted" in again, again
        assert [f.value for f in await store.current_facts(ALICE, "default")] == ["London"]
        # The first change is stale now (its fact was reopened since): refused.
        stale = await press(tg, alice, listing, shown_with[f"Revert #{first.changelog_id}"])
        assert stale.startswith("The memory store refused"), stale
        assert [f.value for f in await store.current_facts(ALICE, "default")] == ["London"]
        # Keep the soul: kept once; then the soul revert is refused as already decided.
        kept = await press(tg, alice, listing, shown_with[f"Keep #{soul_id}"])
        assert kept == f"Kept #{soul_id}."
        assert "already kept" in await said(tg, alice, f"/memory review revert {soul_id}")
        assert await store.get_soul(ALICE, "default") == "Be brief."
        # Another user's change is not theirs to decide.
        assert "No change" in await said(tg, alice, "/memory review keep 999999")

        # The digest after a reflect cycle: private chat, unless turned off.
        assert "digests are off" in (await said(tg, alice, "/memory review off")).lower()
        await said(tg, alice, "I like tea")
        llm.push(
            tool_call("memory", {"action": "soul_update", "content": "Be brief. Tea."}),
            text("noted"),
        )
        count = len(tg.bot_messages(ALICE))
        await build_reflector(bot.services).run_cycle()
        assert len(tg.bot_messages(ALICE)) == count  # off: nothing sent
        await said(tg, alice, "/memory review on")
        await said(tg, alice, "and coffee")
        await said(tg, group, "we ship on Fridays", user=member)
        llm.push(
            tool_call("memory", {"action": "soul_update", "content": "Be brief. Coffee."}),
            text("noted"),
            tool_call("memory", {"action": "profile_update", "content": "Ships on Fridays."}),
            text("noted"),
        )
        in_group_before = len(tg.bot_messages(GROUP))
        count = len(tg.bot_messages(ALICE))
        report = await build_reflector(bot.services).run_cycle()
        assert sorted(s.status for s in report.sessions) == ["changed", "changed"]
        await tg.wait_for(lambda: len(tg.bot_messages(ALICE)) > count)
        digest = tg.bot_messages(ALICE)[-1]
        assert digest.text.startswith("Reflect changed your memory"), digest.text
        # (Which scripted write each session's review got depends on the review order.)
        assert re.search(r"^#\d+ (soul|profile): now “", digest.text, re.M), digest.text
        assert digest.reply_markup and digest.reply_markup["inline_keyboard"]
        assert len(tg.bot_messages(GROUP)) == in_group_before  # never unprompted in a group


async def test_reflects_fact_change_is_digested_and_reverted_by_its_button(
    tg: FakeTelegram, llm: FakeOpenAI, tmp_path: Path
) -> None:
    async with live_bot(tmp_path, tg, llm, provider="lcm") as bot:
        alice = tg.private(ALICE, "Alice")
        await said(tg, alice, "I work at Acme")
        acme = await message_id(bot, "I work at Acme")
        llm.push(
            tool_call(
                "memory",
                {"action": "fact_set", "key": "employer", "value": "Acme", "message_ids": [acme]},
            ),
            text("noted the employer"),
        )
        count = len(tg.bot_messages(ALICE))
        report = await build_reflector(bot.services).run_cycle()
        assert [s.status for s in report.sessions] == ["changed"]
        await tg.wait_for(lambda: len(tg.bot_messages(ALICE)) > count)
        digest = tg.bot_messages(ALICE)[-1]
        assert "facts: employer: Acme" in digest.text, digest.text
        assert re.search(r"evidence: \d{4}-\d\d-\d\d “I work at Acme”", digest.text), digest.text
        [(label, data)] = [(k, v) for k, v in buttons(digest).items() if k.startswith("Revert")]
        answer = await press(tg, alice, digest, data)
        assert answer.startswith(f"Reverted {label.removeprefix('Revert ')}"), answer
        assert await bot.provider.current_facts(ALICE, "default") == []
        [row] = await bot.provider.read_changelog(ALICE, "default", "fact", 1)
        assert row.source == "user"
        # The console's changelog shows the review of the run and the user's decision.
        kinds = [(r.scope, r.action) for r in await bot.provider.read_changelog(ALICE, "default")]
        assert ("review", "revert") in kinds and ("reflect", "review") in kinds
