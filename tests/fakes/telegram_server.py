"""A real local HTTP server speaking the subset of the Telegram Bot API our bot uses.

Usage::

    async with FakeTelegram() as tg:
        settings.telegram.token = tg.token
        settings.telegram.base_url = tg.base_url         # "http://127.0.0.1:PORT"
        alice = tg.private(user_id=42)                    # a private chat with a user
        alice.send("hello")                               # queue an update for getUpdates
        msg = await tg.wait_for_message(alice.id, contains="echo: hello")
        tg.calls_to("sendChatAction")                     # every recorded call

The bot talks to it exactly as to Telegram: `POST /bot<token>/<method>` (form-encoded,
non-string values JSON-encoded, as python-telegram-bot sends them), answers
`{"ok": true, "result": ...}` or `{"ok": false, "error_code": ..., "description": ...}`.

Methods: getMe, getUpdates (long poll: waits up to `timeout` seconds, drops updates below
`offset`), setMyCommands, getMyCommands, deleteWebhook, setWebhook, getWebhookInfo,
sendMessage, editMessageText, sendChatAction, deleteMessage, answerCallbackQuery, getFile
(400 for a file_id not registered), getChatMember (a group's creator and administrators
as `tg.set_admins(chat_id, creator=, admins=)` named them; everyone else a member). Anything else answers 404 (and is recorded). A wrong
token answers 401. Files: `GET /file/bot<token>/<file_path>` serves a registered file's
bytes (recorded as method "file", params {"path": ...}; `tg.fail("file", ...)` works).

Checked like Telegram does: empty text, text over 4096 UTF-16 units ("message is too
long"), entities out of range ("can't parse entities"), editing a message that is not the
bot's or does not exist, an edit that changes nothing ("message is not modified").

Users and chats (the user side):
  tg.private(user_id, first_name=)             -> Chat (private)
  tg.group(chat_id, title=, forum=False)       -> Chat (supergroup); .topic(thread_id, by_bot=)
  chat.send(text, user=, reply_to=, quote=)         a text message; a leading /command gets its
                                               bot_command entity, each @name a mention
  chat.send_photo / send_sticker / send_voice / send_document(user=, caption=)
  chat.press(bot_message, data, user=)        presses an inline button (a callback_query)
  chat.send_document(content=b"...", file_name=, mime_type=, file_size=)
  chat.send_voice(content=b"...", mime_type="audio/ogg", duration=, file_size=)
  chat.send_video_note(content=b"...", duration=, file_size=)
  chat.send_photo(content=b"...", file_size=, thumbnail=b"...", thumbnail_size=)
                                               with `content`, registers the bytes for
                                               getFile and the download; file_size
                                               defaults to their length
  chat.edit(message, new_text)                 an edited_message update
  tg.inject(update_dict)                       any raw update
  When a webhook is set (setWebhook), updates are POSTed to it with the secret token
  header instead of being queued.

Observing the bot:
  tg.calls                  every ApiCall(method, params, at) in arrival order
  tg.calls_to(method, chat_id=None)
  tg.bot_messages(chat_id, thread_id=None)  BotMessage objects, current text after edits
  await tg.wait_for(predicate, within=)    returns predicate's first truthy value (the
                            limit is scaled to the machine's load: tests/waits.py)
  await tg.wait_for_message(chat_id, contains=, thread_id=)  a bot message with that text
  tg.commands               the last setMyCommands list
  tg.subscribe(callback)    callback(ApiCall) for every call as it arrives (benchmarks)

Unreachable, then up: `FakeTelegram(port=free_port())` serves a port chosen before it
starts, so a bot can be pointed at it while nothing listens there yet.

Faults on demand (each taken by the next matching call):
  tg.fail(method, status=429, retry_after=1, description=, times=1, when=params->bool)
  tg.reject_entities(times=1)   400 "can't parse entities" on calls that carry entities

Flood control, as Telegram applies it to a chat:
  tg.flood(retry_after, chat_id=None, methods=FLOOD_METHODS, when=params->bool)
      the next matching call starts a window of `retry_after` seconds in its chat: it
      and every call of `methods` in that chat until the window ends answer 429 with
      the seconds left (rounded up) as `parameters.retry_after`
  tg.flood_violations       calls made in a window after its first 429: the bot did not
                            wait as told
  tg.end_flood()            ends every window now (time passing between two runs)
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import math
import re
import socket
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import ClientSession, TCPConnector, web

from tests.waits import scaled

__all__ = ["ApiCall", "BotMessage", "Chat", "FakeTelegram", "User", "free_port"]

LIMIT = 4096
FLOOD_METHODS = ("sendMessage", "editMessageText", "deleteMessage")
_STRING_PARAMS = {
    "text",
    "caption",
    "file_id",
    "url",
    "secret_token",
    "action",
    "parse_mode",
    "description",
}
_COMMAND = re.compile(r"^/[A-Za-z0-9_]{1,32}(@[A-Za-z0-9_]+)?")
_MENTION = re.compile(r"@[A-Za-z0-9_]{3,32}")


def free_port() -> int:
    """A local TCP port nothing listens on (free when asked; the OS may reuse it later)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def utf16_len(text: str) -> int:
    return len(text.encode("utf-16-le", "surrogatepass")) // 2


