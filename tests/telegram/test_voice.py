"""Voice messages through Telegram: transcribed by the LLM server when
`llm.transcription_model` is set, else one line asking to type; a recording that cannot
be transcribed gets one line and nothing is stored."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

from bot.channels.telegram.voice import RECORDINGS_AT_ONCE
from tests.fakes.openai_server import FakeOpenAI, error, gated, text
from tests.fakes.telegram_server import FakeTelegram
from tests.telegram.harness import running_bot
from tests.telegram.test_attachments import answer_to, no_token_logged, user_turns

MODEL = "whisper-1"
OGG = b"OggS\x00fake-opus-frames"
NOT_TRANSCRIBED = (
    "Sorry, I couldn't transcribe that voice message just now. Please try "
    "again later or type your message."
)


async def stored_messages(tg: FakeTelegram, chat_id: int) -> str:
    before = len(tg.bot_messages(chat_id))
    tg.private(chat_id).send("/memory status")
    return await answer_to(tg, chat_id, before)


async def test_a_voice_message_is_transcribed_stored_and_answered(
    tg: FakeTelegram, llm: FakeOpenAI, tmp_path: Path
) -> None:
    llm.push_transcription(text("remind me to buy oat milk"), text("and bread"))
    async with running_bot(tg, llm, tmp_path, transcription_model=MODEL):
        chat = tg.private(42)
        chat.send_voice(content=OGG)
        await tg.wait_for_message(42, contains="echo: [voice message, transcribed]")
        assert user_turns(llm) == ["[voice message, transcribed]\nremind me to buy oat milk"]
        chat.send_voice(content=OGG, caption="translate this")
        await tg.wait_for_message(42, contains="and bread")
        assert user_turns(llm)[-1] == ("translate this\n\n[voice message, transcribed]\nand bread")
        chat.send("/memory search oat")
        found = await tg.wait_for_message(42, contains="oat milk", within=10)
        assert "No matches" not in found.text
    upload = llm.transcriptions[0]
    assert (upload.model, upload.filename, upload.file) == (MODEL, "voice.ogg", OGG)
    assert len(llm.transcriptions) == 2


async def test_a_video_note_is_transcribed_as_mp4(
    tg: FakeTelegram, llm: FakeOpenAI, tmp_path: Path
) -> None:
    llm.push_transcription(text("hello from the round video"))
    async with running_bot(tg, llm, tmp_path, transcription_model=MODEL):
        tg.private(42).send_video_note(content=b"mp4-bytes")
        await tg.wait_for_message(42, contains="hello from the round video")
    assert user_turns(llm) == ["[video message, transcribed]\nhello from the round video"]
    assert llm.transcriptions[0].filename == "video.mp4"


async def test_without_a_transcription_model_a_voice_message_gets_one_line(
    tg: FakeTelegram, llm: FakeOpenAI, tmp_path: Path
) -> None:
    async with running_bot(tg, llm, tmp_path):
        chat = tg.private(42)
        chat.send_voice(content=OGG)
        assert await answer_to(tg, 42, 0) == (
            "I can't listen to voice messages here: please type your message instead."
        )
        chat.send_voice(content=OGG, caption="what do you think?")  # today's behaviour
        await tg.wait_for_message(42, contains="what do you think?")
        assert "Messages: 2 " in await stored_messages(tg, 42)  # its turn and answer
    assert user_turns(llm) == [
        "[The user attached a voice message, which you cannot see.]\nwhat do you think?"
    ]
    assert llm.transcriptions == [] and tg.calls_to("getFile") == []


async def test_a_recording_over_20_mb_is_refused_before_download(
    tg: FakeTelegram, llm: FakeOpenAI, tmp_path: Path
) -> None:
    async with running_bot(tg, llm, tmp_path, transcription_model=MODEL):
        tg.private(42).send_voice(content=OGG, file_size=21 * 1024 * 1024)
        assert "20 MB" in await answer_to(tg, 42, 0)
        assert "Messages: 0 " in await stored_messages(tg, 42)
    assert tg.calls_to("getFile") == [] and tg.calls_to("file") == []
    assert llm.transcriptions == [] and llm.requests == []


@pytest.mark.parametrize(
    ("failures", "line"),
    [
        ([error(500), error(500)], NOT_TRANSCRIBED),  # past max_retries=1
        ([error(404)], NOT_TRANSCRIBED),  # a server without the endpoint
        ([error(400)], NOT_TRANSCRIBED),
        ([text("  ")], "I couldn't make out any words in that voice message."),
    ],
)
async def test_a_failed_or_empty_transcription_gets_one_line_and_nothing_is_stored(
    tg: FakeTelegram,
    llm: FakeOpenAI,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    failures: list,
    line: str,
) -> None:
    caplog.set_level(logging.DEBUG)
    llm.push_transcription(*failures)
    async with running_bot(tg, llm, tmp_path, transcription_model=MODEL):
        tg.private(42).send_voice(content=OGG)
        assert await answer_to(tg, 42, 0) == line
        assert "Messages: 0 " in await stored_messages(tg, 42)
    assert len(llm.transcriptions) == len(failures) and llm.requests == []
    if line == NOT_TRANSCRIBED:
        warned = [
            r.getMessage()
            for r in caplog.records
            if r.levelno == logging.WARNING and "could not transcribe" in r.getMessage()
        ]
        assert len(warned) == 1 and "test-key" not in warned[0]
    no_token_logged(caplog, tg.token)
    assert not any("test-key" in r.getMessage() for r in caplog.records)


async def test_a_few_recordings_are_transcribed_at_once(
    tg: FakeTelegram, llm: FakeOpenAI, tmp_path: Path
) -> None:
    """Each recording (up to 20 MB) is held whole while transcribed: a burst of them from
    many chats waits its turn instead of filling the memory."""
    gate = asyncio.Event()
    llm.transcribe_responder = lambda upload: gated(gate, text("hello"))
    chats = range(50, 50 + RECORDINGS_AT_ONCE + 3)
    async with running_bot(tg, llm, tmp_path, transcription_model=MODEL):
        for chat_id in chats:
            tg.private(chat_id).send_voice(content=OGG)
        await tg.wait_for(lambda: len(llm.transcriptions) == RECORDINGS_AT_ONCE)
        # Time for the others to come through, were they not waiting (the held ones must
        # be let go within the LLM timeout of 5 s).
        await asyncio.sleep(1)
        assert len(llm.transcriptions) == RECORDINGS_AT_ONCE
        assert len(tg.calls_to("file")) == RECORDINGS_AT_ONCE
        gate.set()
        for chat_id in chats:
            await tg.wait_for_message(chat_id, contains="echo: [voice message, transcribed]")
    assert len(llm.transcriptions) == len(chats)


async def test_typing_shows_while_a_recording_is_transcribed(
    tg: FakeTelegram, llm: FakeOpenAI, tmp_path: Path
) -> None:
    gate = asyncio.Event()
    llm.push_transcription(gated(gate, text("a slow one")))
    async with running_bot(tg, llm, tmp_path, transcription_model=MODEL):
        tg.private(42).send_voice(content=OGG)
        await tg.wait_for(lambda: len(llm.transcriptions) == 1)
        # the user sees the bot at work while the server transcribes
        typing = await tg.wait_for(lambda: tg.calls_to("sendChatAction"))
        assert typing[0].params["action"] == "typing" and tg.bot_messages(42) == []
        gate.set()
        await tg.wait_for_message(42, contains="a slow one")
