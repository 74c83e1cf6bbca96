"""Long polling that acknowledges an update only once it is durable.

Telegram confirms every update below the `offset` of a getUpdates call and never sends
those again. python-telegram-bot's Updater advances the offset as soon as it *fetched*
updates, so a crash before the handler stored the message lost it. Here the offset sent
is the lowest update id not yet durable (see `bot.channels.telegram.delivery.inflight`), or one past the
highest fetched when all are: a crash at any moment loses nothing, and what Telegram
sends again is recognised as handled (`HandledUpdates`) and skipped.

The cost: Telegram answers a getUpdates at once while any update at or above its offset
waits, so while an update is not durable yet (queued behind its chat's running turn, see
`bot.channels.telegram.delivery.chat_queues`, or waiting for one of the `telegram.concurrent_updates`
slots) the loop cannot long-poll. It then polls with timeout 0, waking when some update
becomes durable (but at most once per `PENDING_GAP_S`) or after `PENDING_POLL_S`: new
updates wait at most that long. Telegram's `limit` (100) bounds how far past the oldest
undurable update one poll can see, so one chat sending 100 messages faster than they are
answered would hide every other chat's; before that, updates waiting behind their chat
are parked in the database (`bot.channels.telegram.delivery.inbox`), which makes them durable.

Each poll therefore gets again, up to 100 at a time, every update still waiting. Parsing
them all again (`Update.de_json`) was most of the bot's CPU under load, so the loop asks
for the raw JSON (`Bot.do_api_request`) and parses only ids it has not accepted before;
the rest are in flight here, or durable and waiting to be acknowledged. And while a
quarter of `telegram.concurrent_updates` or more updates wait for a slot, the loop does
not poll (for up to `BACKLOG_WAIT_S`): slots take updates in arrival order, so anything
fetched then would run after those anyway, and polling sooner would only decode the same
waiting updates again (at 200 busy chats, ~9% of the bot's CPU went to that).

Errors, as python-telegram-bot's own loop treats them: RetryAfter waits what Telegram
asks (+0.5 s); a timeout retries at once; other errors (network, 5xx, Conflict with
another poller or a webhook) back off from 1 s by x1.5 up to 30 s; an invalid token
stops the loop. A clean stop lets in-flight handlers finish (up to a timeout) and sends
one last getUpdates that acknowledges what became durable.
"""

from __future__ import annotations

import asyncio
import logging
import warnings
from collections.abc import Sequence
from typing import Any

from telegram import Update
from telegram.error import InvalidToken, RetryAfter, TelegramError, TimedOut
from telegram.ext import Application, ExtBot
from telegram.warnings import PTBUserWarning

from bot.channels.telegram.delivery.inflight import Inflight
from bot.channels.telegram.delivery.sent import retry_after_seconds, with_retry

log = logging.getLogger(__name__)

PENDING_POLL_S = 0.5
# Under load some update becomes durable every few ms; polling at each would fetch the
# same waiting updates again and again. At most one poll per this while any wait.
PENDING_GAP_S = 0.05
LIMIT = 100  # Telegram's maximum per getUpdates
BACKOFF_MAX_S = 30.0
# The longest the loop holds off while updates wait for a slot (see the module doc).
BACKLOG_WAIT_S = 2.0
PRUNE_EVERY_S = 3600.0
# Added to a long poll's `timeout` to give its answer time to arrive: what Bot.get_updates
# adds, python-telegram-bot's default read timeout of the getUpdates connection pool
# (bot.channels.telegram.channel keeps that default).
READ_MARGIN_S = 5.0


