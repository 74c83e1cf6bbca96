"""`/memory export` on the fake Bot API (bot/channels/telegram/portability/memory_files.py):
the sender's memory comes as a zip document (the versioned JSON and its Markdown), one
progress message, one export an hour, private chats only; the JSON imports into another
database with the same memory content, byte for byte, and sent back in a private chat it
is offered with a dry run, then imported into the sender's own memory."""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path
from typing import Any

import pytest

from bot.ops import transfer
from bot.ops.common import open_memory
from memory.compaction.summarizer import StaticSummarizer
from memory.contract.capabilities import ProviderContext
from memory.contract.errors import InvalidArgument
from memory.contract.registry import create_provider
from memory.contract.types import NoteKind, Session
from memory.storage import forgetting as fg
from memory.testing.databases import temp_database_url, temp_engine
from memory.transfer.memory_export import (
    FORMAT,
    export_memory,
    import_memory,
    memory_content,
    retarget_session,
)
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.telegram_server import FakeTelegram, User
from tests.ops.conftest import make_settings as make_ops_settings
from tests.telegram.harness import running_bot

ALICE, BOB = 42, 77


def _canonical(doc: dict[str, Any]) -> bytes:
    return json.dumps(memory_content(doc), sort_keys=True, ensure_ascii=False).encode()


def _unzip(body: bytes) -> tuple[dict[str, Any], str]:
    with zipfile.ZipFile(io.BytesIO(body)) as z:
        return json.loads(z.read("memory.json")), z.read("memory.md").decode()


async def _said(tg: FakeTelegram, chat_id: int, words: str, expect: str) -> str:
    before = len(tg.bot_messages(chat_id))
    tg.private(chat_id).send(words)
    await tg.wait_for(
        lambda: any(expect in m.text for m in tg.bot_messages(chat_id)[before:]), within=20
    )
    return next(m.text for m in tg.bot_messages(chat_id)[before:] if expect in m.text)


