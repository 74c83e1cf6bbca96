"""A reply says what it answers: live replies are stored (and sent to the model) as a
chat import stores them, `[Ann, replying to Bob: "first words…"] text`, so a reply to
last week's message does not read as an answer to the message before it."""

from __future__ import annotations

from pathlib import Path

from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.telegram_server import FakeTelegram, User
from tests.telegram.harness import running_bot

ALICE, BOB = User(42, "Alice"), User(43, "Bob")


def sent_to_model(llm: FakeOpenAI) -> list[str]:
    return [m["content"] for m in llm.requests[-1]["messages"] if m["role"] != "system"]


async def test_a_private_reply_names_and_quotes_what_it_answers(
    tg: FakeTelegram, llm: FakeOpenAI, tmp_path: Path
) -> None:
    async with running_bot(tg, llm, tmp_path):
        chat = tg.private(42, "Alice")
        first = chat.send("we adopted a puppy called Rex from the shelter on Sunday")
        await tg.wait_for_message(42, contains="echo: we adopted")
        chat.send("something else")
        await tg.wait_for_message(42, contains="echo: something else")
        # A reply to her own older message, then one quoting part of the bot's answer.
        chat.send("how old is he now?", reply_to=first["message_id"])
        await tg.wait_for_message(42, contains="echo: [replying to Alice")
        answer = tg.bot_messages(42)[0]
        chat.send("yes, that one", reply_to=answer, quote="called Rex")
        await tg.wait_for_message(42, contains="echo: [replying to Mnemo")
    # The last request holds the stored history before the new message.
    history = sent_to_model(llm)
    assert history[-1] == '[replying to Mnemo: "called Rex"] yes, that one'
    assert history[-3] == (
        '[replying to Alice: "we adopted a puppy called Rex from the…"] how old is he now?'
    )
    assert history[-5] == "something else"  # a message that replies to nothing is unchanged


async def test_a_group_reply_names_its_author_and_what_it_answers(
    tg: FakeTelegram, llm: FakeOpenAI, tmp_path: Path
) -> None:
    async with running_bot(tg, llm, tmp_path):
        group = tg.group(-1001, "Team")
        group.send(f"@{tg.username} the release is on Friday", user=ALICE)
        await tg.wait_for_message(-1001, contains="echo: [Alice] the release")
        answer = tg.bot_messages(-1001)[0]
        group.send("and the demo?", user=BOB, reply_to=answer)  # a reply addresses the bot
        await tg.wait_for_message(-1001, contains="echo: [Bob, replying to Mnemo")
    assert sent_to_model(llm)[-1] == (
        '[Bob, replying to Mnemo: "echo: [Alice] the release is on Friday"] and the demo?'
    )


async def test_a_forum_topic_message_is_no_reply(
    tg: FakeTelegram, llm: FakeOpenAI, tmp_path: Path
) -> None:
    async with running_bot(tg, llm, tmp_path):
        topic = tg.group(-1002, "Forum", forum=True).topic(7, "Plans")
        topic.send(f"@{tg.username} hello there", user=ALICE)
        await tg.wait_for_message(-1002, contains="echo: ")
    assert sent_to_model(llm)[-1] == "[Alice] hello there"
