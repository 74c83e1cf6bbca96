"""Consent in groups through Telegram on the fake servers: a member forgets what they
said in a group (`/memory forget mine`, theirs alone to confirm), keeps their future
messages out of the group's memory (`/memory optout`, undone by `/memory optin`), and
the group's admins are whoever Telegram says (getChatMember). After each, the member's
words are nowhere: search, the rebuilt summaries, the model's later prompts, every live
row, and the SQLite file and WAL byte for byte."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import sqlalchemy as sa

from memory.search.semantic.backlog import EmbeddingWorker
from memory.search.semantic.client import Embedder
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.summarizer import KeepingSummarizer
from tests.fakes.telegram_server import BotMessage, Chat, FakeTelegram, User
from tests.memory.test_forgetting_bytes import _live_rows_holding
from tests.telegram.harness import running_bot
from tests.telegram.test_forget import _summaries

GROUP = -1001
ALICE, BOB, CAROL = User(11, "Alice"), User(12, "Bob"), User(13, "Carol")
TOKEN = "Zqxalicesecret"
NEEDLE = "zqxalicesecr"  # what any copy holds, the porter stem included
MINE = re.compile(r"/memory forget mine confirm ([0-9a-f]+) within")


async def said(tg: FakeTelegram, group: Chat, text: str, user: User, expect: str) -> BotMessage:
    """`user` says `text` in the group; the bot's one answer, which holds `expect`."""
    before = len(tg.bot_messages(GROUP))
    group.send(text, user=user)
    await tg.wait_for(lambda: len(tg.bot_messages(GROUP)) > before)
    answer = tg.bot_messages(GROUP)[-1]
    assert expect in answer.text, answer.text
    return answer


async def talk(tg: FakeTelegram, group: Chat, user: User, words: list[str]) -> None:
    for word in words:
        await said(tg, group, f"@{tg.username} {user.first_name} says {word}", user, "echo:")


def command(tg: FakeTelegram, words: str) -> str:
    return f"/memory@{tg.username} {words}"


async def no_trace(bot, needle: str) -> None:  # type: ignore[no-untyped-def]
    """No live row, and (SQLite) no byte of the database file or its WAL, holds it."""
    engine = bot.provider.engine
    assert await _live_rows_holding(engine, needle) == []
    if engine.dialect.name == "sqlite":
        database = Path(str(engine.url.database))
        for path in (database, Path(f"{database}-wal")):
            if path.exists():
                assert needle.encode() not in path.read_bytes().lower(), path


async def vectors(engine) -> set[tuple[str, str]]:  # type: ignore[no-untyped-def]
    async with engine.connect() as conn:
        rows = await conn.execute(sa.text("SELECT source, item_key FROM embeddings"))
        return {(r[0], r[1]) for r in rows}


async def ids_of(engine, sql: str) -> set[str]:  # type: ignore[no-untyped-def]
    async with engine.connect() as conn:
        return {str(r[0]) for r in await conn.execute(sa.text(sql))}


