"""Who gets an answer: allowed ids, group modes, forum topics, media, edits, commands
for other bots, oversized messages."""

from __future__ import annotations

from pathlib import Path

from memory.contract.types import ListOptions, Session
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.telegram_server import FakeTelegram, User
from tests.telegram.harness import running_bot
from tests.waits import eventually

ALICE = User(42, "Alice")
BOB = User(43, "Bob")


async def stored_sessions(provider: object) -> list[str]:
    infos = await provider.list_info(ListOptions(include_archived=True))  # type: ignore[attr-defined]
    return [i.id for i in infos]


async def test_disallowed_user_gets_one_line_and_nothing_is_stored(
    tg: FakeTelegram, llm: FakeOpenAI, tmp_path: Path
) -> None:
    async with running_bot(tg, llm, tmp_path, allowed_ids=[42]) as bot:
        stranger = tg.private(99)
        stranger.send("let me in")
        stranger.send("/memory status")
        stranger.send_photo()
        await tg.wait_for(lambda: len(tg.bot_messages(99)) == 3)
        assert {m.text for m in tg.bot_messages(99)} == {
            "Sorry, this is a private bot and I can't talk with you. Ask its operator for access."
        }
        tg.private(42).send("hi")  # the allowed user still gets answers
        await tg.wait_for_message(42, contains="echo: hi")
        stranger_stats = await bot.provider.stats(
            Session(id="default:telegram:99", user_id=99, channel="telegram")
        )
        assert stranger_stats.message_count == 0
        assert await stored_sessions(bot.provider) == ["default:telegram:42"]
    assert [m["content"] for m in llm.requests[0]["messages"] if m["role"] == "user"] == ["hi"]
    assert len(llm.requests) == 1


async def test_group_mention_mode(tg: FakeTelegram, llm: FakeOpenAI, tmp_path: Path) -> None:
    async with running_bot(tg, llm, tmp_path) as bot:
        group = tg.group(-1001, "Team")
        group.send("just chatting among ourselves", user=ALICE)
        group.send(f"@{tg.username} what is 2+2?", user=BOB)
        answer = await tg.wait_for_message(-1001, contains="2+2")
        # names the speaker for the model, quotes the message it answers
        assert answer.text == "echo: [Bob] what is 2+2?"
        asked = tg.calls_to("sendMessage", chat_id=-1001)[0].params
        assert asked["reply_parameters"]["message_id"] > 0
        group.send("and times 3?", user=ALICE, reply_to=answer)
        # a reply says what it answers (tests/telegram/test_replies.py)
        await tg.wait_for_message(
            -1001, contains='[Alice, replying to Mnemo: "echo: [Bob] what is 2+2?"] and times 3?'
        )
        group.send_photo(user=ALICE)  # not addressed: ignored
        group.send_photo(user=ALICE, reply_to=answer)  # addressed, but nothing to read
        await tg.wait_for_message(-1001, contains="I only read text")
        stats = await bot.provider.stats(
            Session(id="default:telegram:-1001", user_id=-1001, channel="telegram")
        )
    assert stats.message_count == 4  # two addressed turns; the chatter was not stored
    assert len(llm.requests) == 2
    # the group's memory scope is the group, not a member
    assert await stored_sessions(bot.provider) == ["default:telegram:-1001"]


async def test_group_always_and_disabled(tg: FakeTelegram, llm: FakeOpenAI, tmp_path: Path) -> None:
    async with running_bot(tg, llm, tmp_path, group_mode="always"):
        tg.group(-1002).send("anyone?", user=ALICE)
        await tg.wait_for_message(-1002, contains="[Alice] anyone?")
    async with running_bot(tg, llm, tmp_path / "b", group_mode="disabled"):
        tg.group(-1003).send(f"@{tg.username} hello?", user=ALICE)
        tg.group(-1003).send("/help", user=ALICE)
        tg.private(42).send("ping")  # processed after the group's updates
        await tg.wait_for_message(42, contains="echo: ping")
    assert tg.bot_messages(-1003) == []