def _u16(text: str, index: int) -> int:
    return utf16_len(text[:index])


@dataclass
class ApiCall:
    method: str
    params: dict[str, Any]
    at: float  # time.monotonic()

    @property
    def chat_id(self) -> int | str | None:
        return self.params.get("chat_id")


@dataclass
class BotMessage:
    """A message the bot sent, as it stands now."""

    chat_id: int
    message_id: int
    text: str
    entities: list[dict[str, Any]]
    thread_id: int | None = None
    reply_to: int | None = None
    edits: int = 0
    deleted: bool = False
    reply_markup: dict[str, Any] | None = None  # inline keyboard, as sent


@dataclass(frozen=True)
class SentDocument:
    chat_id: int
    file_name: str
    content: bytes
    caption: str


@dataclass(frozen=True)
class User:
    id: int
    first_name: str = "Test"
    username: str | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"id": self.id, "is_bot": False, "first_name": self.first_name}
        if self.username:
            out["username"] = self.username
        return out


@dataclass
class _Fault:
    method: str
    status: int
    description: str
    retry_after: int | None
    times: int
    when: Callable[[dict[str, Any]], bool] | None


@dataclass
class _Flood:
    retry_after: int
    chat_id: int | None
    methods: tuple[str, ...]
    when: Callable[[dict[str, Any]], bool] | None
    window: tuple[int, float] | None = None  # (chat, monotonic end) once started