@pytest.mark.parametrize(
    ("provider", "db"), [("lcm", "sqlite"), ("simple", "sqlite"), ("lcm", "postgres")]
)
async def test_forget_mine(
    tg: FakeTelegram, llm: FakeOpenAI, tmp_path: Path, provider: str, db: str
) -> None:
    embedder = Embedder("fake-embed", base_url=llm.base_url, api_key="test-key")
    async with running_bot(
        tg,
        llm,
        tmp_path,
        provider=provider,
        db=db,
        summarizer=KeepingSummarizer(),
        embedder=embedder,
    ) as bot:
        engine = bot.provider.engine
        worker = EmbeddingWorker(bot.provider, embedder)
        group = tg.group(GROUP, "Team")
        await talk(tg, group, ALICE, [TOKEN, "Zalice1"])
        await talk(tg, group, BOB, ["Zbob0", "Zbob1"])
        await talk(tg, group, ALICE, ["Zalice2"])
        await talk(tg, group, BOB, ["Zbob2", "Zbob3"])
        await said(tg, group, f"/compact@{tg.username}", BOB, "Compacted")
        assert TOKEN in await _summaries(bot.provider)
        await said(tg, group, command(tg, f"search {TOKEN}"), BOB, TOKEN)
        # Alice's private memory is hers, the group's the group's: neither sees the other.
        tg.private(ALICE.id).send(f"/memory search {TOKEN}", user=ALICE)
        [private] = await tg.wait_for(lambda: tg.bot_messages(ALICE.id))
        assert private.text.startswith(("No matches for", "No close matches for")), private.text
        tg.private(ALICE.id).send("/memory forget mine", user=ALICE)
        await tg.wait_for(lambda: len(tg.bot_messages(ALICE.id)) > 1)
        assert "is for groups" in tg.bot_messages(ALICE.id)[-1].text
        # Her messages (and everything else) get vectors.
        await worker.run_once()
        hers = await ids_of(
            engine,
            f"SELECT message_id FROM message_origins WHERE sender_id = {ALICE.id}",
        )
        assert len(hers) == 3 and {("message", i) for i in hers} <= await vectors(engine)

        # Bob's own request is his: Alice can neither confirm it nor press its button.
        bobs = await said(tg, group, command(tg, "forget mine"), BOB, "forget 8 message(s)")
        assert "Zbob0" in bobs.text and TOKEN not in bobs.text
        [bob_code] = MINE.findall(bobs.text)
        await said(tg, group, command(tg, f"forget mine confirm {bob_code}"), ALICE, "not yours")
        [[bob_button]] = bobs.reply_markup["inline_keyboard"]  # type: ignore[index]
        before = len(tg.bot_messages(GROUP))
        group.press(bobs, bob_button["callback_data"], user=ALICE)
        await tg.wait_for(lambda: len(tg.bot_messages(GROUP)) > before)
        assert "not yours" in tg.bot_messages(GROUP)[-1].text
        assert bobs.reply_markup is not None  # still Bob's to press
        await said(tg, group, command(tg, "forget mine cancel"), BOB, "Cancelled")

        # Alice forgets hers by the button: her 3 messages and the 3 answers to them.
        # Only the newest preview counts: an older one's button does nothing.
        older = await said(tg, group, command(tg, "forget mine"), ALICE, "forget 6 message(s)")
        [[old_button]] = older.reply_markup["inline_keyboard"]  # type: ignore[index]
        preview = await said(tg, group, command(tg, "forget mine"), ALICE, "forget 6 message(s)")
        assert older.reply_markup is None  # taken off once the newer one is shown
        await said(tg, group, command(tg, "forget mine confirm"), ALICE, "Which request?")
        before = len(tg.bot_messages(GROUP))
        group.press(older, old_button["callback_data"], user=ALICE)
        await tg.wait_for(lambda: len(tg.bot_messages(GROUP)) > before)
        assert "no longer valid" in tg.bot_messages(GROUP)[-1].text
        assert TOKEN in preview.text and "Zbob0" not in preview.text
        assert "summaries depend on them" in preview.text
        [[button]] = preview.reply_markup["inline_keyboard"]  # type: ignore[index]
        before = len(tg.bot_messages(GROUP))
        group.press(preview, button["callback_data"], user=ALICE)
        await tg.wait_for(lambda: len(tg.bot_messages(GROUP)) > before)
        assert "Forgot 6 message(s)" in tg.bot_messages(GROUP)[-1].text
        assert preview.reply_markup is None

        summaries = await _summaries(bot.provider)
        assert TOKEN not in summaries and "Zalice2" not in summaries
        assert "Zbob0" in summaries or "Zbob3" in summaries  # Bob's words stay
        gone = await said(tg, group, command(tg, f"search {TOKEN}"), BOB, "matches for")
        assert gone.text.startswith(("No matches for", "No close matches for")), gone.text
        await said(tg, group, command(tg, "search Zbob2"), BOB, "Zbob2")
        await bot.conversations.drain()
        before_requests = len(llm.requests)
        await talk(tg, group, BOB, ["Zbob4"])
        prompt = str(llm.requests[before_requests:]).lower()
        assert NEEDLE not in prompt and "zalice2" not in prompt and "zbob3" in prompt
        await no_trace(bot, NEEDLE)
        await no_trace(bot, "zalice2")
        # No vector of a forgotten message or a replaced summary is left, new ones follow.
        await worker.run_once()
        left = await vectors(engine)
        messages = await ids_of(engine, "SELECT id FROM messages")
        assert not hers & messages
        assert {key for source, key in left if source == "message"} == messages
        if provider == "lcm":
            summaries = await ids_of(engine, "SELECT id FROM summaries")
            assert {key for source, key in left if source == "summary"} == summaries
        # Nothing of hers is left to forget.
        await said(tg, group, command(tg, "forget mine"), ALICE, "Nothing you said")
    await embedder.close()


