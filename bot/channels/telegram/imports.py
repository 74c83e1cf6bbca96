"""A chat export sent to the bot in a private chat, imported into that user's memory
(bot.chat_import does the reading and storing).

- A document named `result.json` (Telegram Desktop's export) or `conversations.json`
  (ChatGPT's) in a private chat is an import offer, not a turn. Up to 20 MB, the Bot
  API's download limit (a bigger export: the operator's `mnemo memory import-chat`).
  The bot downloads it, reads it whole (a malformed file: one line, nothing kept) and
  answers with what it would import, an Import button and `/memory import confirm`.
  The read is bounded (`bot.chat_import.limits.IN_CHAT`: depth, size, time) and runs in
  a child process with a memory cap (`bot.chat_import.sandbox`): a hostile file is
  refused in one line and its update recorded as handled like any offer, so a restart
  never reads it again.
- The offer is kept `CONFIRM_WITHIN_S` per user, the newest only, its file in
  `<data_dir>/imports/` (deleted once imported, cancelled, expired, or at the next
  start); `/memory import cancel` drops it. Its buttons carry the offer's code, so they
  act only on their own offer, once: a button of an offer that was imported, cancelled
  or replaced by a newer one answers that it is no longer valid. An offer that ends
  (a newer offer, typed confirm or cancel) loses its buttons. The typed
  `/memory import confirm` takes the newest offer: only the chat's user makes offers,
  and an import is undone by `/memory forget`. Offers live in the process that
  downloaded the file (it is on that replica's disk). A confirmation imports into the confirming user's own memory only
  (the offer is theirs: a private chat's user), in the background (the chat stays
  free meanwhile), editing one message with its progress, then the outcome. One
  import per user at a time.
- Imported conversations are then compacted in the background like any other
  session (`Conversations.schedule_compaction`), as are those the CLI imported, at the bot's
  next start (`ChatImports.start`).
- A stop or crash mid-import keeps the batches stored: sending the file again
  continues after them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy.ext.asyncio import AsyncEngine
from telegram import Bot, Document, InlineKeyboardButton, InlineKeyboardMarkup
from telegram.error import TelegramError

from bot.channels.telegram.attachments import Unreadable, download
from bot.channels.telegram.delivery.sent import Target
from bot.channels.telegram.render.replies import send_plain_reply
from bot.chat_import import importer, ledger
from bot.chat_import.limits import IN_CHAT
from bot.chat_import.sources import ImportRefused
from bot.chat_import.summary import plan_lines, report_line
from bot.config.settings import Settings
from bot.conversation.commands import failure_reason
from bot.conversation.service import Conversations
from memory.contract.types import Session
from memory.storage import forgetting as fg

log = logging.getLogger(__name__)

MAX_IMPORT_BYTES = 20 * 1024 * 1024  # what the Bot API lets a bot download
CONFIRM_WITHIN_S = 600.0
PROGRESS_EVERY_S = 2.0
READING_AT_ONCE = 2
EXPORT_NAMES = {"result.json": "telegram", "conversations.json": "chatgpt"}
CONFIRM = "/memory import confirm"
PREFIX = "mnemo:import:"
TOO_BIG = (
    "That export is over 20 MB, more than Telegram lets me download. Ask the bot's "
    "operator to import it with `mnemo memory import-chat`."
)
NOTHING = (
    "Nothing to confirm: send me your result.json (Telegram) or conversations.json (ChatGPT) first."
)
USAGE = (
    "Send me a Telegram export (result.json, from Telegram Desktop's Export chat history, "
    "JSON format) or a ChatGPT export (conversations.json) in this private chat; I show "
    f"what it holds, then {CONFIRM} imports it (/memory import cancel drops it)."
)


def export_format(doc: Document | None) -> str | None:
    """The format of a document named as an export names its file; None otherwise."""
    if doc is None or not doc.file_name:
        return None
    return EXPORT_NAMES.get(doc.file_name.strip().lower())


def is_import_command(words: str) -> bool:
    return words.lower().split(maxsplit=1)[:1] == ["import"]


@dataclass
class _Offer:
    plan: importer.Plan
    at: float
    code: str  # what its buttons carry
    shown: tuple[int, int] | None = None  # (chat id, message id) of the offer's buttons


NO_LONGER_VALID = (
    "That button is no longer valid: its export was imported, cancelled or replaced by a newer one."
)


def pressed(data: str) -> tuple[str, str]:
    """(action, code) of an Import or Cancel button's callback data ("" code: a button
    from before codes, which matches no offer)."""
    action, _, code = data.removeprefix(PREFIX).partition(":")
    return action, code


class ChatImports:
    def __init__(self, conversations: Conversations, settings: Settings) -> None:
        self.conversations = conversations
        self.agent_id = settings.agent.id
        self.dir = Path(settings.data_dir) / "imports"
        self._offers: dict[int, _Offer] = {}  # user id -> the newest offer
        self._running: dict[int, asyncio.Task[None]] = {}
        # Files read at once (each in its own capped child, `bot.chat_import.sandbox`):
        # the most memory imports may take is READING_AT_ONCE x IN_CHAT.memory_mb.
        self._reading = asyncio.Semaphore(READING_AT_ONCE)

    # --- the offer ------------------------------------------------------------------

    async def offer(self, bot: Bot, target: Target, user_id: int, doc: Document) -> None:
        fmt = export_format(doc)
        assert fmt is not None
        try:
            engine = fg.engine_of(self.conversations.provider)
        except AttributeError:
            await send_plain_reply(bot, target, "My memory store cannot take imports.")
            return
        try:
            body = await download(bot, doc, MAX_IMPORT_BYTES, TOO_BIG)
        except Unreadable as refused:
            await send_plain_reply(bot, target, refused.line)
            return
        for ended in [self._drop(user_id), *self._expire()]:  # the newest offer only
            await _unbutton(bot, ended)
        # A directory per offer (the same file sent again, while the first is imported,
        # is another), the file under the export's own name, which refusals quote.
        offer_dir = f"{user_id}-{doc.file_unique_id}-{time.monotonic_ns()}"
        path = self.dir / offer_dir / (doc.file_name or "").strip().lower()
        await asyncio.to_thread(_write, path, body)
        del body
        try:
            async with self._reading:
                plan = await importer.plan(
                    engine, importer.FORMATS[fmt], path, user_id, self.agent_id, IN_CHAT
                )
        except ImportRefused as exc:
            _discard(path)
            await send_plain_reply(bot, target, f"I can't import that file: {exc}")
            return
        except BaseException:
            _discard(path)
            raise
        lines = plan_lines(plan)
        if not plan.new:
            _discard(path)
            await send_plain_reply(bot, target, "\n".join(lines))
            return
        offer = self._offers[user_id] = _Offer(plan, time.monotonic(), secrets.token_hex(4))
        lines.append(
            f"Reply {CONFIRM} within {int(CONFIRM_WITHIN_S // 60)} minutes to import it "
            "into your memory (only yours)."
        )
        buttons = InlineKeyboardMarkup(
            [
                [
                    InlineKeyboardButton("Import", callback_data=f"{PREFIX}confirm:{offer.code}"),
                    InlineKeyboardButton("Cancel", callback_data=f"{PREFIX}cancel:{offer.code}"),
                ]
            ]
        )
        message_id = await send_plain_reply(bot, target, "\n".join(lines), buttons)
        offer.shown = (target.chat_id, message_id)

    def _drop(self, user_id: int) -> _Offer | None:
        offer = self._offers.pop(user_id, None)
        if offer is not None:
            _discard(offer.plan.path)
        return offer

    def _expire(self) -> list[_Offer]:
        """Drop the offers (and their files) nobody confirmed in time."""
        now = time.monotonic()
        return [
            self._drop(user_id) or offer
            for user_id, offer in list(self._offers.items())
            if now - offer.at > CONFIRM_WITHIN_S
        ]

    def _current(self, user_id: int, code: str | None) -> _Offer | None:
        """The user's offer, when it is live and, for a button (`code`), that button's."""
        offer = self._offers.get(user_id)
        if offer is None or (code is not None and offer.code != code):
            return None
        if time.monotonic() - offer.at > CONFIRM_WITHIN_S:
            self._drop(user_id)
            return None
        return offer

    # --- confirm / cancel -----------------------------------------------------------

    async def command(
        self, bot: Bot, target: Target, user_id: int, words: str, *, code: str | None = None
    ) -> str | None:
        """`/memory import <confirm|cancel>`: the answer, or None when it answered itself
        (the progress message). `code`: pressed on that offer's button, which acts on
        that offer only."""
        action = words.lower().split()[1:]
        if action not in (["cancel"], ["confirm"]):
            return USAGE
        running = self._running.get(user_id)
        if action == ["confirm"] and running is not None and not running.done():
            return "An import of yours is running already: wait for it to finish."
        offer = self._current(user_id, code)
        if offer is None:
            return NOTHING if code is None else NO_LONGER_VALID
        if action == ["cancel"]:
            await _unbutton(bot, self._drop(user_id))
            return "Import cancelled."
        del self._offers[user_id]  # its file goes when the import ends
        await _unbutton(bot, offer)
        task = asyncio.create_task(
            self._import(bot, target, user_id, offer.plan), name=f"import:{user_id}"
        )
        self._running[user_id] = task
        task.add_done_callback(lambda _t: self._running.pop(user_id, None))
        return None

    async def _import(self, bot: Bot, target: Target, user_id: int, plan: importer.Plan) -> None:
        total = plan.new
        message_id = await send_plain_reply(bot, target, f"Importing… 0 of {total} messages")
        done = [0]
        started = time.monotonic()
        engine = fg.engine_of(self.conversations.provider)
        work = asyncio.create_task(
            importer.run(
                self.conversations.provider,
                engine,
                plan,
                on_progress=lambda n: done.__setitem__(0, n),
            )
        )
        try:
            while not work.done():
                await asyncio.wait({work}, timeout=PROGRESS_EVERY_S)
                if not work.done():
                    await _edit(
                        bot, target, message_id, f"Importing… {done[0]} of {total} messages"
                    )
            try:
                report = work.result()
            except (ImportRefused, ledger.ImportConflict) as exc:
                text = f"The import stopped: {exc}. What was stored is kept: send the file again to continue."
            except Exception as exc:
                log.exception("the import of user %s failed", user_id)
                text = (
                    f"The import stopped: {failure_reason(exc)}. What was stored is kept: "
                    "send the file again to continue."
                )
            else:
                text = (
                    report_line(report, time.monotonic() - started)
                    + " /memory search and /memory ask reach it now."
                )
                await self._compact(engine, report.sessions)
            await _edit(bot, target, message_id, text)
        finally:
            if not work.done():
                work.cancel()
                await asyncio.gather(work, return_exceptions=True)
            _discard(plan.path)

    # --- background compaction ------------------------------------------------------

    async def _compact(self, engine: AsyncEngine, sessions: list[Session]) -> None:
        for session in sessions:
            self.conversations.schedule_compaction(session)
            await ledger.mark_compacted(engine, session.id)

    async def start(self) -> None:
        """At the bot's start: drop the files of offers a crash left, and compact in the
        background what the CLI imported meanwhile."""
        await asyncio.to_thread(shutil.rmtree, self.dir, True)
        try:
            engine = fg.engine_of(self.conversations.provider)
            for session in await ledger.uncompacted(engine):
                self.conversations.schedule_compaction(session)
                await ledger.mark_compacted(engine, session.id)
        except Exception as exc:  # never worth not starting
            log.warning("could not look for imported sessions to compact: %s", exc)

    async def close(self) -> None:
        for task in list(self._running.values()):
            task.cancel()
        await asyncio.gather(*self._running.values(), return_exceptions=True)
        for user_id in list(self._offers):
            self._drop(user_id)


def _write(path: Path, body: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(body)


def _discard(path: Path) -> None:
    path.unlink(missing_ok=True)
    with contextlib.suppress(OSError):
        path.parent.rmdir()


async def _unbutton(bot: Bot, offer: _Offer | None) -> None:
    if offer is None or offer.shown is None:
        return
    chat_id, message_id = offer.shown
    with contextlib.suppress(TelegramError):  # gone, or its buttons off already
        await bot.edit_message_reply_markup(chat_id=chat_id, message_id=message_id)


async def _edit(bot: Bot, target: Target, message_id: int, text: str) -> None:
    with contextlib.suppress(TelegramError):  # unchanged text, or the message is gone
        await bot.edit_message_text(text, chat_id=target.chat_id, message_id=message_id)
