"""Voice messages, audio files and video notes, transcribed into a turn.

Decision: transcription is opt-in (`llm.transcription_model`, empty by default): it costs
money per minute of audio and many self-hosted OpenAI-compatible servers lack
`/audio/transcriptions`. Set it to e.g. `whisper-1` or `gpt-4o-mini-transcribe` on OpenAI.

With it, the recording (at most `MAX_AUDIO_BYTES`, the Bot API's download limit) is
downloaded and sent to the LLM server; the turn's text is the caption, if any, then
"[voice message, transcribed]" and the transcript. Refusals (too big, not downloadable,
no words heard, the server failing past its retries or lacking the endpoint) are
`Unreadable(line)`: one line, nothing stored.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from telegram import Audio, Bot, Message, VideoNote, Voice

from bot.channels.telegram.attachments import Unreadable, download, with_part
from bot.model.client import LLMError

log = logging.getLogger(__name__)

MAX_AUDIO_BYTES = 20 * 1024 * 1024  # getFile serves files up to 20 MB
# Recordings downloaded and transcribed at once per process (the rest wait their turn):
# at most this many times MAX_AUDIO_BYTES in memory, whatever `concurrent_updates` is.
RECORDINGS_AT_ONCE = 4

TOO_BIG = "That recording is too big for me: Telegram lets bots download files of up to 20 MB."
NO_WORDS = "I couldn't make out any words in that {noun}."
NOT_TRANSCRIBED = (
    "Sorry, I couldn't transcribe that {noun} just now. Please try again "
    "later or type your message."
)
NOT_LISTENING = "I can't listen to voice messages here: please type your message instead."

# The server infers the format from the file name's extension; these are the ones
# OpenAI accepts (Telegram's own voice extension, .oga, is not among them).
EXTENSIONS = {
    "audio/ogg": ".ogg",
    "audio/opus": ".ogg",
    "audio/mpeg": ".mp3",
    "audio/mp3": ".mp3",
    "audio/mp4": ".m4a",
    "audio/x-m4a": ".m4a",
    "audio/m4a": ".m4a",
    "audio/aac": ".m4a",
    "audio/wav": ".wav",
    "audio/x-wav": ".wav",
    "audio/wave": ".wav",
    "audio/webm": ".webm",
    "audio/flac": ".flac",
    "audio/x-flac": ".flac",
    "video/mp4": ".mp4",
}


@runtime_checkable
class Transcriber(Protocol):
    """What transcribes (`bot.model.client.LLMClient`)."""

    async def transcribe(self, data: bytes, filename: str) -> str: ...


@dataclass(frozen=True)
class Recording:
    """The sound a message carries: the file, what to call it, the name to upload it as."""

    file: Voice | Audio | VideoNote
    noun: str
    filename: str


def recording(message: Message) -> Recording | None:
    """The message's voice message, audio file or video note; None without one."""
    if message.voice is not None:
        return Recording(
            message.voice, "voice message", "voice" + EXTENSIONS.get(_mime(message.voice), ".ogg")
        )
    if message.video_note is not None:  # always MPEG-4; Telegram gives no MIME type
        return Recording(message.video_note, "video message", "video.mp4")
    if message.audio is not None:
        audio = message.audio
        name = audio.file_name or ""
        if "." not in name:
            name = "audio" + EXTENSIONS.get(_mime(audio), ".mp3")
        return Recording(audio, "audio file", name)
    return None


def _mime(file: Voice | Audio) -> str:
    return (file.mime_type or "").lower().split(";")[0].strip()


async def transcribed(bot: Bot, transcriber: Transcriber, sound: Recording, caption: str) -> str:
    """The turn's text for the recording. Raises Unreadable."""
    data = await download(bot, sound.file, MAX_AUDIO_BYTES, TOO_BIG)
    try:
        spoken = await transcriber.transcribe(data, sound.filename)
    except LLMError as exc:
        log.warning(
            "could not transcribe %s %s (%d bytes, %d attempts): %s",
            sound.noun,
            sound.file.file_unique_id,
            len(data),
            exc.attempts,
            exc.reason,
        )
        raise Unreadable(NOT_TRANSCRIBED.format(noun=sound.noun)) from None
    if not spoken.strip():
        raise Unreadable(NO_WORDS.format(noun=sound.noun))
    return with_part(caption, f"[{sound.noun}, transcribed]\n{spoken.strip()}")
