"""Files and media through Telegram: text documents are downloaded and read, captioned
media reach the model with a note, the rest gets one line and nothing is stored."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from memory.testing.databases import temp_database_url
from tests.fakes.openai_server import FakeOpenAI, error, text
from tests.fakes.telegram_server import FakeTelegram, User
from tests.telegram.harness import running_bot
from tests.telegram.test_polling import bot_on, offsets, unacknowledged, user_texts

ALICE = User(42, "Alice")
TEXT_ONLY = "I only read text for now: please send your message as text."
PHOTO_NOTE = "[The user attached a photo, which you cannot see.]"


def user_turns(llm: FakeOpenAI) -> list[str]:
    return [m["content"] for m in llm.requests[-1]["messages"] if m["role"] == "user"]


async def answer_to(tg: FakeTelegram, chat_id: int, before: int) -> str:
    await tg.wait_for(lambda: len(tg.bot_messages(chat_id)) > before)
    return tg.bot_messages(chat_id)[before].text


def no_token_logged(caplog: pytest.LogCaptureFixture, token: str) -> None:
    """No record at INFO or above holds the token (the file URL has it), traceback included."""
    formatter = logging.Formatter()
    for record in caplog.records:
        if record.levelno >= logging.INFO:
            assert token not in formatter.format(record), record.getMessage()


async def test_a_text_document_is_read_stored_and_searchable(
    tg: FakeTelegram, llm: FakeOpenAI, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    content = "# Trip\nThe quokka lives on Rottnest island.\n"
    async with running_bot(tg, llm, tmp_path):
        chat = tg.private(42)
        # a BOM is dropped; no MIME type: the extension says it is text
        chat.send_document(
            caption="summarise this",
            file_name="notes.md",
            content=b"\xef\xbb\xbf" + content.encode(),
        )
        await tg.wait_for_message(42, contains="echo: summarise this")
        assert user_turns(llm) == [f"summarise this\n\n[file notes.md]\n{content}"]
        # by MIME type, without a caption
        chat.send_document(
            file_name="data", mime_type="application/json", content=b'{"colour": "teal"}'
        )
        await tg.wait_for_message(42, contains='echo: [file data]\n{"colour": "teal"}')
        chat.send("/memory search quokka")
        found = await tg.wait_for_message(42, contains="quokka", within=10)
        assert "No matches" not in found.text
    assert len(tg.calls_to("file")) == 2
    no_token_logged(caplog, tg.token)


async def test_unreadable_documents_are_refused_and_nothing_is_stored(
    tg: FakeTelegram, llm: FakeOpenAI, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    big = b"x" * (600 * 1024)
    async with running_bot(tg, llm, tmp_path):
        chat = tg.private(42)
        chat.send_document(file_name="big.txt", content=big)  # Telegram says how big
        assert "512 KiB" in await answer_to(tg, 42, 0)
        assert tg.calls_to("getFile") == []  # not even asked for
        chat.send_document(file_name="big.txt", content=big, file_size=100)  # it lied
        assert "512 KiB" in await answer_to(tg, 42, 1)
        chat.send_document(file_name="latin1.txt", content="café".encode("latin-1"))
        assert await answer_to(tg, 42, 2) == "I can only read UTF-8 text files."
        chat.send_document(file_name="long.txt", content=b"y" * 70_000)
        assert "too long" in await answer_to(tg, 42, 3)
        tg.fail("file", 502)
        chat.send_document(file_name="gone.txt", content=b"hello")
        assert "couldn't fetch" in await answer_to(tg, 42, 4)
        chat.send_document(file_name="unknown.txt", caption="and this")  # getFile fails
        assert "couldn't fetch" in await answer_to(tg, 42, 5)
        chat.send("/memory status")
        status = await tg.wait_for_message(42, contains="Messages:")
    assert "Messages: 0 " in status.text
    assert llm.requests == []
    assert any("could not download" in r.getMessage() for r in caplog.records)
    no_token_logged(caplog, tg.token)


async def test_a_captioned_photo_reaches_the_model_with_a_note(
    tg: FakeTelegram, llm: FakeOpenAI, tmp_path: Path
) -> None:
    async with running_bot(tg, llm, tmp_path):
        chat = tg.private(42)
        chat.send_photo(caption="what is this?")
        await tg.wait_for_message(42, contains="what is this?")
        assert user_turns(llm) == [f"{PHOTO_NOTE}\nwhat is this?"]
        chat.send_photo()
        assert await answer_to(tg, 42, 1) == TEXT_ONLY
        chat.send_document(file_name="scan.pdf", mime_type="application/pdf", caption="read it")
        await tg.wait_for_message(42, contains="read it")
        assert user_turns(llm)[-1] == (
            "[The user attached a file (scan.pdf), which you cannot see.]\nread it"
        )
    assert len(llm.requests) == 2
    assert tg.calls_to("getFile") == []


async def test_group_mention_mode_applies_to_captions(
    tg: FakeTelegram, llm: FakeOpenAI, tmp_path: Path
) -> None:
    async with running_bot(tg, llm, tmp_path):
        group = tg.group(-1001, "Team")
        group.send_photo(user=ALICE, caption="look at our cat")  # not addressed: ignored
        group.send_photo(user=ALICE, caption=f"@{tg.username} what breed?")
        answer = await tg.wait_for_message(-1001, contains="what breed?")
        assert answer.text == f"echo: [Alice] {PHOTO_NOTE}\nwhat breed?"
        group.send_document(
            user=ALICE, caption="and this", reply_to=answer, file_name="cat.txt", content=b"a tabby"
        )
        await tg.wait_for_message(-1001, contains="a tabby")
    assert user_turns(llm)[-1] == (
        '[Alice, replying to Mnemo: "echo: [Alice] [The user attached a photo, which…"] '
        "and this\n\n[file cat.txt]\na tabby"
    )
    assert len(llm.requests) == 2
    assert not any(
        "our cat" in t
        for r in llm.requests
        for t in (m["content"] for m in r["messages"] if m["role"] == "user")
    )


# kind -> how the chat sends it, the bot's options, the turn's stored text
REDELIVERED = {
    "document": (
        lambda chat: chat.send_document(file_name="a.txt", content=b"apricot"),
        {},
        "[file a.txt]\napricot",
    ),
    "photo": (
        lambda chat: chat.send_photo(content=b"\xff\xd8apricots\xff\xd9", caption="apricots"),
        {"vision": True},
        "[photo]\napricots",
    ),
    "voice": (
        lambda chat: chat.send_voice(content=b"OggS\x00apricot"),
        {"transcription_model": "whisper-1"},
        "[voice message, transcribed]\napricot",
    ),
}


@pytest.mark.parametrize("kind", REDELIVERED)
async def test_a_redelivered_file_is_not_fetched_again(
    tg: FakeTelegram, llm: FakeOpenAI, tmp_path: Path, kind: str
) -> None:
    send, options, stored = REDELIVERED[kind]
    acknowledging = unacknowledged(tg)  # as if the bot died after storing and answering
    llm.push_transcription(text("apricot"))
    async with temp_database_url("sqlite", tmp_path) as url:
        async with bot_on(tg, llm, tmp_path, url, **options):
            send(tg.private(42))
            await tg.wait_for_message(42, contains="apricot")
        acknowledging[0] = False
        # A second download or transcription would fail...
        tg.fail("file", 502, times=10)
        llm.push_transcription(error(500), error(500))
        async with bot_on(tg, llm, tmp_path, url, **options) as services:
            await tg.wait_for(lambda: 2 in offsets(tg))  # the redelivery was handled
            tg.private(42).send("next")
            await tg.wait_for_message(42, contains="echo: next")
            assert await user_texts(services, 42) == [stored, "next"]
    # ...and would have answered with a refusal a message that had its answer.
    assert [m.text for m in tg.bot_messages(42)] == [f"echo: {stored}", "echo: next"]
    assert len(tg.calls_to("file")) == 1
    assert len(llm.transcriptions) == (kind == "voice")
    assert len(llm.requests) == 2