@dataclass
class Chat:
    """One chat (or forum topic) seen from the user side."""

    server: FakeTelegram
    id: int
    type: str  # "private" | "supergroup"
    title: str = ""
    default_user: User | None = None
    is_forum: bool = False
    thread_id: int | None = None
    topic_name: str = ""
    _topic_created: dict[str, Any] | None = field(default=None, repr=False)

    def to_dict(self) -> dict[str, Any]:
        if self.type == "private":
            user = self.default_user or User(self.id)
            out: dict[str, Any] = {"id": self.id, "type": "private", "first_name": user.first_name}
            if user.username:
                out["username"] = user.username
            return out
        out = {"id": self.id, "type": self.type, "title": self.title}
        if self.is_forum:
            out["is_forum"] = True
        return out

    def topic(self, thread_id: int, name: str = "Topic", *, by_bot: bool = False) -> Chat:
        """A forum topic of this group: messages carry message_thread_id and, as in
        Telegram, reply to the topic's creation message (sent by the bot if `by_bot`)."""
        if not self.is_forum:
            raise ValueError("topics exist only in forum groups (group(..., forum=True))")
        creator = self.server.bot_user if by_bot else (self.default_user or User(1)).to_dict()
        created = {
            "message_id": thread_id,
            "date": int(time.time()),
            "chat": self.to_dict(),
            "from": creator,
            "message_thread_id": thread_id,
            "is_topic_message": True,
            "forum_topic_created": {"name": name, "icon_color": 7322096},
        }
        return Chat(
            self.server,
            self.id,
            self.type,
            self.title,
            self.default_user,
            True,
            thread_id,
            name,
            created,
        )

    # --- the user side -------------------------------------------------------------

    def _base(self, user: User | None, reply_to: int | BotMessage | None) -> dict[str, Any]:
        sender = user or self.default_user
        if sender is None:
            raise ValueError("a group message needs a user: send(..., user=User(...))")
        msg: dict[str, Any] = {
            "message_id": self.server._next_message_id(self.id),
            "date": int(time.time()),
            "chat": self.to_dict(),
            "from": sender.to_dict(),
        }
        if self.thread_id is not None:
            msg["message_thread_id"] = self.thread_id
            msg["is_topic_message"] = True
            msg["reply_to_message"] = self._topic_created
        if reply_to is not None:
            msg["reply_to_message"] = self.server._message_dict(self.id, reply_to)
        return msg

    def send(
        self,
        text: str,
        *,
        user: User | None = None,
        reply_to: int | BotMessage | None = None,
        quote: str | None = None,
    ) -> dict[str, Any]:
        """A text message from the user; returns the message dict. `quote`: the part of
        the `reply_to` message the user quoted."""
        msg = self._base(user, reply_to)
        msg["text"] = text
        if quote is not None:
            msg["quote"] = {"text": quote, "position": 0}
        entities = _auto_entities(text)
        if entities:
            msg["entities"] = entities
        self.server.inject({"message": msg})
        return msg

    def _media(
        self,
        key: str,
        payload: Any,
        user: User | None,
        caption: str | None,
        reply_to: int | BotMessage | None = None,
    ) -> dict[str, Any]:
        msg = self._base(user, reply_to)
        msg[key] = payload
        if caption is not None:
            msg["caption"] = caption
            entities = _auto_entities(caption)
            if entities:
                msg["caption_entities"] = entities
        self.server.inject({"message": msg})
        return msg

    def send_photo(
        self,
        *,
        user: User | None = None,
        caption: str | None = None,
        reply_to: int | BotMessage | None = None,
        content: bytes | None = None,
        file_size: int | None = None,
        thumbnail: bytes = b"thumbnail-jpeg",
        thumbnail_size: int | None = None,
    ) -> dict[str, Any]:
        """A photo. With `content`, in two sizes the bot can download, as Telegram sends
        them: a 90x90 `thumbnail`, then the 1280x960 photo (`content`)."""
        if content is None:
            size = {"file_id": "photo-1", "file_unique_id": "p1", "width": 90, "height": 90}
            return self._media("photo", [size], user, caption, reply_to)
        small = self._file("photos", thumbnail, "thumb.jpg", thumbnail_size, "photo-0")
        large = self._file("photos", content, "photo.jpg", file_size, "photo-1")
        sizes = [dict(small, width=90, height=90), dict(large, width=1280, height=960)]
        return self._media("photo", sizes, user, caption, reply_to)

    def send_sticker(self, *, user: User | None = None) -> dict[str, Any]:
        sticker = {
            "file_id": "sticker-1",
            "file_unique_id": "s1",
            "type": "regular",
            "width": 512,
            "height": 512,
            "is_animated": False,
            "is_video": False,
        }
        return self._media("sticker", sticker, user, None)

    def send_voice(
        self,
        *,
        user: User | None = None,
        caption: str | None = None,
        content: bytes | None = None,
        mime_type: str | None = "audio/ogg",
        duration: int = 2,
        file_size: int | None = None,
        reply_to: int | BotMessage | None = None,
    ) -> dict[str, Any]:
        """A voice message; with `content`, one the bot can download (getFile + GET)."""
        voice = self._file("voice", content, "voice.oga", file_size, "voice-1")
        voice["duration"] = duration
        if mime_type is not None:
            voice["mime_type"] = mime_type
        return self._media("voice", voice, user, caption, reply_to)

    def send_video_note(
        self,
        *,
        user: User | None = None,
        content: bytes | None = None,
        duration: int = 2,
        file_size: int | None = None,
    ) -> dict[str, Any]:
        """A round video message (no caption, no MIME type: Telegram sends MPEG-4)."""
        note = self._file("video_notes", content, "note.mp4", file_size, "video-note-1")
        note.update(duration=duration, length=240)
        return self._media("video_note", note, user, None)

    def _file(
        self,
        folder: str,
        content: bytes | None,
        file_name: str,
        file_size: int | None,
        default_id: str,
    ) -> dict[str, Any]:
        """The file fields of a media object; with `content`, registered for download.
        `file_size` defaults to the content's length (a lie when given otherwise)."""
        file_id = (
            self.server.add_file(content, file_name, folder=folder)
            if content is not None
            else default_id
        )
        out: dict[str, Any] = {"file_id": file_id, "file_unique_id": f"u-{file_id}"}
        size = file_size if file_size is not None else (len(content) if content else None)
        if size is not None:
            out["file_size"] = size
        return out

    def send_document(
        self,
        *,
        user: User | None = None,
        caption: str | None = None,
        file_name: str = "notes.txt",
        content: bytes | None = None,
        mime_type: str | None = None,
        file_size: int | None = None,
        reply_to: int | BotMessage | None = None,
    ) -> dict[str, Any]:
        """A document; with `content`, one the bot can download (getFile + GET)."""
        doc = self._file("documents", content, file_name, file_size, "doc-1")
        doc["file_name"] = file_name
        if mime_type is not None:
            doc["mime_type"] = mime_type
        return self._media("document", doc, user, caption, reply_to)

    def press(self, message: BotMessage, data: str, *, user: User | None = None) -> dict[str, Any]:
        """The user presses the inline button carrying `data` under the bot's `message`."""
        sender = user or self.default_user
        if sender is None:
            raise ValueError("a press in a group needs a user: press(..., user=User(...))")
        query = {
            "id": str(next(self.server._query_ids)),
            "from": sender.to_dict(),
            "chat_instance": str(self.id),
            "data": data,
            "message": self.server._message_dict(self.id, message),
        }
        self.server.inject({"callback_query": query})
        return query

    def edit(self, message: dict[str, Any], new_text: str) -> dict[str, Any]:
        """The user edits one of their messages (an `edited_message` update)."""
        edited = dict(message, text=new_text, edit_date=int(time.time()))
        entities = _auto_entities(new_text)
        edited.pop("entities", None)
        if entities:
            edited["entities"] = entities
        self.server.inject({"edited_message": edited})
        return edited


