"""Answers that say where a memory came from (memory/actions/provenance.py, memory/actions/origins.py,
bot/channels/telegram/sources.py) and `/memory why`, on the real bot and the fake servers: a
fact planted early, compacted twice with a restart in between, then asked; the answer
carries a working source (a link in a supergroup, a reply quoting the original in a
private chat); `/memory why` lists the search and the id; another user's fact is never
returned or cited, even when the model cites its guessed id."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from bot.channels.telegram.delivery.handled import telegram_updates
from memory.storage.db import write_transaction
from memory.storage.history import origins
from memory.testing.databases import temp_database_url
from tests.fakes.openai_server import FakeOpenAI, Response, text
from tests.fakes.telegram_server import Chat, FakeTelegram, User
from tests.reliability.conftest import ask
from tests.reliability.harness import live_bot, scripted, tool_text
from tests.telegram.harness import answer_origins
from tests.telegram.test_resume import until_undelivered

PROVIDERS = ["simple", "lcm"]
ALICE, BOB = 42, 43
GROUP = -1001234567  # a supergroup: Telegram's internal id is 1234567
PLANTED = "my locker code is PLATYPUS-7731"
ON_BOTH_DATABASES = pytest.mark.parametrize(
    "db_kind", [pytest.param("sqlite"), pytest.param("postgres", marks=pytest.mark.postgres)]
)


class CitingModel:
    """The scripted model (harness.scripted), except that after a memory search it answers
    citing each message id the search returned, plus `guesses` (ids it makes up)."""

    def __init__(self) -> None:
        self.guesses: list[str] = []
        self.found: list[str] = []  # the ids the last search returned
        self.pause_s = 0.0  # between the streamed deltas of the answer

    def __call__(self, body: dict[str, Any]) -> Response:
        msgs = body.get("messages") or []
        last = msgs[-1] if msgs else {}
        if last.get("role") != "tool":
            return scripted(body)
        ids = re.findall(r"^\[message (\d+)\]", str(last.get("content") or ""), re.M)
        self.found = ids
        cites = " ".join(f"[{i}]" for i in [*ids, *self.guesses])
        return text(f"Your locker code is PLATYPUS-7731 {cites}.", pause_s=self.pause_s)


def message_ids(answer: str) -> list[str]:
    return sorted(re.findall(r"\[message (\d+)\]", answer), key=int)


async def _plant_and_compact(
    tg: FakeTelegram, chat: Chat, user: User | None, filler: str
) -> tuple[str, int]:
    """Plant the fact in `chat`, then talk and compact; returns (stored id, Telegram id)."""
    sent = chat.send(PLANTED, user=user)
    await tg.wait_for_message(chat.id, contains="PLATYPUS")
    planted = message_ids(await ask(tg, chat, "/memory search PLATYPUS", user=user))[0]
    for i in range(3):
        await ask(tg, chat, f"{filler} about the weather number {i}", user=user)
    assert "Compacted" in await ask(tg, chat, "/compact", user=user)
    return planted, int(sent["message_id"])


@ON_BOTH_DATABASES
@pytest.mark.parametrize("provider", PROVIDERS)
async def test_answer_cites_the_planted_message_after_compactions_and_a_restart(
    provider: str, db_kind: str, tg: FakeTelegram, tmp_path: Path
) -> None:
    model = CitingModel()
    sections: dict[str, Any] = {
        "memory": {"fresh_tail": 1},
        "compaction": {"keep_tail": 1},
        "telegram": {"group_mode": "always"},
    }
    alice, bob = tg.private(ALICE, "Alice"), tg.private(BOB, "Bob")
    group, member = tg.group(GROUP, "Team"), User(ALICE, "Alice")
    async with (
        FakeOpenAI(model) as llm,
        temp_database_url(db_kind, tmp_path) as url,
    ):
        async with live_bot(tmp_path, tg, llm, provider=provider, db_url=url, **sections):
            await ask(tg, bob, "my locker code is WOMBAT-99 at the gym")
            bob_id = message_ids(await ask(tg, bob, "/memory search WOMBAT"))[0]
            planted, tg_id = await _plant_and_compact(tg, alice, None, "filler")
            in_group, tg_group_id = await _plant_and_compact(tg, group, member, "chat")
        # A restart between the two compactions.
        async with live_bot(tmp_path, tg, llm, provider=provider, db_url=url, **sections) as bot:
            for chat, user in ((alice, None), (group, member)):
                for i in range(3):
                    await ask(tg, chat, f"more filler about gardening {i}", user=user)
                assert "Compacted" in await ask(tg, chat, "/compact", user=user)

            # Private: the answer quotes the planted message and names it; the model's
            # guess of Bob's id is dropped.
            model.guesses = [bob_id]
            search = tool_text({"action": "search", "text": "locker code PLATYPUS"})
            answer = await ask(tg, alice, search)
            reply = tg.bot_messages(ALICE)[-1]
            assert bob_id not in model.found and "WOMBAT" not in answer, answer
            # Every id the search returned is cited, numbered; the guess is not.
            cited = [int(n) for n in re.findall(r"\[(\d+)\]", answer.partition("Sources")[0])]
            assert cited == list(range(1, len(model.found) + 1)), answer
            assert answer.count("\n") == len(model.found) + 2, answer
            assert "1. 20" in answer and "“my locker code is PLATYPUS-7731”" in answer, answer
            assert reply.reply_to == tg_id, (reply.reply_to, tg_id)

            why = await ask(tg, alice, "/memory why")
            assert "search “locker code PLATYPUS”" in why and f"message {planted}" in why, why
            assert f"message {bob_id}" not in why, why

            shown = await ask(tg, alice, f"/memory show {planted}")
            assert PLANTED in shown, shown
            assert await ask(tg, alice, f"/memory show {bob_id}") == "Not found."

            # Supergroup: the answer links the original message in the group.
            answer = await ask(tg, group, search, user=member)
            reply = tg.bot_messages(GROUP)[-1]
            links = [e.get("url") for e in reply.entities if e.get("type") == "text_link"]
            assert f"https://t.me/c/1234567/{tg_group_id}" in links, (answer, reply.entities)
            assert bob_id not in model.found and "WOMBAT" not in answer, answer
            assert all(link.startswith("https://t.me/c/1234567/") for link in links), links
            assert answer.startswith("Your locker code is PLATYPUS-7731 [1]"), answer
            why = await ask(tg, group, "/memory why", user=member)
            assert f"message {in_group}" in why, why
            shown = await ask(tg, group, f"/memory show {in_group}", user=member)
            assert f"https://t.me/c/1234567/{tg_group_id}" in shown, shown

            # Forgetting the planted message takes its origin with it.
            async with bot.engine.connect() as conn:
                before = (await conn.execute(sa.select(sa.func.count()).select_from(origins))).one()
            assert before[0] >= 2
            preview = await ask(tg, alice, "/memory forget PLATYPUS-7731")
            assert "confirm" in preview, preview
            code = re.search(r"forget confirm ([0-9a-f]+) within", preview)
            assert code is not None, preview
            await ask(tg, alice, f"/memory forget confirm {code.group(1)}")
            async with bot.engine.connect() as conn:
                left = (
                    await conn.execute(
                        sa.select(origins.c.message_id).where(origins.c.message_id == int(planted))
                    )
                ).all()
            assert left == []


async def test_a_source_in_a_forum_topic_links_into_the_topic(
    tg: FakeTelegram, tmp_path: Path
) -> None:
    model = CitingModel()
    async with (
        FakeOpenAI(model) as llm,
        live_bot(tmp_path, tg, llm, provider="lcm", telegram={"group_mode": "always"}),
    ):
        topic, member = tg.group(GROUP, "Team", forum=True).topic(77, "Plans"), User(ALICE)
        sent = topic.send(PLANTED, user=member)
        await tg.wait_for_message(GROUP, contains="PLATYPUS", thread_id=77)
        await ask(tg, topic, tool_text({"action": "search", "text": "locker"}), user=member)
        reply = tg.bot_messages(GROUP, 77)[-1]
        links = [e.get("url") for e in reply.entities if e.get("type") == "text_link"]
        assert f"https://t.me/c/1234567/77/{sent['message_id']}" in links, (reply.text, links)


async def test_a_streamed_private_answer_quotes_its_source_in_a_reply_of_its_own(
    tg: FakeTelegram, tmp_path: Path
) -> None:
    """An answer Telegram already shows while it streams cannot become a reply: its
    sources follow as a message of their own, quoting the original."""
    model = CitingModel()
    async with (
        FakeOpenAI(model) as llm,
        live_bot(tmp_path, tg, llm, provider="simple"),
    ):
        alice = tg.private(ALICE, "Alice")
        sent = alice.send(PLANTED)
        await tg.wait_for_message(ALICE, contains="PLATYPUS")
        model.pause_s = 0.2  # the answer streams for about 2 s, edited every 1 s
        alice.send(tool_text({"action": "search", "text": "locker"}))
        source = await tg.wait_for_message(ALICE, contains="“my locker code is PLATYPUS-7731”")
        answer = tg.bot_messages(ALICE)[-2]
        assert answer.text.startswith("Your locker code is PLATYPUS-7731 [1]"), answer.text
        assert answer.edits and answer.reply_to is None and "Sources" not in answer.text
        assert source.reply_to == sent["message_id"] and source.text.startswith("Sources:")


# --- the bot's own answers: where they went, and sent again after a restart ------------

LONG_WAIT = 120  # flood control far beyond what a handler waits: the answer is owed


@ON_BOTH_DATABASES
@pytest.mark.parametrize("provider", PROVIDERS)
async def test_the_bot_s_own_answer_links_to_where_it_was_sent(
    provider: str, db_kind: str, tg: FakeTelegram, tmp_path: Path
) -> None:
    """The stored answer's origin is the Telegram message it went out as (the first of a
    long answer's messages), so citing it or `/memory show` of it links like a user's."""
    model = CitingModel()
    group, member = tg.group(GROUP, "Team"), User(ALICE, "Alice")
    alice = tg.private(ALICE, "Alice")
    async with (
        FakeOpenAI(model) as llm,
        live_bot(
            tmp_path, tg, llm, provider=provider, db_kind=db_kind, telegram={"group_mode": "always"}
        ) as bot,
    ):
        echoed = await ask(tg, group, PLANTED, user=member)
        first = tg.bot_messages(GROUP)[-1]
        assert first.text == echoed and "PLATYPUS" in echoed, echoed
        [(answer_id, sent_as)] = (await answer_origins(bot.engine, GROUP, 1)).items()
        assert sent_as == first.message_id
        link = f"https://t.me/c/1234567/{first.message_id}"
        shown = await ask(tg, group, f"/memory show {answer_id}", user=member)
        assert "echo: [Alice] my locker code" in shown and link in shown, shown

        # A later answer citing the bot's earlier answer links to it.
        search = tool_text({"action": "search", "text": "locker code PLATYPUS"})
        await ask(tg, group, search, user=member)
        assert answer_id in model.found, model.found
        reply = tg.bot_messages(GROUP)[-1]
        links = [e.get("url") for e in reply.entities if e.get("type") == "text_link"]
        assert link in links, (reply.text, links)

        # A long answer, split in several messages, is linked to its first.
        before = len(tg.bot_messages(ALICE))
        alice.send("PLATYPUS " * 600)  # echoed: over Telegram's 4096 characters
        await tg.wait_for(lambda: len(tg.bot_messages(ALICE)) >= before + 2)
        parts = tg.bot_messages(ALICE)[before:]
        [sent_as] = (await answer_origins(bot.engine, ALICE, 1)).values()
        assert sent_as == parts[0].message_id != parts[1].message_id


@ON_BOTH_DATABASES
@pytest.mark.parametrize("provider", PROVIDERS)
async def test_an_answer_sent_after_a_restart_keeps_its_sources_and_gets_its_link(
    provider: str, db_kind: str, tg: FakeTelegram, tmp_path: Path
) -> None:
    """An answer Telegram did not take (flood control outlasting the run) is sent at the
    next start with the sources it had, found again from its stored turn, and linked to
    where it went then."""
    model = CitingModel()
    group, member = tg.group(GROUP, "Team"), User(ALICE, "Alice")
    sections: dict[str, Any] = {"telegram": {"group_mode": "always"}}
    async with FakeOpenAI(model) as llm, temp_database_url(db_kind, tmp_path) as url:
        run = {"provider": provider, "db_url": url, "record_updates": True, **sections}
        async with live_bot(tmp_path, tg, llm, **run) as bot:
            planted = group.send(PLANTED, user=member)
            await tg.wait_for_message(GROUP, contains="PLATYPUS")
            await answer_origins(bot.engine, GROUP, 1)
            tg.flood(LONG_WAIT, chat_id=GROUP)
            group.send(tool_text({"action": "search", "text": "PLATYPUS"}), user=member)
            await until_undelivered(bot.services)
        tg.end_flood()
        async with live_bot(tmp_path, tg, llm, **run) as bot:
            reply = await tg.wait_for_message(GROUP, contains="Your locker code", within=15)
            links = [e.get("url") for e in reply.entities if e.get("type") == "text_link"]
            assert f"https://t.me/c/1234567/{planted['message_id']}" in links, (reply.text, links)
            assert reply.text.startswith("Your locker code is PLATYPUS-7731 [1]"), reply.text
            sent = await answer_origins(bot.engine, GROUP, 2)
            assert reply.message_id in sent.values(), (reply.message_id, sent)


async def test_an_answer_marked_without_its_text_is_sent_with_its_sources(
    tg: FakeTelegram, tmp_path: Path
) -> None:
    """A row marked before the answer's text was kept with it (revision bot_0006) is
    sent from the history: numbered citations and their sources, as first computed,
    never the raw ids the model wrote."""
    model = CitingModel()
    group, member = tg.group(GROUP, "Team"), User(ALICE, "Alice")
    async with FakeOpenAI(model) as llm, temp_database_url("sqlite", tmp_path) as url:
        run: dict[str, Any] = {
            "provider": "lcm",
            "db_url": url,
            "record_updates": True,
            "telegram": {"group_mode": "always"},
        }
        async with live_bot(tmp_path, tg, llm, **run) as bot:
            planted = group.send(PLANTED, user=member)
            await tg.wait_for_message(GROUP, contains="PLATYPUS")
            tg.flood(LONG_WAIT, chat_id=GROUP)
            group.send(tool_text({"action": "search", "text": "PLATYPUS"}), user=member)
            await until_undelivered(bot.services)
            async with write_transaction(bot.engine) as conn:
                await conn.execute(sa.update(telegram_updates).values(answer=None))
        tg.end_flood()
        async with live_bot(tmp_path, tg, llm, **run):
            reply = await tg.wait_for_message(GROUP, contains="Your locker code", within=15)
    links = [e.get("url") for e in reply.entities if e.get("type") == "text_link"]
    assert f"https://t.me/c/1234567/{planted['message_id']}" in links, (reply.text, links)
    assert reply.text.startswith("Your locker code is PLATYPUS-7731 [1]"), reply.text
