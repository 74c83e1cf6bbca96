"""Telegram Desktop's JSON export (`result.json`): one chat ("Export chat history"), or a
whole account ("Export Telegram data": `chats.list` and `left_chats.list`, one entry per
chat).

Each message becomes one user message `[Name] text`, whoever wrote it (the account's
owner or anyone else: none of them is the bot), at its original time
(`date_unixtime`, UTC; the older exports' `date` alone is the exporting computer's local
time, read as UTC). Formatting entities become Markdown (bold, italic, code, links);
a reply names whom it answers and quotes their first words (`[Ann, replying to Bob:
"see you at…"]`); a forward names its origin; media are noted (`[photo]`,
`[file report.pdf]`, `[voice message]`, `[sticker 😀]`...) before the caption.
Edited messages are imported as the export has them (their last text, at the time they
were first sent). Service messages (joins, pins, calls, title changes) and messages
left with no text nor media are skipped.

A chat's `name`, `type` and `id` come before its `messages` (Telegram writes them so);
the messages are read one at a time, never the whole list.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any, BinaryIO

import ijson
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from bot.chat_import.limits import Limits, bounded_events
from bot.chat_import.sources import (
    ImportRefused,
    SourceChat,
    SourceItem,
    SourceMessage,
    clipped,
    first_error,
    timestamp,
)
from memory.text.replies import first_words, reply_note

CHAT_LISTS = ("", "chats.list.item", "left_chats.list.item")  # where chats are (ijson prefixes)
REMEMBERED_FOR_REPLIES = 5_000  # recent messages a reply may quote (older: by id)

MEDIA_NOTES = {
    "voice_message": "voice message",
    "video_message": "video message",
    "video_file": "video",
    "animation": "animation",
    "audio_file": "audio",
    "sticker": "sticker",
}
MARKDOWN = {
    "bold": "**{}**",
    "italic": "_{}_",
    "strikethrough": "~~{}~~",
    "code": "`{}`",
    "pre": "```\n{}\n```",
    "spoiler": "||{}||",
}


class Entity(BaseModel):
    model_config = ConfigDict(extra="ignore")
    type: str = "plain"
    text: str = ""
    href: str | None = None


class Poll(BaseModel):
    model_config = ConfigDict(extra="ignore")
    question: str = ""


class TelegramMessage(BaseModel):
    model_config = ConfigDict(extra="ignore", populate_by_name=True)
    id: int
    type: str = "message"
    date: datetime
    date_unixtime: int | None = None
    sender: str | None = Field(None, alias="from")
    text: str | list[str | Entity] = ""
    reply_to_message_id: int | None = None
    forwarded_from: str | None = None
    photo: str | None = None
    file: str | None = None
    file_name: str | None = None
    media_type: str | None = None
    sticker_emoji: str | None = None
    title: str | None = None
    poll: Poll | None = None
    location_information: dict[str, Any] | None = None
    contact_information: dict[str, Any] | None = None

    def at(self, where: str) -> datetime:
        if self.date_unixtime is not None:
            return timestamp(self.date_unixtime, f"{where}: date_unixtime")
        return self.date if self.date.tzinfo else self.date.replace(tzinfo=UTC)


class ChatHeader(BaseModel):
    model_config = ConfigDict(extra="ignore")
    id: int
    name: str | None = None
    type: str = ""


def plain(text: str | list[str | Entity]) -> str:
    """The message's text, its entities as Markdown."""
    if isinstance(text, str):
        return text
    out = []
    for piece in text:
        if isinstance(piece, str):
            out.append(piece)
        elif piece.type == "text_link" and piece.href:
            out.append(f"[{piece.text}]({piece.href})")
        elif piece.type in MARKDOWN and piece.text:
            out.append(MARKDOWN[piece.type].format(piece.text))
        else:
            out.append(piece.text)
    return "".join(out)


def media_note(m: TelegramMessage) -> str:
    if m.photo:
        return "[photo]"
    if m.media_type == "sticker":
        return f"[sticker {m.sticker_emoji}]" if m.sticker_emoji else "[sticker]"
    if m.media_type in MEDIA_NOTES:
        return f"[{MEDIA_NOTES[m.media_type]}]"
    if m.file or m.file_name:
        name = m.file_name or (m.file or "").rsplit("/", 1)[-1]
        # "(File not included. ...)" is what the export writes for a file it left out.
        return f"[file {name}]" if name and not name.startswith("(") else "[file]"
    if m.poll is not None:
        return f"[poll: {m.poll.question}]"
    if m.location_information is not None:
        return "[location]"
    if m.contact_information is not None:
        return "[contact]"
    return ""


