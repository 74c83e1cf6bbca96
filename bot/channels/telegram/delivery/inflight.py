"""Updates being handled, and when each becomes *durable*: safe to acknowledge to
Telegram, because a crash from then on loses nothing.

An update is durable once the handler says so (`UpdateReceipt`): a text message when
its append committed (the conversation service calls `UpdateReceipt.stored`), a command once it ran and
was recorded; and in any case when its handling ended, however it ended (a `finally`:
a handler that raised must not pin the acknowledgement forever). Only cancellation at
shutdown leaves an update undurable, so Telegram sends it again to the next process.
A turn waiting for a database that is away (`bot.conversation.store_wait`) has not ended: its update
stays undurable, unacknowledged, until its message is stored (or the wait's bound passes).

Redeliveries: `UpdateReceipt.seen_before()` asks `HandledUpdates` whether a previous
process handled the update already; `write` records it in the user message's own
transaction, and refuses (`DuplicateDelivery`, which rolls that append back) if another
process or replica recorded it before. For text messages the read is skipped once the
provider's appends have proven atomic (that refusal is then the guard).

Both ways of receiving updates go through `Inflight.accept`: the polling loop
(`bot.channels.telegram.delivery.polling`) and the webhook, whose `WebhookQueue` answers Telegram's POST
only once the update is durable (a failure or a timeout answers an error, and Telegram
sends the update again).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine
from telegram import Update
from telegram.ext import Application

from bot.channels.telegram.delivery.chat_queues import ChatQueueProcessor
from bot.channels.telegram.delivery.handled import HandledUpdates, ReplyTo
from bot.channels.telegram.delivery.inbox import PARK_AT, Inbox, instance_id
from bot.conversation.service import AlreadyStored
from bot.conversation.store_wait import transient
from memory.contract.types import Session

log = logging.getLogger(__name__)

WEBHOOK_WAIT_S = 50.0  # answer Telegram's POST before its own timeout (about a minute)


class DuplicateDelivery(AlreadyStored):
    """The update was recorded as handled by someone else while we handled it too."""


class UpdateReceipt:
    """One update in flight: what its handler reports (implements `bot.conversation.service.Receipt`)."""

    def __init__(self, update: Update, inflight: Inflight) -> None:
        self.update = update
        self.update_id = update.update_id
        self._inflight = inflight
        self.parked = False  # see park()
        self.durable: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.recorded = False
        self.duplicate = False
        # Set by a text message's handler: the record then marks its answer as due.
        self.reply_to: ReplyTo | None = None
        self._answer_due = False

    async def seen_before(self, *, turn: bool = False) -> bool:
        """Handled already (by an earlier process, or a replica): skip it.

        `turn`: a text message, whose record `write` puts in its user message's own
        transaction. Once this process's appends have proven atomic, that insert
        refuses a redelivery by itself (`DuplicateDelivery` rolls the append back,
        nothing is stored or answered), so this read is skipped: it cost a
        database round trip on every update to guard against a rare event."""
        store = self._inflight.handled
        if store is None or (turn and self._inflight.turns_atomic):
            return False
        try:
            seen = await store.seen(self.update_id)
        except Exception as exc:  # the turn then reports the database itself
            log.warning("could not check whether update %s was handled: %s", self.update_id, exc)
            return False
        if seen:
            log.info("update %s was handled before (redelivered): skipped", self.update_id)
            self.recorded = True
        return seen

    async def write(self, conn: AsyncConnection, *, session: Session) -> None:
        store = self._inflight.handled
        if store is not None and not await store.insert(
            conn,
            self.update_id,
            session_id=session.id,
            user_id=session.user_id,
            reply_to=self.reply_to,
        ):
            self.duplicate = True
            raise DuplicateDelivery(f"update {self.update_id} was handled elsewhere")
        self.recorded = True
        self._answer_due = store is not None and self.reply_to is not None

    def answered(self) -> None:
        """The answer was sent: no restart owes it any more."""
        store = self._inflight.handled
        if store is not None and self._answer_due:
            store.answered(self.update_id)
            self._answer_due = False

    async def undelivered(self, answer: str) -> None:
        """The answer is stored but Telegram did not take it: marked at once (not in
        the batch), with its text, so the next start sends it (`bot.channels.telegram.delivery.resume`)."""
        store = self._inflight.handled
        if store is None or not self._answer_due:
            return
        try:
            await store.undelivered(self.update_id, answer)
        except Exception as exc:  # the answer stays in the history only, as before
            log.warning(
                "could not mark the answer to update %s as undelivered: %s", self.update_id, exc
            )

    async def gave_up(self) -> None:
        """The turn ended without an answer to give later (the user was told why):
        a restart must not answer this message."""
        await self._settle_now()

    async def delivered(self) -> None:
        """The answer marked undelivered was sent after all (`bot.channels.telegram.delivery.outbox`):
        cleared at once, not in the batch, since the mark alone makes a restart send."""
        await self._settle_now()

    async def _settle_now(self) -> None:
        store = self._inflight.handled
        if store is None or not self._answer_due:
            return
        try:
            await store.settle([self.update_id])
            self._answer_due = False
        except Exception as exc:  # at worst a restart answers it after all
            log.warning("could not mark update %s as answered: %s", self.update_id, exc)

    async def stored(self, atomic: bool) -> None:
        # the provider's appends either run the hook or not; the last one tells
        self._inflight.turns_atomic = atomic
        if not atomic:  # a provider outside memory.storage.history: the record comes right after
            await self.record()
        self.mark_durable()

    async def record(self) -> None:
        """Record the update as handled in its own transaction (commands); durable then."""
        store = self._inflight.handled
        if store is not None and not self.recorded:
            try:
                await store.record(self.update_id)
            except Exception as exc:  # at worst the update is handled again after a crash
                log.warning("could not record update %s as handled: %s", self.update_id, exc)
        self.recorded = True
        self.mark_durable()

    def park(self) -> None:
        """In the inbox (`bot.channels.telegram.delivery.inbox`): durable until handled."""
        self.parked = True
        self.mark_durable()

    def mark_durable(self) -> None:
        if not self.durable.done():
            self.durable.set_result(None)
            self._inflight.notify()


class Inflight:
    """The updates this process is handling, each through `app`'s handlers, queued per
    chat by its `ChatQueueProcessor` (`bot.channels.telegram.delivery.chat_queues`). Without an `engine`
    nothing is recorded, so redeliveries are not recognised."""

    def __init__(self, app: Application, engine: AsyncEngine | None = None) -> None:
        if not isinstance(app.update_processor, ChatQueueProcessor):
            raise TypeError(
                "the Application needs a ChatQueueProcessor "
                "(ApplicationBuilder.concurrent_updates(ChatQueueProcessor(n)))"
            )
        self.app = app
        self.processor: ChatQueueProcessor = app.update_processor
        self.engine = engine
        self.handled: HandledUpdates | None = None
        self.inbox: Inbox | None = None
        # True once a text update's record was written with its user message (see
        # `UpdateReceipt.seen_before`); False again after any append that was not.
        self.turns_atomic = False
        self._receipts: dict[int, UpdateReceipt] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._progress = asyncio.Event()

    def bind(self, bot_id: int) -> None:
        """Known once the bot has its identity (getMe): update ids are numbered per bot."""
        if self.engine is not None:
            self.handled = HandledUpdates(self.engine, bot_id)
            self.inbox = Inbox(self.engine, bot_id, instance_id())

    def receipt(self, update: Update) -> UpdateReceipt | None:
        """The receipt of `update` while it is handled (None if it came another way)."""
        return self._receipts.get(update.update_id)

    def accept(self, update: Update) -> asyncio.Future[None]:
        """Start handling `update` (unless it is in flight already: a webhook retry);
        returns the future that is done once it is durable."""
        known = self._receipts.get(update.update_id)
        if known is not None:
            return known.durable
        receipt = self._receipts[update.update_id] = UpdateReceipt(update, self)
        task = asyncio.create_task(
            self._handle(update, receipt), name=f"telegram-update:{update.update_id}"
        )
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return receipt.durable

    async def _handle(self, update: Update, receipt: UpdateReceipt) -> None:
        cancelled = False
        try:
            await self.processor.process_in_order(update, self.app.process_update(update))
        except asyncio.CancelledError:
            cancelled = True  # stopped before it was durable: Telegram must send it again
            raise
        except Exception:  # process_update hands handler errors to the error handler
            log.exception("update %s could not be processed", update.update_id)
        finally:
            if not cancelled:
                receipt.mark_durable()
                del self._receipts[update.update_id]
                self.notify()
                if receipt.parked:
                    await self._unpark(receipt.update_id)

    async def _unpark(self, update_id: int) -> None:
        assert self.inbox is not None
        try:
            await self.inbox.remove(update_id)
        except Exception as exc:  # handled again at the next start, then recognised
            log.warning("could not remove update %s from the inbox: %s", update_id, exc)

    async def park_if_backlogged(self) -> int:
        """Once `PARK_AT` updates wait behind their chat's turn, park every update not
        durable yet (`bot.channels.telegram.delivery.inbox`); returns how many were parked."""
        if self.inbox is None or self.processor.waiting < PARK_AT:
            return 0
        receipts = [r for r in self._receipts.values() if not r.durable.done()]
        try:
            await self.inbox.park([r.update for r in receipts])
        except Exception as exc:  # nothing lost: they stay undurable, as before
            log.warning("could not park %d waiting update(s): %s", len(receipts), exc)
            return 0
        for receipt in receipts:
            receipt.park()
        log.info("parked %d update(s) waiting behind their chat's turn", len(receipts))
        return len(receipts)

    async def replay(self) -> int:
        """Handle the parked updates nobody holds (a previous run's, or those of a
        process gone since: `bot.channels.telegram.delivery.inbox`), oldest first. Returns how many."""
        if self.inbox is None:
            return 0
        try:
            claimed = await self.inbox.claim()
        except Exception as exc:  # they stay parked for the next try
            # Every 5 s while the database is away (bot.conversation.store_wait): not an error each time.
            log.log(
                logging.WARNING if transient(exc) else logging.ERROR,
                "could not read the parked updates: %s",
                exc,
            )
            return 0
        taken = 0
        for update_id, payload in claimed:
            try:
                update = Update.de_json(json.loads(payload), self.app.bot)
            except Exception as exc:  # never blocks a start; kept for a human, once
                log.error(
                    "parked update %s could not be read (%s, %d characters): marked unreadable",
                    update_id,
                    type(exc).__name__,
                    len(payload),
                )
                await self._set_unreadable(update_id)
                continue
            self.accept(update)
            self._receipts[update.update_id].park()
            taken += 1
        if taken:
            log.info("handling %d parked update(s) nobody else holds", taken)
        return taken

    async def _set_unreadable(self, update_id: int) -> None:
        assert self.inbox is not None
        try:
            await self.inbox.set_unreadable(update_id)
        except Exception as exc:  # read again (and reported again) at the next claim
            log.warning("could not mark parked update %s unreadable: %s", update_id, exc)

    async def tend_parked(self) -> None:
        """Every `SETTLE_EVERY_S`: renew the lease of the rows this process holds, and
        take those whose owner has gone (`bot.channels.telegram.delivery.inbox`)."""
        if self.inbox is None:
            return
        if any(r.parked for r in self._receipts.values()):
            try:
                await self.inbox.renew()
            except Exception as exc:  # LEASE leaves room for many failed renewals
                log.warning("could not renew the lease of the parked updates: %s", exc)
        await self.replay()

    async def release_parked(self) -> None:
        """At a clean stop, once drained: the next start takes what is left at once."""
        if self.inbox is None:
            return
        try:
            await self.inbox.release()
        except Exception as exc:  # taken once its lease lapses instead
            log.warning("could not release the parked updates: %s", exc)

    def undurable(self) -> list[int]:
        """Ids of accepted updates not durable yet (pinned for good if cancelled)."""
        return [uid for uid, r in self._receipts.items() if not r.durable.done()]

    @property
    def busy(self) -> int:
        return len(self._tasks)

    def notify(self) -> None:
        self._progress.set()
        self._progress = asyncio.Event()

    async def wait_progress(self, within_s: float) -> None:
        """Until some update becomes durable or finishes, or `within_s` seconds."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._progress.wait(), within_s)

    async def drain(self, within_s: float) -> int:
        """Let in-flight handlers finish for up to `within_s` seconds, then cancel the rest
        (they stay undurable). Returns how many were cancelled."""
        tasks = list(self._tasks)
        if not tasks:
            return 0
        _done, pending = await asyncio.wait(tasks, timeout=within_s)
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)
            log.warning(
                "%d update(s) still being handled at shutdown were cancelled: "
                "Telegram sends again those not stored yet, and the next start "
                "answers the stored ones",
                len(pending),
            )
        return len(pending)


class WebhookQueue(asyncio.Queue[Any]):
    """The Application's update queue, for webhook mode: python-telegram-bot's webhook
    handler answers 200 as soon as `put` returns, so `put` hands the update to
    `Inflight` and returns only once it is durable. Anything else (the Application's
    stop signal) is queued as usual."""

    inflight: Inflight | None = None

    async def put(self, item: Any) -> None:
        if not isinstance(item, Update) or self.inflight is None:
            await super().put(item)
            return
        durable = self.inflight.accept(item)
        # Telegram holds a few webhook connections at most: one flooding chat's updates,
        # each answered only once durable, would hold them all (bot.channels.telegram.delivery.inbox).
        # One loop turn first, so this handler (and any accepted in the same burst)
        # has taken its place in its chat's queue when the backlog is counted.
        await asyncio.sleep(0)
        await self.inflight.park_if_backlogged()
        # shield: a request the client gave up on must not cancel the handling itself
        await asyncio.wait_for(asyncio.shield(durable), WEBHOOK_WAIT_S)