async def test_forum_topics_are_separate_conversations(
    tg: FakeTelegram, llm: FakeOpenAI, tmp_path: Path
) -> None:
    async with running_bot(tg, llm, tmp_path, group_mode="always") as bot:
        forum = tg.group(-1004, "Forum", forum=True)
        forum.topic(10, "Cooking").send("pasta", user=ALICE)
        await tg.wait_for_message(-1004, contains="pasta", thread_id=10)
        forum.topic(20, "Travel").send("rome", user=ALICE)
        await tg.wait_for_message(-1004, contains="rome", thread_id=20)
        sessions = sorted(await stored_sessions(bot.provider))
    assert sessions == ["default:telegram:-1004:10", "default:telegram:-1004:20"]
    assert [c.params.get("message_thread_id") for c in tg.calls_to("sendMessage")] == [10, 20]
    # the second topic's model call does not see the first topic's history
    users = [m["content"] for m in llm.requests[-1]["messages"] if m["role"] == "user"]
    assert users == ["[Alice] rome"]


async def test_topic_reply_quirk_is_not_a_mention(
    tg: FakeTelegram, llm: FakeOpenAI, tmp_path: Path
) -> None:
    """In a forum topic every message replies to the topic's creation message; in mention
    mode that must not count as replying to the bot, even when the bot opened the topic."""
    async with running_bot(tg, llm, tmp_path):
        topic = tg.group(-1005, forum=True).topic(7, by_bot=True)
        topic.send("talking among ourselves", user=ALICE)
        topic.send(f"@{tg.username} now you", user=ALICE)
        await tg.wait_for_message(-1005, contains="now you")
    assert len(llm.requests) == 1


async def test_media_edits_and_unknown_commands(
    tg: FakeTelegram, llm: FakeOpenAI, tmp_path: Path
) -> None:
    async with running_bot(tg, llm, tmp_path):
        chat = tg.private(42)
        chat.send_photo()  # media without a caption (captioned: test_attachments)
        chat.send_sticker()
        chat.send_document(file_name="scan.pdf", mime_type="application/pdf")
        await tg.wait_for(lambda: len(tg.bot_messages(42)) == 3)
        assert {m.text for m in tg.bot_messages(42)} == {
            "I only read text for now: please send your message as text."
        }
        chat.send_voice()  # transcription: test_voice
        await tg.wait_for_message(42, contains="can't listen to voice messages")
        original = chat.send("first version")
        await tg.wait_for_message(42, contains="echo: first version")
        chat.edit(original, "second version")  # ignored, no reply
        chat.send("/frobnicate now")
        unknown = await tg.wait_for_message(42, contains="/frobnicate")
        assert "/help" in unknown.text
        group = tg.group(-1006)
        group.send("/frobnicate", user=ALICE)  # maybe another bot's: ignored
        group.send("/help@other_bot", user=ALICE)  # another bot's: ignored
        group.send(f"/frobnicate@{tg.username}", user=ALICE)
        await tg.wait_for_message(-1006, contains="/frobnicate")
    assert len(tg.bot_messages(-1006)) == 1
    assert len(llm.requests) == 1
    assert not any("second version" in c.params.get("text", "") for c in tg.calls)


async def test_huge_message_is_refused_without_harm(
    tg: FakeTelegram, llm: FakeOpenAI, tmp_path: Path
) -> None:
    async with running_bot(tg, llm, tmp_path) as bot:
        chat = tg.private(42)
        chat.send("x" * 1_000_000)  # possible through a self-hosted Bot API server
        refusal = await tg.wait_for_message(42, contains="too long")
        assert "1000000 characters" in refusal.text
        chat.send("still there?")
        await tg.wait_for_message(42, contains="echo: still there?")
        # Polled: a streamed answer is seen before its turn's rows commit.
        stats = await eventually(
            lambda: bot.provider.stats(
                Session(id="default:telegram:42", user_id=42, channel="telegram")
            ),
            lambda s: s.message_count >= 2,
        )
    assert stats.message_count == 2