class Poller:
    def __init__(
        self,
        app: Application,
        inflight: Inflight,
        *,
        timeout: int,
        allowed_updates: Sequence[str],
        pending_poll_s: float = PENDING_POLL_S,
    ) -> None:
        self.app = app
        self.inflight = inflight
        self.timeout = timeout
        self.allowed_updates = list(allowed_updates)
        self.pending_poll_s = pending_poll_s
        self._highest: int | None = None  # highest update id accepted by this process
        self._task: asyncio.Task[None] | None = None
        self._stopping = False
        self._next_prune = 0.0
        self._last_poll = 0.0
        # do_api_request("getUpdates") warns that Bot.get_updates exists; we want the raw
        # answer. Set here, not at import: a warnings.catch_warnings() block around the
        # import (pytest's) would drop it on exit. Adding it again replaces it.
        warnings.filterwarnings(
            "ignore", message=r"Please use 'Bot\.getUpdates'", category=PTBUserWarning
        )

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    def offset(self) -> int | None:
        """What the next getUpdates acknowledges: every update below it is durable."""
        undurable = self.inflight.undurable()
        if undurable:
            return min(undurable)
        return None if self._highest is None else self._highest + 1

    async def start(self) -> None:
        # A webhook still set makes getUpdates fail with Conflict (as the Updater does).
        await with_retry(lambda: self.app.bot.delete_webhook(), what="deleteWebhook")
        self._task = asyncio.create_task(self._run(), name="telegram-polling")

    async def stop(self, drain_s: float) -> None:
        """Stop polling, let handlers finish for up to `drain_s`, acknowledge the rest."""
        if self._task is not None:
            # The flag as well as the cancel: a cancel that lands inside the HTTP client's
            # request can come back as a NetworkError, which `_run` would retry forever.
            self._stopping = True
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        await self.inflight.drain(drain_s)
        offset = self.offset()
        if offset is None:
            return
        try:
            await self.app.bot.get_updates(
                offset=offset, timeout=0, limit=1, allowed_updates=self.allowed_updates
            )
        except TelegramError as exc:  # they come again to the next process: handled then
            log.warning("could not acknowledge the last updates at shutdown: %s", exc)

    async def _run(self) -> None:
        delay = 0.0
        while not self._stopping:
            try:
                await self._poll_once()
                delay = 0.0
                continue
            except RetryAfter as exc:
                delay = retry_after_seconds(exc) + 0.5
                log.warning("getUpdates: flood control, retrying in %.1f s", delay)
            except TimedOut:
                delay = 0.0
            except InvalidToken:
                log.error("getUpdates: the bot token was rejected; polling stopped")
                raise
            except TelegramError as exc:
                delay = 1.0 if delay == 0 else min(BACKOFF_MAX_S, delay * 1.5)
                log.warning("getUpdates failed (%s); retrying in %.1f s", exc, delay)
            except Exception:
                delay = 1.0 if delay == 0 else min(BACKOFF_MAX_S, delay * 1.5)
                log.exception("getUpdates answer not understood; retrying in %.1f s", delay)
            await asyncio.sleep(delay)

    async def _poll_once(self) -> None:
        await self._maybe_prune()
        loop = asyncio.get_running_loop()
        if self.inflight.undurable():
            await self.inflight.wait_progress(self.pending_poll_s)
            gap = self._last_poll + PENDING_GAP_S - loop.time()
            if gap > 0:
                await asyncio.sleep(gap)
            await self._while_backlogged(loop.time() + BACKLOG_WAIT_S)
        self._last_poll = loop.time()
        await self.inflight.park_if_backlogged()  # see bot.channels.telegram.delivery.inbox
        # While an update waits undurable, Telegram would answer a long poll at once.
        timeout = 0 if self.inflight.undurable() else self.timeout
        offset = self.offset()
        raw = await self._get_updates(offset, timeout)
        self._accept(raw, offset)

    async def _while_backlogged(self, until: float) -> None:
        processor = self.inflight.processor
        loop = asyncio.get_running_loop()
        enough = max(1, processor.max_concurrent_updates // 4)
        while processor.awaiting_slot >= enough and loop.time() < until:
            await self.inflight.wait_progress(until - loop.time())

    async def _get_updates(self, offset: int | None, poll_s: int) -> list[Any]:
        """getUpdates, answered as Telegram sent it (a list of JSON objects)."""
        params: dict[str, Any] = {
            "timeout": poll_s,
            "limit": LIMIT,
            "allowed_updates": self.allowed_updates,
        }
        if offset is not None:
            params["offset"] = offset
        result = await self.app.bot.do_api_request(
            "getUpdates", api_kwargs=params, read_timeout=READ_MARGIN_S + poll_s
        )
        if not isinstance(result, list):
            raise TypeError(f"getUpdates answered {type(result).__name__}, not a list")
        return result

    def _accept(self, raw: Sequence[Any], offset: int | None) -> None:
        for entry in raw:
            uid = entry.get("update_id") if isinstance(entry, dict) else None
            if not isinstance(uid, int):
                raise ValueError(
                    f"getUpdates answered an entry without an update_id: {entry!r:.200}"
                )
            if offset is not None and uid < offset and not self.inflight.undurable():
                # Telegram numbers afresh after a week without updates.
                log.info("update ids restarted at %s", uid)
                self._highest = None
            if self._highest is not None and uid <= self._highest:
                continue  # fetched before: in flight, or durable and not acknowledged yet
            self.inflight.accept(self._parse(entry))
            self._highest = uid

    def _parse(self, entry: dict[str, Any]) -> Update:
        bot = self.app.bot
        update = Update.de_json(entry, bot)
        if isinstance(bot, ExtBot):  # as ExtBot.get_updates does (arbitrary callback data)
            bot.insert_callback_data(update)
        return update

    async def _maybe_prune(self) -> None:
        now = asyncio.get_running_loop().time()
        if now >= self._next_prune:
            self._next_prune = now + PRUNE_EVERY_S
            await prune_handled(self.inflight)


async def prune_handled(inflight: Inflight) -> None:
    """Forget old handled update ids (housekeeping: a failure waits for the next time)."""
    if inflight.handled is None:
        return
    try:
        gone = await inflight.handled.prune()
    except Exception as exc:
        log.warning("could not prune handled update ids: %s", exc)
        return
    if gone:
        log.info("forgot %d handled update id(s) older than two days", gone)
