"""Follow-ups in a group: an asked-for one goes to the forum topic it was asked in, as a
reply to the original, quoting and linking it; one the bot proposes there is never sent
(private chats only by default, `followups.groups`)."""

from __future__ import annotations

from pathlib import Path

from memory.actions.tool import run_tool
from memory.contract.context import with_change_source
from memory.contract.types import ChangeSource, Owner, Session
from memory.followups import store
from tests.fakes.openai_server import FakeOpenAI, text, tool_call
from tests.fakes.telegram_server import FakeTelegram, User
from tests.followups.kit import all_followups, at, bot_with_delivery

GROUP = -1001234567890
TOPIC = 7


async def test_group_reminder_goes_to_its_topic_and_proposed_ones_do_not(
    tg: FakeTelegram, llm: FakeOpenAI, tmp_path: Path
) -> None:
    async with bot_with_delivery(tg, llm, tmp_path, group_mode="always") as (bot, delivery, clock):
        topic = tg.group(GROUP, forum=True).topic(TOPIC)
        llm.push(
            tool_call(
                "memory",
                {"action": "followup_add", "due": "2030-02-01T12:00", "text": "ship the release"},
            ),
            text("Will do."),
        )
        asked = topic.send("remind us to ship the release", user=User(42))
        line = await tg.wait_for_message(GROUP, contains="I'll follow up", thread_id=TOPIC)
        assert "ship the release" in line.text
        [item] = await all_followups(bot)
        assert (item.user_id, item.chat_id, item.thread_id) == (GROUP, GROUP, TOPIC)

        session = Session(item.session_id, "default", GROUP, "telegram")
        with with_change_source(ChangeSource.REFLECT):
            said = await run_tool(
                bot.provider,
                session,
                {"action": "followup_add", "due": "2030-02-01T12:00", "text": "how did it go?"},
                source=ChangeSource.REFLECT,
            )
        assert said.startswith("follow-up"), said

        before = len(tg.bot_messages(GROUP, TOPIC))
        clock.now = at("2030-02-01T12:00+00:00")
        assert await delivery.tick() == 1
        [out] = tg.bot_messages(GROUP, TOPIC)[before:]
        assert out.text.startswith("⏰ ship the release\nYou mentioned on ")
        assert out.text.endswith(f"https://t.me/c/1234567890/{TOPIC}/{asked['message_id']}")
        assert out.reply_to == asked["message_id"]
        states = {i.text: i.state for i in await all_followups(bot)}
        assert states == {"ship the release": store.SENT, "how did it go?": store.DISMISSED}


async def test_a_group_that_removed_the_bot_resumes_when_someone_writes_there(
    tg: FakeTelegram, llm: FakeOpenAI, tmp_path: Path, db_kind: str
) -> None:
    """A group's follow-ups are the group's memory's: refused there (403: the bot was
    removed), they pause for the group; a member's private chat does not resume them (it
    is another memory), a message in the group does."""
    async with bot_with_delivery(tg, llm, tmp_path, db=db_kind, group_mode="always") as (
        bot,
        delivery,
        clock,
    ):
        group = tg.group(GROUP)
        llm.push(
            tool_call(
                "memory", {"action": "followup_add", "due": "2030-02-01T12:00", "text": "demo"}
            ),
            text("Will do."),
        )
        group.send("remind us of the demo", user=User(42))
        await tg.wait_for_message(GROUP, contains="I'll follow up")
        tg.fail("sendMessage", status=403, description="Forbidden: bot was kicked from the group")
        clock.now = at("2030-02-01T12:00+00:00")
        assert await delivery.tick() == 0
        engine = bot.provider.engine
        assert (await store.get_prefs(engine, Owner(GROUP, "default"))).paused

        llm.push(text("Hello in private."))
        tg.private(42).send("hi")
        await tg.wait_for_message(42, contains="Hello in private.")
        assert (await store.get_prefs(engine, Owner(GROUP, "default"))).paused
        assert await delivery.tick() == 0

        llm.push(text("Back in the group."))
        group.send("we added the bot back", user=User(42))
        await tg.wait_for_message(GROUP, contains="Back in the group.")
        before = len(tg.bot_messages(GROUP))
        assert await delivery.tick() == 1
        [out] = tg.bot_messages(GROUP)[before:]
        assert out.text.startswith("⏰ demo")
        [item] = await all_followups(bot)
        assert item.state == store.SENT
