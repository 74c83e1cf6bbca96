"""A person's own memory as a file, in a private chat (memory.transfer.memory_export
writes and reads it).

- `/memory export`: the sender's memory (every private conversation, summaries with
  their sources, profile, soul, rules and their changelog) as `mnemo-memory-<id>.zip`
  (memory.json, the versioned document; memory.md, a readable rendering). Built in the
  background, one progress message edited with the outcome; at most one export a user
  an hour (`EXPORT_EVERY_S`, kept by this process: a restart forgets it); a file over
  the Bot API's 50 MB upload limit is refused in one line naming the operator's CLI
  (`mnemo memory export --user`), never split (a split file would need reassembling before it
  imports).
- Sending that zip (named `mnemo-memory*.zip`) back in a private chat is an import
  offer: a dry run says what it would import into the sender's own memory (the export's
  owner ids are rewritten to the sender's), and `/memory import confirm` within ten
  minutes imports it, all or nothing (`/memory import cancel` drops it). The newest offer
  per user only, kept in memory (the file is held, at most 20 MB, the download limit).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass
from typing import Any

from telegram import Bot, Document, InputFile
from telegram.error import TelegramError

from bot.channels.telegram.attachments import Unreadable, download
from bot.channels.telegram.delivery.sent import Target
from bot.channels.telegram.render.replies import send_plain_reply
from bot.conversation.commands import failure_reason
from bot.conversation.service import Conversations
from memory.contract.errors import ContractError, InvalidArgument
from memory.contract.types import Session
from memory.storage import forgetting as fg
from memory.transfer.memory_export import export_memory, from_bytes, import_memory, to_zip

log = logging.getLogger(__name__)

EXPORT_EVERY_S = 3600.0
MAX_UPLOAD_BYTES = 50 * 1024 * 1024  # what the Bot API lets a bot send
MAX_DOWNLOAD_BYTES = 20 * 1024 * 1024  # what it lets a bot download
CONFIRM_WITHIN_S = 600.0
# The JSON a zip sent in the chat may unpack to: it is parsed in the bot's own process
# (several times its size once parsed), unlike chat imports' sandboxed reading; a bigger
# one is the operator's (`mnemo memory import`, up to 256 MB).
MAX_UNPACKED_BYTES = 64 * 1024 * 1024
FILE_PREFIX = "mnemo-memory"
TOO_BIG_UP = (
    "Your memory export is {size:.0f} MB, over the 50 MB Telegram lets me send. Ask the "
    "bot's operator for it (`mnemo memory export --user <your id>`)."
)
TOO_BIG_DOWN = (
    "That export is over 20 MB, more than Telegram lets me download. Ask the bot's "
    "operator to import it with `mnemo memory import --user <your id>`."
)
NOTHING = "Nothing to confirm: send me your mnemo-memory zip (from /memory export) first."


def is_memory_file(doc: Document | None) -> bool:
    name = (doc.file_name or "").strip().lower() if doc is not None else ""
    return name.startswith(FILE_PREFIX) and name.endswith(".zip")


@dataclass
class _Offer:
    doc: Any
    at: float


class MemoryFiles:
    def __init__(self, conversations: Conversations, agent_id: str) -> None:
        self.conversations = conversations
        self.agent_id = agent_id
        self._last_export: dict[int, float] = {}  # user id -> monotonic time
        self._offers: dict[int, _Offer] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    # --- export ---------------------------------------------------------------------

    def export(self, bot: Bot, target: Target, user_id: int) -> str | None:
        """`/memory export`: the refusal, or None when the export started (it answers
        itself: a progress message, then the file)."""
        last = self._last_export.get(user_id)
        now = time.monotonic()
        if last is not None and now - last < EXPORT_EVERY_S:
            wait = int((EXPORT_EVERY_S - (now - last)) // 60) + 1
            return f"One export an hour: try again in {wait} minutes."
        self._last_export[user_id] = now
        task = asyncio.create_task(self._export(bot, target, user_id), name=f"export:{user_id}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return None

    async def _export(self, bot: Bot, target: Target, user_id: int) -> None:
        provider = self.conversations.provider
        progress = await send_plain_reply(bot, target, "Exporting your memory…")
        try:
            engine = fg.engine_of(provider)
            doc = await export_memory(engine, user_id, self.agent_id, provider)
            body = await asyncio.to_thread(to_zip, doc, provider)
            if len(body) > MAX_UPLOAD_BYTES:
                await _edit(bot, target, progress, TOO_BIG_UP.format(size=len(body) / 2**20))
                return
            sessions = doc["sections"]["sessions"]
            count = sum(len(s["messages"]) for s in sessions)
            await bot.send_document(
                chat_id=target.chat_id,
                document=InputFile(body, filename=f"{FILE_PREFIX}-{user_id}.zip"),
                caption=(
                    f"Your memory: {len(sessions)} conversations, {count} messages "
                    "(memory.json to import elsewhere, memory.md to read)."
                ),
                message_thread_id=target.thread_id,
            )
            await _edit(bot, target, progress, "Exported: the file is below.")
        except Exception as exc:
            log.exception("the memory export of user %s failed", user_id)
            self._last_export.pop(user_id, None)  # a failed export does not count
            await _edit(bot, target, progress, f"The export failed: {failure_reason(exc)}.")

    # --- import ---------------------------------------------------------------------

    async def offer(self, bot: Bot, target: Target, user_id: int, doc: Document) -> None:
        """A memory export sent in a private chat: a dry run into the sender's memory."""
        provider = self.conversations.provider
        try:
            body = await download(bot, doc, MAX_DOWNLOAD_BYTES, TOO_BIG_DOWN)
            parsed = await asyncio.to_thread(from_bytes, bytes(body), MAX_UNPACKED_BYTES)
            engine = fg.engine_of(provider)
            report = await import_memory(
                engine, parsed, provider, retarget=(user_id, self.agent_id), dry_run=True
            )
        except Unreadable as refused:
            await send_plain_reply(bot, target, refused.line)
            return
        except (ContractError, AttributeError) as exc:
            await send_plain_reply(bot, target, f"I can't import that file: {exc}")
            return
        lines = report.lines(dry_run=True)
        if not report.existing:
            self._offers[user_id] = _Offer(parsed, time.monotonic())
            lines.append(
                f"Reply /memory import confirm within {int(CONFIRM_WITHIN_S // 60)} minutes "
                "to import it into your memory (only yours); /memory import cancel drops it."
            )
        await send_plain_reply(bot, target, "\n".join(lines))

    def has_offer(self, user_id: int) -> bool:
        offer = self._offers.get(user_id)
        if offer is not None and time.monotonic() - offer.at > CONFIRM_WITHIN_S:
            del self._offers[user_id]
            return False
        return offer is not None

    async def command(self, user_id: int, words: str) -> str:
        """`/memory import confirm|cancel` on the user's memory export offer."""
        action = words.lower().split()[1:]
        if not self.has_offer(user_id):
            return NOTHING
        if action == ["cancel"]:
            del self._offers[user_id]
            return "Import cancelled."
        if action != ["confirm"]:
            return "Usage: /memory import confirm (or cancel)"
        offer = self._offers.pop(user_id)
        provider = self.conversations.provider
        try:
            report = await import_memory(
                fg.engine_of(provider), offer.doc, provider, retarget=(user_id, self.agent_id)
            )
        except (ContractError, InvalidArgument) as exc:
            return f"The import was refused, nothing was written: {exc}"
        for sid, channel in report.channels.items():  # compacted like any session
            self.conversations.schedule_compaction(Session(sid, self.agent_id, user_id, channel))
        return " ".join(report.lines(dry_run=False))

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)


async def _edit(bot: Bot, target: Target, message_id: int, text: str) -> None:
    with contextlib.suppress(TelegramError):  # unchanged text, or the message is gone
        await bot.edit_message_text(text, chat_id=target.chat_id, message_id=message_id)
