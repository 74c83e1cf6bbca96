"""A reply as the user sees it: "typing…" while the bot works, then the answer, streamed by
editing one message in place at a bounded rate, then the final formatted text.

Rates (Telegram allows about one message per second per chat):
- nothing is shown before `interval` seconds have passed, so a quick answer arrives as
  one formatted message with no edits at all;
- while the model streams, the shown text (plain) is refreshed every `interval` seconds;
- every edit in a chat, from any of its conversations (forum topics share the chat), goes
  through one `EditPacer`: at most one edit per `min_gap` seconds per chat.
- An answer longer than one message continues in further messages; the final pass edits
  each into its formatted form and deletes any left over from streaming.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import AsyncIterator, Callable

from telegram import Bot, InlineKeyboardMarkup
from telegram.constants import ChatAction
from telegram.error import BadRequest, RetryAfter, TelegramError

from bot.channels.telegram.delivery.sent import (
    Target,
    edit_piece,
    is_gone,
    reply_parameters,
    retry_after_seconds,
    send_piece,
    send_text,
    with_retry,
)
from bot.channels.telegram.render.formatting import plain_pieces, render

log = logging.getLogger(__name__)

TYPING_EVERY_S = 4.0  # Telegram shows a chat action for about 5 s
# "typing…" only for a turn still running after this long: a quicker answer looks the
# same to the user without it, and saves a Bot API call per update.
TYPING_AFTER_S = 0.3
EMPTY_REPLY = "(no answer)"


class EditPacer:
    """At most one edit per `min_gap` seconds in each chat."""

    def __init__(self, min_gap: float = 1.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.min_gap = min_gap
        self._clock = clock
        self._last: dict[int, float] = {}
        self._locks: dict[int, asyncio.Lock] = {}

    async def wait(self, chat_id: int) -> None:
        lock = self._locks.setdefault(chat_id, asyncio.Lock())
        async with lock:
            last = self._last.get(chat_id)
            if last is not None:
                delay = last + self.min_gap - self._clock()
                if delay > 0:
                    await asyncio.sleep(delay)
            self._last[chat_id] = self._clock()
        self._prune()

    def _prune(self) -> None:
        if len(self._last) < 4096:
            return
        horizon = self._clock() - self.min_gap
        for chat_id in [c for c, t in self._last.items() if t < horizon]:
            lock = self._locks.get(chat_id)
            if lock is None or not lock.locked():
                self._last.pop(chat_id, None)
                self._locks.pop(chat_id, None)


@contextlib.asynccontextmanager
async def typing(
    bot: Bot, target: Target, every: float = TYPING_EVERY_S, after: float = TYPING_AFTER_S
) -> AsyncIterator[None]:
    """Show "typing…" in the chat (or topic) from `after` seconds on until the block ends."""

    async def loop() -> None:
        await asyncio.sleep(after)
        while True:
            wait = every
            try:
                await bot.send_chat_action(
                    target.chat_id, ChatAction.TYPING, message_thread_id=target.thread_id
                )
            except RetryAfter as exc:
                wait = max(every, retry_after_seconds(exc))
            except TelegramError as exc:  # cosmetic: never fail a reply over it
                log.debug("sendChatAction failed: %s", exc)
            await asyncio.sleep(wait)

    task = asyncio.create_task(loop(), name=f"typing:{target.chat_id}")
    try:
        yield
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


class ReplyStream:
    """Streams one answer into the chat. Use `on_delta` as the conversation service's callback, then
    `finish(final_text)`."""

    def __init__(self, bot: Bot, target: Target, pacer: EditPacer, interval: float) -> None:
        self.bot = bot
        self.target = target
        self.pacer = pacer
        self.interval = interval
        self.message_ids: list[int] = []
        self._shown: list[str] = []
        self._latest = ""
        self._task: asyncio.Task[None] | None = None
        self._done = asyncio.Event()

    async def on_delta(self, text_so_far: str) -> None:
        """Cheap: records the text; a background task shows it at the bounded rate."""
        self._latest = text_so_far
        if self._task is None and not self._done.is_set():
            self._task = asyncio.create_task(self._run(), name=f"stream:{self.target.chat_id}")

    async def _pause(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._done.wait(), seconds)

    async def _run(self) -> None:
        await self._pause(self.interval)
        while not self._done.is_set():
            try:
                await self._show_plain(self._latest)
            except RetryAfter as exc:
                await self._pause(retry_after_seconds(exc))
            except TelegramError as exc:  # streaming is best effort; finish() repairs
                log.debug("streaming update failed: %s", exc)
            await self._pause(self.interval)

    async def _show_plain(self, text: str) -> None:
        for k, piece in enumerate(plain_pieces(text)):
            if self._done.is_set():
                return
            if k < len(self.message_ids):
                if self._shown[k] == piece:
                    continue
                await self.pacer.wait(self.target.chat_id)
                # one attempt: a later refresh or finish() carries the newer text anyway
                try:
                    await self.bot.edit_message_text(
                        piece, self.target.chat_id, self.message_ids[k]
                    )
                except BadRequest as exc:
                    if "not modified" not in exc.message:
                        raise
                self._shown[k] = piece
            else:
                msg = await self.bot.send_message(
                    self.target.chat_id,
                    piece,
                    message_thread_id=self.target.thread_id,
                    reply_parameters=reply_parameters(self.target) if k == 0 else None,
                )
                self.message_ids.append(msg.message_id)
                self._shown.append(piece)

    async def finish(self, text: str) -> list[int]:
        """Show the final answer, formatted; returns the ids of its messages."""
        self._done.set()
        if self._task is not None:
            await asyncio.gather(self._task, return_exceptions=True)
        pieces = render(text) or render(EMPTY_REPLY)
        for k, piece in enumerate(pieces):
            if k < len(self.message_ids):
                await self.pacer.wait(self.target.chat_id)
                try:
                    await edit_piece(self.bot, self.target.chat_id, self.message_ids[k], piece)
                    continue
                except BadRequest as exc:
                    if not is_gone(exc):
                        raise
                # the streamed message was deleted meanwhile: send this piece anew
                msg = await send_piece(self.bot, self.target, piece)
                self.message_ids[k] = msg.message_id
            else:
                msg = await send_piece(self.bot, self.target, piece)
                self.message_ids.append(msg.message_id)
        for message_id in self.message_ids[len(pieces) :]:
            try:
                await with_retry(
                    functools.partial(self.bot.delete_message, self.target.chat_id, message_id),
                    what="deleteMessage",
                )
            except TelegramError as exc:
                log.debug("could not delete a streamed message: %s", exc)
        del self.message_ids[len(pieces) :]
        return list(self.message_ids)


async def send_plain_reply(
    bot: Bot, target: Target, text: str, reply_markup: InlineKeyboardMarkup | None = None
) -> int:
    """A one-message plain-text answer (commands, refusals); cut to fit if need be."""
    pieces = plain_pieces(text) or [EMPTY_REPLY]
    shown = pieces[0] if len(pieces) == 1 else pieces[0].rstrip()[:-2] + " …"
    msg = await send_text(bot, target, shown, reply_markup)
    return msg.message_id


__all__ = ["EditPacer", "ReplyStream", "Target", "send_plain_reply", "typing"]