@pytest.mark.parametrize("db", ["sqlite", "postgres"])
async def test_optout_keeps_a_members_words_out(
    tg: FakeTelegram, llm: FakeOpenAI, tmp_path: Path, db: str
) -> None:
    async with running_bot(
        tg, llm, tmp_path, provider="lcm", db=db, summarizer=KeepingSummarizer()
    ) as bot:
        group = tg.group(GROUP, "Team")
        tg.private(ALICE.id).send("/memory optout", user=ALICE)
        private = await tg.wait_for_message(ALICE.id, contains="is for groups")
        assert "forget everything" in private.text
        await talk(tg, group, BOB, ["Zbob0"])
        await said(tg, group, command(tg, "optout"), ALICE, "I will not remember")
        await said(tg, group, command(tg, "optout"), ALICE, "opted out here already")

        # Answered (the model reads the group's conversation and her words), stored nowhere.
        before_requests = len(llm.requests)
        hers = group.send(f"@{tg.username} my secret is {TOKEN}", user=ALICE)
        answer = await tg.wait_for_message(GROUP, contains="echo: [Alice] my secret")
        assert TOKEN in answer.text
        assert "Zbob0" in str(llm.requests[before_requests:])
        # Bob replies to her message: stored, without her words or name.
        group.send(f"@{tg.username} Zbob1 noted", user=BOB, reply_to=hers["message_id"])
        await tg.wait_for_message(GROUP, contains="echo: [Bob, replying to a member who opted")
        await talk(tg, group, BOB, [f"Zbob{i}" for i in range(2, 7)])
        await said(tg, group, f"/compact@{tg.username}", BOB, "Compacted")
        summaries = await _summaries(bot.provider)
        assert "Zbob0" in summaries and TOKEN not in summaries
        await said(tg, group, command(tg, f"search {TOKEN}"), BOB, "No matches")
        async with bot.provider.engine.connect() as conn:
            senders = (
                await conn.execute(
                    sa.text(
                        "SELECT DISTINCT sender_id FROM message_origins WHERE sender_id IS NOT NULL"
                    )
                )
            ).scalars()
            assert set(senders) == {BOB.id}
        await no_trace(bot, NEEDLE)

        # Back in: remembered again from her next message on.
        await said(tg, group, command(tg, "optin"), ALICE, "remember what you write")
        await talk(tg, group, ALICE, ["Zalice9"])
        await said(tg, group, command(tg, "search Zalice9"), BOB, "Zalice9")
        await said(tg, group, command(tg, f"search {TOKEN}"), BOB, "No matches")


async def test_group_admins_come_from_telegram(
    tg: FakeTelegram, llm: FakeOpenAI, tmp_path: Path
) -> None:
    async with running_bot(tg, llm, tmp_path, provider="lcm", admin_ids=[7]):
        tg.set_admins(GROUP, creator=ALICE.id, admins=[CAROL.id])
        group = tg.group(GROUP, "Team")
        await talk(tg, group, BOB, [TOKEN])
        # Bob is a plain member: refused, with no list of operators to ask.
        await said(tg, group, command(tg, f"forget {TOKEN}"), BOB, "admins")
        await said(tg, group, command(tg, "forget everything"), BOB, "operators only")
        asked = len(tg.calls_to("getChatMember"))
        assert asked >= 1
        # Carol administers the group (Telegram says so): she previews and confirms.
        preview = await said(tg, group, command(tg, f"forget {TOKEN}"), CAROL, "This would")
        # Bob presses her preview's button: refused, the button stays; Carol's press does it.
        [[button]] = preview.reply_markup["inline_keyboard"]  # type: ignore[index]
        before = len(tg.bot_messages(GROUP))
        group.press(preview, button["callback_data"], user=BOB)
        await tg.wait_for(lambda: len(tg.bot_messages(GROUP)) > before)
        assert "operators only" in tg.bot_messages(GROUP)[-1].text
        assert preview.reply_markup is not None
        before = len(tg.bot_messages(GROUP))
        group.press(preview, button["callback_data"], user=CAROL)
        await tg.wait_for(lambda: len(tg.bot_messages(GROUP)) > before)
        assert "Forgot 2 message(s)" in tg.bot_messages(GROUP)[-1].text
        # The creator is an admin too; the answers are cached (no second request for Carol).
        calls = len(tg.calls_to("getChatMember"))
        await said(tg, group, command(tg, "forget cancel"), CAROL, "Nothing to cancel")
        assert len(tg.calls_to("getChatMember")) == calls
        await said(tg, group, command(tg, "forget everything"), ALICE, "This would erase ALL")
        # Group admins get the group-wide commands, not the operators' ones.
        await said(tg, group, command(tg, "rollback profile 1"), CAROL, "operators only")
