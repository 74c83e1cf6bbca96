"""Answers owed to a chat, delivered later, in order, within Telegram's rules.

An answer is stored before it is sent (`bot.conversation.service`), so when sending it fails the answer
is not lost, only owed. A handler does not wait for Telegram to take it: a flood-control
wait (`RetryAfter`) can last minutes, and a handler holding its chat that long would
keep that chat's next updates undurable (`bot.channels.telegram.delivery.chat_queues`) and a slot of
`telegram.concurrent_updates` busy. The handler hands the delivery to the outbox and
returns; the outbox sends it in the background:

- per chat (Telegram's flood control is per chat; forum topics share it), one task
  delivers the chat's owed answers in the order they were owed;
- after a `RetryAfter`, nothing is sent to that chat before `retry_after` seconds have
  passed (`held`); the delivery is then tried again, as often as Telegram asks to wait;
- after a 5xx or a lost connection (past `bot.channels.telegram.delivery.sent`'s own retries) it is
  tried again after a backoff growing to `MAX_BACKOFF_S`;
- a 400/403 (the chat is gone, the bot was blocked) or a timeout (which may have
  delivered it) ends the attempt: logged, and left to the next start's mark, if any.

While a chat owes answers (or is held), a newer answer in that chat queues behind them
(`owes`), so answers never overtake each other. The outbox lives in memory: at a stop
its deliveries are dropped, and the `undelivered` mark the handler set before handing
over (`bot.channels.telegram.delivery.handled`) makes the next start send the stored answer
(`bot.channels.telegram.delivery.resume`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from telegram.error import BadRequest, Forbidden, NetworkError, RetryAfter, TimedOut

from bot.channels.telegram.delivery.sent import retry_after_seconds
from bot.channels.telegram.render.replies import ReplyStream

log = logging.getLogger(__name__)

FIRST_BACKOFF_S = 2.0
MAX_BACKOFF_S = 300.0

Deliver = Callable[[], Awaitable[None]]


@dataclass
class _Owed:
    deliver: Deliver
    what: str


class Outbox:
    """Owed deliveries per chat (see the module docstring)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._queues: dict[int, deque[_Owed]] = {}
        self._until: dict[int, float] = {}
        self._tasks: dict[int, asyncio.Task[None]] = {}

    def held(self, chat_id: int) -> float:
        """Seconds before Telegram takes anything in `chat_id` again (0: now)."""
        until = self._until.get(chat_id)
        if until is None:
            return 0.0
        left = until - self._clock()
        if left <= 0:
            self._until.pop(chat_id, None)
            return 0.0
        return left

    def hold(self, chat_id: int, seconds: float) -> None:
        """Telegram asked to wait `seconds` before the next call in `chat_id`."""
        until = self._clock() + seconds
        self._until[chat_id] = max(until, self._until.get(chat_id, until))

    def owes(self, chat_id: int) -> bool:
        """An answer is owed in `chat_id`, or it is held: a new one must queue behind."""
        return bool(self._queues.get(chat_id)) or self.held(chat_id) > 0

    def owe(
        self, chat_id: int, deliver: Deliver, *, what: str, failure: BaseException | None = None
    ) -> None:
        """Deliver later, after what is already owed in `chat_id`; `failure` is what
        stopped the first attempt (a `RetryAfter` holds the chat for its wait)."""
        if isinstance(failure, RetryAfter):
            self.hold(chat_id, retry_after_seconds(failure))
        elif failure is not None:  # past delivery's own quick retries: not at once
            self.hold(chat_id, FIRST_BACKOFF_S)
        self._queues.setdefault(chat_id, deque()).append(_Owed(deliver, what))
        log.info(
            "%s in chat %s is owed: delivered in %.0f s at the earliest",
            what,
            chat_id,
            self.held(chat_id),
        )
        if chat_id not in self._tasks:
            self._tasks[chat_id] = asyncio.create_task(self._run(chat_id), name=f"outbox:{chat_id}")

    async def _run(self, chat_id: int) -> None:
        queue = self._queues[chat_id]
        backoff = 2 * FIRST_BACKOFF_S
        try:
            while queue:
                if (wait := self.held(chat_id)) > 0:
                    await asyncio.sleep(wait)
                owed = queue[0]
                try:
                    await owed.deliver()
                except RetryAfter as exc:
                    self.hold(chat_id, retry_after_seconds(exc))
                    log.info(
                        "%s in chat %s: flood control again, next try in %.0f s",
                        owed.what,
                        chat_id,
                        retry_after_seconds(exc),
                    )
                    continue
                except (BadRequest, Forbidden, TimedOut) as exc:
                    log.warning("%s in chat %s could not be delivered: %s", owed.what, chat_id, exc)
                except NetworkError as exc:
                    log.info(
                        "%s in chat %s: %s; next try in %.0f s", owed.what, chat_id, exc, backoff
                    )
                    self.hold(chat_id, backoff)
                    backoff = min(MAX_BACKOFF_S, backoff * 2)
                    continue
                except Exception:
                    log.exception("%s in chat %s failed", owed.what, chat_id)
                queue.popleft()
                backoff = 2 * FIRST_BACKOFF_S
        finally:
            # No await between the last `while queue` and here: an `owe` cannot slip in
            # between and find a task that is about to end.
            if not queue:
                self._queues.pop(chat_id, None)
            self._tasks.pop(chat_id, None)

    @property
    def pending(self) -> int:
        """Deliveries owed, in all chats."""
        return sum(len(q) for q in self._queues.values())

    async def close(self) -> None:
        """Drop what is still owed (the next start sends what is marked undelivered)."""
        tasks = list(self._tasks.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self.pending:
            log.info("stopping with %d answer(s) owed: the next start sends them", self.pending)
        self._queues.clear()


async def finish_or_owe(
    outbox: Outbox,
    stream: ReplyStream,
    answer: str,
    *,
    what: str,
    quote: int | None = None,
    mark: Callable[[str], Awaitable[None]] | None = None,
    late: Callable[[], Awaitable[None]] | None = None,
    dropped: Callable[[], Awaitable[None]] | None = None,
) -> bool:
    """Show `answer` through `stream` now; True once shown. When Telegram cannot take it
    now (flood control, 5xx or no connection past the retries), or the chat already owes
    earlier answers, `mark(answer)` records it as owed (awaited before handing over, so a stop
    loses nothing), and the outbox shows it later, quoting message `quote` if nothing of
    it is in the chat yet, then runs `late`. A 400 or a timeout (which may have
    delivered it) is raised as before, after `dropped()`: neither is worth another try,
    so the answer's row must not make the next start send it again."""
    chat_id = stream.target.chat_id

    async def deliver() -> None:
        await stream.finish(answer)
        if late is not None:
            await late()

    failure: BaseException | None = None
    if not outbox.owes(chat_id):
        try:
            await stream.finish(answer)
            return True
        except (BadRequest, TimedOut):
            if dropped is not None:
                await dropped()
            raise
        except (RetryAfter, NetworkError) as exc:
            failure = exc
    if mark is not None:
        await mark(answer)
    if quote is not None and not stream.message_ids:
        stream.target = dataclasses.replace(stream.target, reply_to=quote)
    outbox.owe(chat_id, deliver, what=what, failure=failure)
    return False