class _Said:
    """The speaker and first words of recent messages, for the replies that quote them
    (bounded: an export of any length keeps the same memory)."""

    def __init__(self) -> None:
        self._by_id: OrderedDict[int, tuple[str, str]] = OrderedDict()

    def remember(self, msg_id: int, speaker: str, body: str) -> None:
        self._by_id[msg_id] = (speaker, first_words(body))
        if len(self._by_id) > REMEMBERED_FOR_REPLIES:
            self._by_id.popitem(last=False)

    def reply_note(self, msg_id: int) -> str:
        said = self._by_id.get(msg_id)
        if said is None:
            return f"replying to message {msg_id}"
        return reply_note(*said)


def render(m: TelegramMessage, said: _Said) -> str | None:
    """The stored text of `m`; None for one to skip (service, or nothing in it)."""
    if m.type != "message":
        return None
    body = plain(m.text).strip()
    note = media_note(m)
    content = " ".join(p for p in (note, body) if p)
    if not content:
        return None
    speaker = m.sender or "Deleted Account"
    head = [speaker]
    if m.forwarded_from:
        head.append(f"forwarded from {m.forwarded_from}")
    if m.reply_to_message_id is not None:
        head.append(said.reply_note(m.reply_to_message_id))
    said.remember(m.id, speaker, body or note)
    return clipped(f"[{', '.join(head)}] {content}")


class _Walk:
    """Turns ijson's events into chats and messages: a message is built whole (one
    at a time), everything else is looked at as it passes."""

    def __init__(self, file_name: str) -> None:
        self.file_name = file_name
        self.chats = 0
        self.header: dict[str, Any] = {}
        self.chat: SourceChat | None = None
        self.place = ""  # the ijson prefix of the chat being read
        self.builder: Any = None
        self.depth = 0
        self.said = _Said()

    def feed(self, prefix: str, event: str, value: Any) -> SourceItem | None:
        if self.builder is not None:
            return self._build(event, value)
        if self.chat is not None and prefix == f"{self.place}.messages.item".lstrip("."):
            if event != "start_map":
                raise ImportRefused(
                    f"{self.file_name}: chat {self.chat.title!r}: a message is not an object"
                )
            self.builder, self.depth = ijson.ObjectBuilder(), 1
            self.builder.event(event, value)
            return None
        if prefix in CHAT_LISTS and event in ("start_map", "end_map"):
            self.header, self.chat, self.place = {}, None, prefix
            return None
        if prefix.startswith(f"{self.place}.".lstrip(".")):
            key = prefix[len(self.place) :].lstrip(".")
            if key in ("id", "name", "type") and event in ("number", "string", "null"):
                self.header[key] = value
            elif key == "messages" and event == "start_array":
                self.chat = self._chat()
                return self.chat
        return None

    def _build(self, event: str, value: Any) -> SourceMessage | None:
        self.builder.event(event, value)
        if event in ("start_map", "start_array"):
            self.depth += 1
        elif event in ("end_map", "end_array"):
            self.depth -= 1
        if self.depth > 0:
            return None
        raw, self.builder = self.builder.value, None
        return self._message(raw)

    def _chat(self) -> SourceChat:
        index = self.chats
        try:
            h = ChatHeader.model_validate(self.header)
        except ValidationError as exc:
            raise ImportRefused(
                f"{self.file_name}: chat {index + 1}: {first_error(exc)} "
                "(a chat's id must come before its messages)"
            ) from None
        self.chats += 1
        self.said = _Said()
        title = h.name or ("Saved Messages" if h.type == "saved_messages" else f"chat {h.id}")
        return SourceChat(index, f"telegram:{h.id}", title)

    def _message(self, raw: Any) -> SourceMessage | None:
        assert self.chat is not None
        try:
            m = TelegramMessage.model_validate(raw)
        except ValidationError as exc:
            where = f"message {raw.get('id')}" if isinstance(raw, dict) else "a message"
            raise ImportRefused(
                f"{self.file_name}: chat {self.chat.title!r}, {where}: {first_error(exc)}"
            ) from None
        text = render(m, self.said)
        if text is None:
            return None
        at = m.at(f"{self.file_name}: chat {self.chat.title!r}, message {m.id}")
        return SourceMessage(self.chat.index, m.id, str(m.id), at, "user", text)


class TelegramExport:
    name = "telegram"
    file_name = "result.json"
    stable_seq = True

    def read(self, stream: BinaryIO, name: str, limits: Limits) -> Iterator[SourceItem]:
        walk = _Walk(name)
        for prefix, event, value in bounded_events(stream, name, limits):
            item = walk.feed(prefix, event, value)
            if item is not None:
                yield item
        if walk.chats == 0:
            raise ImportRefused(
                f"{name}: no chat in it: is it a Telegram Desktop export "
                "(Export chat history, or Export Telegram data, in JSON format)?"
            )
