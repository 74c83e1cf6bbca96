"""What the bot reads of a message that carries a file rather than text.

- A text document (a text MIME type or a text file name, at most `MAX_FILE_BYTES`) is
  downloaded through the Bot API, decoded as UTF-8, and becomes the turn's text after
  the caption: "summarise this\\n\\n[file notes.md]\\n<content>".
- Media the model cannot see (photo, video, animation, audio, voice, any other document)
  become a turn only with a caption: a bracketed note saying what was attached, then the
  caption. Without one there is nothing to answer.

Voice messages, audio files and video notes are transcribed (when configured) by
`bot.channels.telegram.voice`, and photos shown to the model (`llm.vision`) by
`bot.channels.telegram.photos`, through `download` here.

Refusals are `Unreadable(line)`: the handler sends the line and stores nothing.
"""

from __future__ import annotations

import logging

from telegram import Audio, Bot, Document, Message, PhotoSize, VideoNote, Voice
from telegram.error import TelegramError

from bot.channels.telegram.http import DownloadTooLarge, download_cap

log = logging.getLogger(__name__)

MAX_FILE_BYTES = 512 * 1024

TEXT_EXTENSIONS = frozenset(
    {
        ".txt",
        ".md",
        ".markdown",
        ".csv",
        ".tsv",
        ".json",
        ".yaml",
        ".yml",
        ".xml",
        ".log",
        ".py",
        ".js",
        ".ts",
        ".go",
        ".rs",
        ".java",
        ".c",
        ".h",
        ".cpp",
        ".sh",
        ".sql",
        ".toml",
        ".ini",
        ".cfg",
        ".html",
        ".css",
    }
)
TEXT_MIME_TYPES = frozenset(
    {
        "application/json",
        "application/xml",
        "application/x-yaml",
        "application/yaml",
        "application/javascript",
        "application/x-sh",
        "application/sql",
        "application/toml",
        "application/x-ndjson",
        "application/csv",
    }
)

TOO_BIG = f"That file is too big for me: I read text files of up to {MAX_FILE_BYTES // 1024} KiB."
NOT_UTF8 = "I can only read UTF-8 text files."
NO_DOWNLOAD = "I couldn't fetch that file from Telegram. Please send it again."

# Which media a caption can ride on, and how the note names each; the order matters:
# an animation also carries a `document`.
MEDIA_KINDS = (
    ("photo", "a photo"),
    ("video", "a video"),
    ("animation", "an animation"),
    ("audio", "an audio file"),
    ("voice", "a voice message"),
    ("document", "a file"),
)


class Unreadable(Exception):
    """The attachment cannot become a turn; `line` says why, to the user."""

    def __init__(self, line: str) -> None:
        super().__init__(line)
        self.line = line


def text_document(message: Message) -> Document | None:
    """The message's document when it is one the bot reads as text."""
    doc = message.document
    if doc is None or message.animation is not None:
        return None
    mime = (doc.mime_type or "").lower()
    name = (doc.file_name or "").lower()
    if mime.startswith("text/") or mime in TEXT_MIME_TYPES:
        return doc
    return doc if any(name.endswith(ext) for ext in TEXT_EXTENSIONS) else None


def media_note(message: Message) -> str | None:
    """ "[The user attached a photo, which you cannot see.]" for the media the message
    carries, or None when it carries none a caption could describe (sticker, poll...)."""
    for attr, kind in MEDIA_KINDS:
        if getattr(message, attr):
            if attr == "document" and message.document and message.document.file_name:
                kind = f"{kind} ({message.document.file_name})"
            return f"[The user attached {kind}, which you cannot see.]"
    return None


async def download(
    bot: Bot, file: Document | Voice | Audio | VideoNote | PhotoSize, limit: int, too_big: str
) -> bytes:
    """The file's bytes, at most `limit` of them: refused (`Unreadable(too_big)`) before
    the download when Telegram says it is bigger, during it when Telegram under-said.
    Raises Unreadable."""
    if file.file_size is not None and file.file_size > limit:
        raise Unreadable(too_big)
    try:
        with download_cap(limit):
            body = await (await bot.get_file(file.file_id)).download_as_bytearray()
    except DownloadTooLarge:
        raise Unreadable(too_big) from None
    except (TelegramError, RuntimeError) as exc:
        # Never the traceback: its aiohttp cause may quote the file URL, token included
        # (the message itself has it cut out by `bot.channels.telegram.http`).
        log.warning(
            "could not download %s %s: %s: %s",
            type(file).__name__.lower(),
            file.file_unique_id,
            type(exc).__name__,
            exc,
        )
        raise Unreadable(NO_DOWNLOAD) from None
    if len(body) > limit:  # a request class without the cap
        raise Unreadable(too_big)
    return bytes(body)


async def read_text(bot: Bot, doc: Document) -> str:
    """The document's content, decoded. Raises Unreadable."""
    body = await download(bot, doc, MAX_FILE_BYTES, TOO_BIG)
    try:
        return body.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise Unreadable(NOT_UTF8) from None


def with_file(caption: str, name: str, content: str) -> str:
    """The turn's text: the caption, then the file."""
    return with_part(caption, f"[file {name}]\n{content}")


def with_part(caption: str, part: str) -> str:
    """The turn's text: the caption, then what was read of the attachment."""
    return f"{caption}\n\n{part}" if caption else part