def _auto_entities(text: str) -> list[dict[str, Any]]:
    entities = []
    command = _COMMAND.match(text)
    command_end = command.end() if command else 0
    if command:
        entities.append({"type": "bot_command", "offset": 0, "length": _u16(text, command_end)})
    for m in _MENTION.finditer(text):
        # "/help@bot" is one command entity; a mention starts after a space
        if m.start() < command_end or (m.start() > 0 and not text[m.start() - 1].isspace()):
            continue
        entities.append(
            {
                "type": "mention",
                "offset": _u16(text, m.start()),
                "length": _u16(text, m.end()) - _u16(text, m.start()),
            }
        )
    return entities


class FakeTelegram:
    """The server; see the module docstring for the API."""

    def __init__(
        self,
        *,
        token: str = "123456:TEST-token",
        bot_id: int = 777000,
        username: str = "mnemo_test_bot",
        port: int = 0,
        webhook_ca: str | None = None,
    ) -> None:
        self.token = token
        # A CA file (PEM) trusted for an https webhook, as Telegram trusts public CAs.
        self.webhook_ca = webhook_ca
        self.bot_id = bot_id
        self.username = username
        self.calls: list[ApiCall] = []
        self.commands: list[dict[str, Any]] = []
        self.documents: list[SentDocument] = []  # files the bot sent (sendDocument)
        self.webhook: dict[str, Any] | None = None
        self._updates: list[dict[str, Any]] = []
        self._update_ids = itertools.count(1)
        self.last_update_id = 0  # the newest update injected
        self._message_ids: dict[int, itertools.count[int]] = {}
        self._query_ids = itertools.count(1)
        self._messages: dict[tuple[int, int], dict[str, Any]] = {}
        self._bot_messages: dict[tuple[int, int], BotMessage] = {}
        self._faults: list[_Fault] = []
        self._floods: list[_Flood] = []
        self.flood_violations: list[ApiCall] = []
        self._files: dict[str, tuple[str, bytes]] = {}  # file_id -> (file_path, bytes)
        self._chats: dict[int, dict[str, Any]] = {}
        self._creators: dict[int, int] = {}  # chat id -> its creator's user id
        self._admins: dict[int, set[int]] = {}  # chat id -> its administrators' ids
        self._subscribers: list[Callable[[ApiCall], None]] = []
        self._changed = asyncio.Event()
        self._closing = False
        self._runner: web.AppRunner | None = None
        self._client: ClientSession | None = None
        self._delivery: set[asyncio.Task[None]] = set()
        self.port = port  # 0: any free port

    # --- lifecycle -------------------------------------------------------------------

    async def start(self) -> None:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/bot{token}/{method}", self._handle)
        app.router.add_get("/bot{token}/{method}", self._handle)
        app.router.add_get("/file/bot{token}/{path:.+}", self._download)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", self.port)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    async def stop(self) -> None:
        self._closing = True
        self._notify()
        for task in list(self._delivery):
            task.cancel()
        if self._client is not None:
            await self._client.close()
        if self._runner is not None:
            await self._runner.cleanup()

    async def __aenter__(self) -> FakeTelegram:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    @property
    def base_url(self) -> str:
        """The value for `telegram.base_url` (the bot adds /bot and /file/bot)."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def bot_user(self) -> dict[str, Any]:
        return {
            "id": self.bot_id,
            "is_bot": True,
            "first_name": "Mnemo",
            "username": self.username,
            "can_join_groups": True,
            "can_read_all_group_messages": False,
            "supports_inline_queries": False,
        }

    # --- chats and updates -----------------------------------------------------------

    def private(self, user_id: int, first_name: str = "Test", username: str | None = None) -> Chat:
        return Chat(self, user_id, "private", default_user=User(user_id, first_name, username))

    def group(self, chat_id: int, title: str = "Group", *, forum: bool = False) -> Chat:
        if chat_id >= 0:
            raise ValueError("group chat ids are negative")
        return Chat(self, chat_id, "supergroup", title, is_forum=forum)

    def inject(self, update: dict[str, Any]) -> dict[str, Any]:
        """Queue an update (or POST it to the webhook, when one is set)."""
        update = {"update_id": next(self._update_ids), **update}
        self.last_update_id = update["update_id"]
        msg = update.get("message") or update.get("edited_message")
        if msg:
            self._messages[(msg["chat"]["id"], msg["message_id"])] = msg
            self._chats[msg["chat"]["id"]] = msg["chat"]
        if self.webhook:
            task = asyncio.get_running_loop().create_task(self._deliver(update))
            self._delivery.add(task)
            task.add_done_callback(self._delivery.discard)
        else:
            self._updates.append(update)
        self._notify()
        return update

    async def _deliver(self, update: dict[str, Any]) -> None:
        assert self.webhook is not None
        if self._client is None:
            ssl_context = ssl.create_default_context(cafile=self.webhook_ca)
            self._client = ClientSession(connector=TCPConnector(ssl=ssl_context))
        headers = {}
        if self.webhook.get("secret_token"):
            headers["X-Telegram-Bot-Api-Secret-Token"] = self.webhook["secret_token"]
        async with self._client.post(self.webhook["url"], json=update, headers=headers) as resp:
            self.webhook.setdefault("responses", []).append(resp.status)
        self._notify()

    def add_file(
        self, content: bytes, file_name: str = "file", *, folder: str = "documents"
    ) -> str:
        """Register a file the bot may fetch; returns its file_id."""
        file_id = f"file-{len(self._files) + 1}"
        suffix = file_name.rsplit(".", 1)[-1] if "." in file_name else "bin"
        self._files[file_id] = (f"{folder}/{file_id}.{suffix}", content)
        return file_id

    def _next_message_id(self, chat_id: int) -> int:
        counter = self._message_ids.setdefault(chat_id, itertools.count(1))
        return next(counter)

    def _message_dict(self, chat_id: int, ref: int | BotMessage) -> dict[str, Any]:
        message_id = ref.message_id if isinstance(ref, BotMessage) else ref
        try:
            return self._messages[(chat_id, message_id)]
        except KeyError:
            raise ValueError(f"no message {message_id} in chat {chat_id}") from None

    # --- observing -------------------------------------------------------------------

    def subscribe(self, callback: Callable[[ApiCall], None]) -> None:
        """Call `callback(call)` for every API call as it arrives (before it is answered)."""
        self._subscribers.append(callback)

    def calls_to(self, method: str, chat_id: int | None = None) -> list[ApiCall]:
        return [
            c
            for c in self.calls
            if c.method == method and (chat_id is None or c.chat_id == chat_id)
        ]

    def bot_messages(
        self, chat_id: int, thread_id: int | None = None, *, include_deleted: bool = False
    ) -> list[BotMessage]:
        return [
            m
            for (cid, _), m in sorted(self._bot_messages.items())
            if cid == chat_id
            and (thread_id is None or m.thread_id == thread_id)
            and (include_deleted or not m.deleted)
        ]

    async def wait_for(self, predicate: Callable[[], Any], within: float = 10.0) -> Any:
        """Wait until `predicate()` is truthy (re-checked after every API call); fail
        after `within` seconds, scaled to the machine's load (tests/waits.py)."""
        loop = asyncio.get_running_loop()
        limit = scaled(within)
        deadline = loop.time() + limit
        while True:
            result = predicate()
            if result:
                return result
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise TimeoutError(
                    f"condition not met within {limit:.0f}s ({within}s scaled); last calls: "
                    f"{[(c.method, c.params.get('text', '')[:60]) for c in self.calls[-5:]]}"
                )
            event = self._changed
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(event.wait(), remaining)

    async def wait_for_message(
        self,
        chat_id: int,
        contains: str = "",
        *,
        thread_id: int | None = None,
        within: float = 10.0,
    ) -> BotMessage:
        """A bot message in the chat whose current text contains `contains`."""

        def find() -> BotMessage | None:
            for m in self.bot_messages(chat_id, thread_id):
                if contains in m.text:
                    return m
            return None

        return await self.wait_for(find, within)

    def _notify(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    # --- faults ----------------------------------------------------------------------

    def fail(
        self,
        method: str,
        status: int = 429,
        *,
        retry_after: int | None = 1,
        description: str | None = None,
        times: int = 1,
        when: Callable[[dict[str, Any]], bool] | None = None,
    ) -> None:
        """The next `times` calls of `method` (matching `when`) fail with `status`."""
        if description is None:
            description = {
                429: f"Too Many Requests: retry after {retry_after}",
                400: "Bad Request",
                500: "Internal Server Error",
                502: "Bad Gateway",
            }.get(status, "Error")
        self._faults.append(
            _Fault(method, status, description, retry_after if status == 429 else None, times, when)
        )

    def reject_entities(self, times: int = 1) -> None:
        """Formatted sends/edits answer 400 "can't parse entities", as Telegram does when
        it dislikes the formatting; unformatted ones still pass."""

        def has_entities(params: dict[str, Any]) -> bool:
            return bool(params.get("entities")) or bool(params.get("parse_mode"))

        for method in ("sendMessage", "editMessageText"):
            self.fail(
                method,
                400,
                description="Bad Request: can't parse entities: "
                "unsupported start tag at byte offset 0",
                times=times,
                when=has_entities,
            )

    def flood(
        self,
        retry_after: int,
        *,
        chat_id: int | None = None,
        methods: tuple[str, ...] = FLOOD_METHODS,
        when: Callable[[dict[str, Any]], bool] | None = None,
    ) -> None:
        """Flood control in a chat (module docstring): armed now, started by the next
        matching call."""
        self._floods.append(_Flood(retry_after, chat_id, methods, when))

    def end_flood(self) -> None:
        self._floods.clear()

    def _flooded(self, call: ApiCall) -> int | None:
        """Seconds left of the flood window `call` falls in, if any (starting one)."""
        if not self._floods:
            return None
        try:
            chat = int(call.params.get("chat_id", 0))
        except (TypeError, ValueError):
            return None
        now = time.monotonic()
        for flood in self._floods:
            if call.method not in flood.methods:
                continue
            if flood.window is not None:
                in_chat, end = flood.window
                if in_chat == chat and now < end:
                    self.flood_violations.append(call)
                    return max(1, math.ceil(end - now))
            elif flood.chat_id in (None, chat) and (flood.when is None or flood.when(call.params)):
                flood.window = (chat, now + flood.retry_after)
                return flood.retry_after
        return None

    def _take_fault(self, method: str, params: dict[str, Any]) -> _Fault | None:
        for fault in self._faults:
            if (
                fault.method == method
                and fault.times > 0
                and (fault.when is None or fault.when(params))
            ):
                fault.times -= 1
                if fault.times == 0:
                    self._faults.remove(fault)
                return fault
        return None

    # --- HTTP ------------------------------------------------------------------------

    async def _params(self, request: web.Request) -> dict[str, Any]:
        if request.content_type == "application/json":
            body = await request.json() if request.can_read_body else {}
            return dict(body or {})
        form = await request.post()
        params: dict[str, Any] = {}
        for key, value in form.items():
            if not isinstance(value, str):
                params[key] = "<file>"
                # sendDocument's upload, kept whole (`documents`)
                params[f"{key}:file"] = (value.filename, value.file.read())
            elif key in _STRING_PARAMS:
                params[key] = value
            else:
                try:
                    params[key] = json.loads(value)
                except ValueError:
                    params[key] = value
        return params

    async def _handle(self, request: web.Request) -> web.Response:
        method = request.match_info["method"]
        params = await self._params(request)
        call = ApiCall(method, params, time.monotonic())
        self.calls.append(call)
        for callback in self._subscribers:
            callback(call)
        # Wake waiters on arrival too: a long-polling getUpdates answers only much later.
        self._notify()
        try:
            if request.match_info["token"] != self.token:
                return _error(401, "Unauthorized")
            flooded = self._flooded(call)
            if flooded is not None:
                return _error(429, f"Too Many Requests: retry after {flooded}", flooded)
            fault = self._take_fault(method, params)
            if fault is not None:
                return _error(fault.status, fault.description, fault.retry_after)
            handler = getattr(self, f"_api_{method}", None)
            if handler is None:
                return _error(404, "Not Found: method not found")
            result = await handler(params)
            if isinstance(result, web.Response):
                return result
            return web.json_response({"ok": True, "result": result})
        finally:
            self._notify()

    async def _download(self, request: web.Request) -> web.Response:
        path = request.match_info["path"]
        call = ApiCall("file", {"path": path}, time.monotonic())
        self.calls.append(call)
        try:
            if request.match_info["token"] != self.token:
                return _error(401, "Unauthorized")
            fault = self._take_fault("file", call.params)
            if fault is not None:
                return _error(fault.status, fault.description, fault.retry_after)
            for file_path, content in self._files.values():
                if file_path == path:
                    return web.Response(body=content, content_type="application/octet-stream")
            return _error(404, "Not Found")
        finally:
            self._notify()

    # --- methods ---------------------------------------------------------------------

    async def _api_getFile(self, params: dict[str, Any]) -> Any:
        file_id = str(params.get("file_id", ""))
        if file_id not in self._files:
            return _error(400, "Bad Request: invalid file_id")
        file_path, content = self._files[file_id]
        return {
            "file_id": file_id,
            "file_unique_id": f"u-{file_id}",
            "file_size": len(content),
            "file_path": file_path,
        }

    def set_admins(self, chat_id: int, *, creator: int | None = None, admins: Any = ()) -> None:
        """Who getChatMember says administers `chat_id` from now on."""
        if creator is not None:
            self._creators[chat_id] = creator
        self._admins[chat_id] = set(admins)

    async def _api_getChatMember(self, params: dict[str, Any]) -> Any:
        chat_id, user_id = int(params["chat_id"]), int(params["user_id"])
        user = User(user_id).to_dict()
        if self._creators.get(chat_id) == user_id:
            return {"status": "creator", "user": user, "is_anonymous": False}
        if user_id in self._admins.get(chat_id, set()):
            rights = [
                "can_be_edited",
                "can_manage_chat",
                "can_delete_messages",
                "can_manage_video_chats",
                "can_restrict_members",
                "can_promote_members",
                "can_change_info",
                "can_invite_users",
                "can_post_stories",
                "can_edit_stories",
                "can_delete_stories",
            ]
            return {
                "status": "administrator",
                "user": user,
                "is_anonymous": False,
                **{right: right != "can_be_edited" for right in rights},
            }
        return {"status": "member", "user": user}

    async def _api_getMe(self, params: dict[str, Any]) -> Any:
        return self.bot_user

    async def _api_getUpdates(self, params: dict[str, Any]) -> Any:
        if self.webhook:
            return _error(409, "Conflict: can't use getUpdates method while webhook is active")
        offset = int(params.get("offset") or 0)
        limit = int(params.get("limit") or 100)
        timeout = float(params.get("timeout") or 0)
        if offset:
            self._updates = [u for u in self._updates if u["update_id"] >= offset]
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not self._updates and not self._closing:
            remaining = deadline - loop.time()
            if remaining <= 0:
                break
            try:
                await asyncio.wait_for(self._changed.wait(), remaining)
            except TimeoutError:
                break
        return self._updates[:limit]

    async def _api_setMyCommands(self, params: dict[str, Any]) -> Any:
        self.commands = list(params.get("commands") or [])
        return True

    async def _api_getMyCommands(self, params: dict[str, Any]) -> Any:
        return self.commands

    async def _api_deleteWebhook(self, params: dict[str, Any]) -> Any:
        self.webhook = None
        if params.get("drop_pending_updates"):
            self._updates.clear()
        return True

    async def _api_setWebhook(self, params: dict[str, Any]) -> Any:
        if not params.get("url"):
            self.webhook = None
            return True
        self.webhook = {"url": params["url"], "secret_token": params.get("secret_token", "")}
        pending, self._updates = self._updates, []
        for update in pending:
            task = asyncio.get_running_loop().create_task(self._deliver(update))
            self._delivery.add(task)
            task.add_done_callback(self._delivery.discard)
        return True

    async def _api_getWebhookInfo(self, params: dict[str, Any]) -> Any:
        return {
            "url": (self.webhook or {}).get("url", ""),
            "has_custom_certificate": False,
            "pending_update_count": len(self._updates),
        }

    async def _api_sendChatAction(self, params: dict[str, Any]) -> Any:
        if "chat_id" not in params or not params.get("action"):
            return _error(400, "Bad Request: chat_id and action are required")
        return True

    async def _api_answerCallbackQuery(self, params: dict[str, Any]) -> Any:
        return True

    def _check_text(
        self, params: dict[str, Any]
    ) -> tuple[str, list[dict[str, Any]]] | web.Response:
        text = params.get("text")
        if not isinstance(text, str) or not text.strip():
            return _error(400, "Bad Request: message text is empty")
        size = utf16_len(text)
        if size > LIMIT:
            return _error(400, "Bad Request: message is too long")
        entities = params.get("entities") or []
        for e in entities:
            offset, length = e.get("offset", -1), e.get("length", 0)
            if offset < 0 or length <= 0 or offset + length > size:
                return _error(
                    400,
                    f"Bad Request: can't parse entities: entity {e} "
                    f"is out of the text's {size} UTF-16 units",
                )
        return text, list(entities)

    def _bot_message_dict(self, m: BotMessage, chat: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {
            "message_id": m.message_id,
            "date": int(time.time()),
            "chat": chat,
            "from": self.bot_user,
            "text": m.text,
        }
        if m.entities:
            out["entities"] = m.entities
        if m.thread_id is not None:
            out["message_thread_id"] = m.thread_id
            out["is_topic_message"] = True
        if m.edits:
            out["edit_date"] = int(time.time())
        if m.reply_markup:
            out["reply_markup"] = m.reply_markup
        return out

    def _chat_dict(self, chat_id: int) -> dict[str, Any]:
        if chat_id in self._chats:
            return self._chats[chat_id]
        kind = "private" if chat_id > 0 else "supergroup"
        return (
            {"id": chat_id, "type": kind, "first_name": "Test"}
            if kind == "private"
            else {"id": chat_id, "type": kind, "title": "Group"}
        )

    async def _api_sendMessage(self, params: dict[str, Any]) -> Any:
        checked = self._check_text(params)
        if isinstance(checked, web.Response):
            return checked
        text, entities = checked
        chat_id = int(params["chat_id"])
        reply = params.get("reply_parameters") or {}
        m = BotMessage(
            chat_id,
            self._next_message_id(chat_id),
            text,
            entities,
            params.get("message_thread_id"),
            reply.get("message_id"),
            reply_markup=_markup(params.get("reply_markup")),
        )
        self._bot_messages[(chat_id, m.message_id)] = m
        out = self._bot_message_dict(m, self._chat_dict(chat_id))
        self._messages[(chat_id, m.message_id)] = out
        return out

    async def _api_sendDocument(self, params: dict[str, Any]) -> Any:
        """An uploaded file: kept in `documents` (chat id, file name, bytes, caption)."""
        chat_id = int(params["chat_id"])
        upload = params.get("document:file")
        if upload is None:
            return _error(400, "Bad Request: there is no document in the request")
        name, body = upload
        caption = params.get("caption") or ""
        self.documents.append(SentDocument(chat_id, name, body, caption))
        m = BotMessage(chat_id, self._next_message_id(chat_id), caption, [])
        self._bot_messages[(chat_id, m.message_id)] = m
        out = self._bot_message_dict(m, self._chat_dict(chat_id))
        out.pop("text")
        out["caption"] = caption
        out["document"] = {
            "file_id": f"sent-{chat_id}-{m.message_id}",
            "file_unique_id": f"sent-{chat_id}-{m.message_id}",
            "file_name": name,
            "file_size": len(body),
        }
        self._messages[(chat_id, m.message_id)] = out
        self._notify()
        return out

    async def _api_editMessageText(self, params: dict[str, Any]) -> Any:
        checked = self._check_text(params)
        if isinstance(checked, web.Response):
            return checked
        text, entities = checked
        key = (int(params.get("chat_id", 0)), int(params.get("message_id", 0)))
        m = self._bot_messages.get(key)
        if m is None or m.deleted:
            return _error(400, "Bad Request: message to edit not found")
        if m.text == text and m.entities == entities:
            return _error(
                400,
                "Bad Request: message is not modified: specified new message "
                "content and reply markup are exactly the same as a current "
                "content and reply markup of the message",
            )
        m.text, m.entities = text, entities
        m.edits += 1
        out = self._bot_message_dict(m, self._chat_dict(key[0]))
        self._messages[key] = out
        return out

    async def _api_editMessageReplyMarkup(self, params: dict[str, Any]) -> Any:
        key = (int(params.get("chat_id", 0)), int(params.get("message_id", 0)))
        m = self._bot_messages.get(key)
        if m is None or m.deleted:
            return _error(400, "Bad Request: message to edit not found")
        m.reply_markup = _markup(params.get("reply_markup"))
        out = self._bot_message_dict(m, self._chat_dict(key[0]))
        self._messages[key] = out
        return out

    async def _api_deleteMessage(self, params: dict[str, Any]) -> Any:
        key = (int(params.get("chat_id", 0)), int(params.get("message_id", 0)))
        m = self._bot_messages.get(key)
        if m is None or m.deleted:
            return _error(400, "Bad Request: message to delete not found")
        m.deleted = True
        return True


def _markup(value: Any) -> dict[str, Any] | None:
    if isinstance(value, str):
        value = json.loads(value) if value else None
    return value or None


def _error(status: int, description: str, retry_after: int | None = None) -> web.Response:
    body: dict[str, Any] = {"ok": False, "error_code": status, "description": description}
    if retry_after is not None:
        body["parameters"] = {"retry_after": retry_after}
    return web.json_response(body, status=status)