async def test_an_export_is_sent_as_a_document_and_reimports_byte_for_byte(
    tg: FakeTelegram,
    llm: FakeOpenAI,
    tmp_path: Path,
    db_kind: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    async with running_bot(tg, llm, tmp_path / "a", provider="lcm", db=db_kind) as bot:
        agent = bot.settings.agent.id
        alice = tg.private(ALICE)
        words = ["sourdough starter at 24 degrees", "rye flour on Sundays", "bake at 250"]
        for word in words + [f"and then step {n}" for n in range(5)]:
            await _said(tg, ALICE, word, f"echo: {word}")
        await _said(tg, ALICE, "/memory constrain Answer in metric units", "")
        compacted = await _said(tg, ALICE, "/compact", "ompact")
        assert "summar" in compacted.lower(), compacted
        await _said(tg, BOB, "bob's secret plan", "echo: bob's secret plan")

        tg.group(-100).send("/memory export", user=User(ALICE))
        await tg.wait_for_message(-100, contains="ask me in a private chat")

        alice.send("/memory export")
        await tg.wait_for(lambda: len(tg.documents) == 1, within=30)
        await tg.wait_for_message(ALICE, contains="Exported: the file is below.")
        [sent] = tg.documents
        assert sent.chat_id == ALICE and sent.file_name == f"mnemo-memory-{ALICE}.zip"
        assert "1 conversations" in sent.caption
        exported, markdown = _unzip(sent.content)
        progress = [m for m in tg.bot_messages(ALICE) if m.text.startswith("Export")]
        assert len(progress) == 1  # one progress message, edited with the outcome

        again = await _said(tg, ALICE, "/memory export", "One export an hour")
        assert "try again in" in again and len(tg.documents) == 1

        # The document: versioned sections, dated messages with origins, summaries with
        # their sources, the rules with their changelog; nobody else's words.
        assert (exported["format"], exported["version"]) == (FORMAT, 1)
        assert exported["owner"] == {"user_id": ALICE, "agent_id": agent}
        [session] = exported["sections"]["sessions"]
        said = [m for m in session["messages"] if m["role"] == "user"]
        assert [m["content"] for m in said][:1] == ["sourdough starter at 24 degrees"]
        assert all(m["created_at"] and m["origin"]["chat_id"] == ALICE for m in said)
        summaries = session["provider"]["data"]["summaries"]
        assert summaries and all(s["message_seqs"] or s["child_ids"] for s in summaries)
        memory = exported["sections"]["memory"]
        assert "Answer in metric units" in memory["state"]["constraints"]
        assert [c["scope"] for c in memory["changelog"]][:1] == ["constraint"]
        assert "bob's secret plan" not in json.dumps(exported)
        assert "sourdough starter at 24 degrees" in markdown
        assert "Answer in metric units" in markdown

        # What the bot has now is what was exported.
        now = await export_memory(fg.engine_of(bot.provider), ALICE, agent, bot.provider)
        assert _canonical(now) == _canonical(exported)

    # Another database (`mnemo memory import`'s path): the same memory, byte for byte.
    (tmp_path / "b").mkdir()
    async with temp_engine(db_kind, tmp_path / "b") as engine:
        ctx = ProviderContext(
            engine=engine,
            summarizer=StaticSummarizer("unused"),
            agent_id=agent,
            data_dir=tmp_path / "b" / "data",
            config={"keep_tail": 2},
        )
        other = create_provider("lcm", ctx)
        try:
            dry = await import_memory(engine, exported, other, dry_run=True)
            assert dry.messages == len(session["messages"])
            empty = await export_memory(engine, ALICE, agent, other)
            assert empty["sections"]["sessions"] == []  # the dry run wrote nothing
            await import_memory(engine, exported, other)
            copy = await export_memory(engine, ALICE, agent, other)
            assert _canonical(copy) == _canonical(exported)
            with pytest.raises(InvalidArgument, match="here already"):
                await import_memory(engine, exported, other)  # twice: refused whole
        finally:
            await other.close()

    # `mnemo memory import ZIP --user 77`: the zip itself, into another person's memory.
    (tmp_path / "c").mkdir()
    path = tmp_path / "c" / sent.file_name
    path.write_bytes(sent.content)
    async with temp_database_url(db_kind, tmp_path / "c") as url:
        settings = make_ops_settings(url, tmp_path / "c", provider="lcm")
        assert await transfer.import_(settings, str(path), user=BOB, dry_run=True) == 0
        said = capsys.readouterr().out
        assert said.startswith(f"Would import 1 conversations, {len(session['messages'])} ")
        assert await transfer.import_(settings, str(path), user=BOB) == 0
        assert "Imported 1 conversations" in capsys.readouterr().out
        async with open_memory(settings) as m:
            bobs = await export_memory(m.engine, BOB, agent, m.provider)
        moved = [retarget_session(s, BOB, agent) for s in exported["sections"]["sessions"]]
        assert bobs["sections"]["sessions"] == moved
        assert bobs["sections"]["memory"] == exported["sections"]["memory"]
        out = io.BytesIO()  # `mnemo memory export --user 77`: the same zip the bot sends
        assert await transfer.export_memory_zip(settings, BOB, out) == 0
        assert _canonical(_unzip(out.getvalue())[0]) == _canonical(bobs)
        assert await transfer.export_memory_zip(settings, 55, io.BytesIO()) == 1  # nobody


async def test_an_export_sent_back_is_dry_run_then_imported_into_the_senders_memory(
    tg: FakeTelegram, llm: FakeOpenAI, tmp_path: Path
) -> None:
    async with running_bot(tg, llm, tmp_path, provider="lcm") as bot:
        agent = bot.settings.agent.id
        await _said(tg, ALICE, "the lemon tart recipe", "echo: the lemon tart recipe")
        tg.private(ALICE).send("/memory export")
        await tg.wait_for(lambda: len(tg.documents) == 1, within=30)
        body = tg.documents[0].content
        exported, _ = _unzip(body)

        # Alice's own file back to her: her conversations are here already.
        before = len(tg.bot_messages(ALICE))
        tg.private(ALICE).send_document(file_name=tg.documents[0].file_name, content=body)
        await tg.wait_for(lambda: len(tg.bot_messages(ALICE)) > before)
        assert "here already" in tg.bot_messages(ALICE)[before].text

        # Bob imports it into his own memory: a dry run first, nothing written.
        before = len(tg.bot_messages(BOB))
        tg.private(BOB).send_document(file_name="mnemo-memory-42.zip", content=body)
        await tg.wait_for(lambda: len(tg.bot_messages(BOB)) > before)
        offer = tg.bot_messages(BOB)[before].text
        assert offer.startswith("Would import 1 conversations, 2 messages."), offer
        engine = fg.engine_of(bot.provider)
        assert (await export_memory(engine, BOB, agent, bot.provider))["sections"]["sessions"] == []
        nothing = await _said(tg, 55, "/memory import confirm", "Nothing to confirm")
        assert nothing.startswith("Nothing to confirm")

        done = await _said(tg, BOB, "/memory import confirm", "Imported 1 conversations")
        assert "2 messages" in done
        mine = await export_memory(engine, BOB, agent, bot.provider)
        moved = [retarget_session(s, BOB, agent) for s in exported["sections"]["sessions"]]
        assert mine["sections"]["sessions"] == moved
        found = await _said(tg, BOB, "/memory search lemon tart", "lemon tart")
        assert "lemon tart" in found


async def test_a_simple_memory_of_two_conversations_and_notes_reimports_whole(
    tg: FakeTelegram, llm: FakeOpenAI, tmp_path: Path
) -> None:
    """The simple provider carries the person's notes file in every session's data: the
    import writes it once, whatever the number of conversations."""
    async with running_bot(tg, llm, tmp_path / "a", provider="simple") as bot:
        agent = bot.settings.agent.id
        await _said(tg, ALICE, "first conversation", "echo: first conversation")
        await _said(tg, ALICE, "/new", "Started a new conversation")
        await _said(tg, ALICE, "second conversation", "echo: second conversation")
        session = await bot.conversations.current_session(
            Session(f"{agent}:telegram:{ALICE}", agent, ALICE, "telegram")
        )
        await bot.provider.note_add(session, "garden", "tomatoes in May", NoteKind.NOTE)
        exported = await export_memory(fg.engine_of(bot.provider), ALICE, agent, bot.provider)
    assert len(exported["sections"]["sessions"]) == 2
    (tmp_path / "b").mkdir()
    async with temp_engine("sqlite", tmp_path / "b") as engine:
        ctx = ProviderContext(
            engine=engine,
            summarizer=StaticSummarizer("unused"),
            agent_id=agent,
            data_dir=tmp_path / "b" / "data",
            config={"keep_tail": 2, "store_dir": str(tmp_path / "b" / "notes")},
        )
        other = create_provider("simple", ctx)
        try:
            await import_memory(engine, exported, other)
            copy = await export_memory(engine, ALICE, agent, other)
            assert _canonical(copy) == _canonical(exported)
            assert "tomatoes in May" in json.dumps(copy)
            # An edited document carrying them twice is refused, never left waiting.
            twice = json.loads(json.dumps(exported))
            second = twice["sections"]["sessions"][1]["provider"]["data"]
            second["notes"] = exported["sections"]["sessions"][0]["provider"]["data"]["notes"]
            with pytest.raises(InvalidArgument, match=r"sessions\[1\].*comes once"):
                await import_memory(engine, twice, other, dry_run=True)
        finally:
            await other.close()


async def test_an_export_over_the_upload_limit_is_refused_in_one_line(
    tg: FakeTelegram, llm: FakeOpenAI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from bot.channels.telegram.portability import memory_files

    monkeypatch.setattr(memory_files, "MAX_UPLOAD_BYTES", 64)  # any real zip is bigger
    async with running_bot(tg, llm, tmp_path, provider="lcm"):
        await _said(tg, ALICE, "a few words", "echo: a few words")
        refused = await _said(tg, ALICE, "/memory export", "over the 50 MB")
        assert "mnemo memory export" in refused and tg.documents == []
