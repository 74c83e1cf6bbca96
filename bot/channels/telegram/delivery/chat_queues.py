"""Updates queued per chat, so one busy chat never stalls the others.

`telegram.concurrent_updates` bounds how many updates are processed at once (N global
slots). Turns of one conversation run one after the other, so if each waiting update
held a slot, one user sending 100 messages quickly would fill all N of them with updates
waiting for their own chat, and every other chat would wait too. Here an update first
waits, holding nothing, in a FIFO queue of its chat; only at the head of that queue does
it take a global slot. So:

- one chat's updates are processed one at a time, exactly in arrival order (this is the
  bot's only per-conversation ordering: handlers do not order turns themselves);
- different chats run in parallel, up to N at once, whatever one chat has queued;
- updates without a chat (none with the update types the bot asks for) take a slot
  straight away.

The chat key is the chat id plus, in a forum, the topic (`message_thread_id`), as
`bot.channels.telegram.sessions.Place` maps chats to conversations: one queue per conversation.

python-telegram-bot's `BaseUpdateProcessor.process_update` (final) takes the slot before
calling `do_process_update`, so the per-chat wait has to come before it: every update of
the bot comes through `process_in_order` (`bot.channels.telegram.delivery.inflight.Inflight` calls it).
An update handed to `process_update` directly, as the Application's own update fetcher
would, is still kept in its chat's order, but waits holding its slot.

While an update waits in its queue it is not durable (`bot.channels.telegram.delivery.inflight`): it is
acknowledged to Telegram only once its turn stored it.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections import deque
from collections.abc import AsyncIterator, Awaitable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from telegram import Update
from telegram.ext import BaseUpdateProcessor

from bot.channels.telegram.sessions import Place

log = logging.getLogger(__name__)

ChatKey = tuple[int, int | None]  # (chat id, forum topic id or None)


def chat_key(update: object) -> ChatKey | None:
    """The queue `update` waits in; None for an update that belongs to no chat."""
    if not isinstance(update, Update):
        return None
    message = update.effective_message
    if message is not None:
        place = Place.of(message)
        return place.chat_id, place.thread_id
    chat = update.effective_chat
    return (chat.id, None) if chat is not None else None


@dataclass(eq=False)
class _Waiter:
    update: object
    turn: asyncio.Future[None] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )


class ChatQueueProcessor(BaseUpdateProcessor):
    """Per-chat FIFO queues in front of python-telegram-bot's `max_concurrent_updates`
    slots; hand it to `ApplicationBuilder.concurrent_updates`."""

    def __init__(self, max_concurrent_updates: int) -> None:
        super().__init__(max_concurrent_updates)
        self._queues: dict[ChatKey, deque[_Waiter]] = {}
        self._queued = 0  # updates in all queues (heads included)
        self._awaiting_slot = 0

    @property
    def awaiting_slot(self) -> int:
        """Updates free to run (first of their chat) that wait for a global slot."""
        return self._awaiting_slot

    @property
    def waiting(self) -> int:
        """Updates queued behind their chat's current one (holding no slot)."""
        # Counted, not summed: the polling loop and every webhook POST ask.
        return self._queued - len(self._queues)

    async def process_in_order(self, update: object, coroutine: Awaitable[Any]) -> None:
        """Await `coroutine` (the processing of `update`) once every earlier update of
        its chat is done, in one of the global slots. Cancelled while still waiting,
        `coroutine` is closed unstarted."""
        key = chat_key(update)
        try:
            if key is None:
                await self._in_slot(update, coroutine)
                return
            async with self._turn(key, update):
                await self._in_slot(update, coroutine)
        except asyncio.CancelledError:
            if (
                inspect.iscoroutine(coroutine)
                and inspect.getcoroutinestate(coroutine) == inspect.CORO_CREATED
            ):
                coroutine.close()  # never started: no "was never awaited" warning
            raise

    async def _in_slot(self, update: object, coroutine: Awaitable[Any]) -> None:
        """`process_update` (which waits for a slot), counted in `awaiting_slot` until
        the slot is taken."""
        waiting = True

        async def started() -> None:
            nonlocal waiting
            waiting = False
            self._awaiting_slot -= 1
            await coroutine

        self._awaiting_slot += 1
        runner = started()
        try:
            await self.process_update(update, runner)
        finally:
            if waiting:  # cancelled (or failed) before it got its slot
                self._awaiting_slot -= 1
                runner.close()

    async def do_process_update(self, update: object, coroutine: Awaitable[Any]) -> None:
        key = chat_key(update)
        if key is None or self._is_head(key, update):
            await coroutine  # `process_in_order` already gave it its chat's turn
            return
        async with self._turn(key, update):  # came through `process_update` directly
            await coroutine

    async def initialize(self) -> None:
        """Nothing to allocate: queues come and go with their chats."""

    async def shutdown(self) -> None:
        # By now the channel has drained or cancelled every update (Inflight.drain).
        if self._queues:
            log.warning("%d chat queue(s) still held updates at shutdown", len(self._queues))

    def _is_head(self, key: ChatKey, update: object) -> bool:
        queue = self._queues.get(key)
        return queue is not None and queue[0].update is update and queue[0].turn.done()

    @asynccontextmanager
    async def _turn(self, key: ChatKey, update: object) -> AsyncIterator[None]:
        """Wait for the head of `key`'s queue; leaving (however) hands it to the next."""
        queue = self._queues.setdefault(key, deque())
        waiter = _Waiter(update)
        queue.append(waiter)
        self._queued += 1
        if len(queue) == 1:
            waiter.turn.set_result(None)
        try:
            await waiter.turn
            yield
        finally:
            was_head = queue[0] is waiter
            queue.remove(waiter)
            self._queued -= 1
            if not queue:
                del self._queues[key]
            elif was_head and not queue[0].turn.done():
                queue[0].turn.set_result(None)
