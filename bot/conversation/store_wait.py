"""Waiting out a memory store that is down, instead of dropping the message.

A message is acknowledged to Telegram only once it is stored (`bot.channels.telegram.delivery.inflight`),
and an update not acknowledged is sent again. So when the database cannot be reached
(PostgreSQL stopped or restarting, SQLite's file locked or unwritable) a turn does not
give up after the reconnect retries of `memory.storage.db`: each of its memory steps (the
session's lookup, the turn lock, preparing it, appending the message, assembling the
context, appending the answer) is tried again with backoff (`FIRST_PAUSE_S` doubling up
to `MAX_PAUSE_S`) while the failure is one that waiting may cure (`transient`). The
channel says once that the answer is delayed (`on_wait`), and the update stays
unacknowledged until the message is stored; later messages of the chat wait behind it,
so their order is kept.

The bound, `HOLD_S` (10 minutes from the first failure of one update), is what an
update may wait: long enough for a restart, a failover or a PostgreSQL upgrade, short
enough that a conversation is not left hanging for good (and well inside the 24 hours
Telegram keeps an unacknowledged update). Past it the step's failure is raised as
before: a message not stored is answered "NOT saved, please send it again" and
acknowledged; an answer not stored is not shown (`bot.conversation.turns`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError

from memory.storage.db import CommitUncertain

log = logging.getLogger(__name__)

T = TypeVar("T")

HOLD_S = 600.0  # see the module docstring
FIRST_PAUSE_S = 0.5
MAX_PAUSE_S = 5.0

# What a user reads, once, while their message waits (said by the channel).
DELAYED = (
    "My memory store can't be reached right now, so my answer is delayed: I'm holding "
    "your message and will answer as soon as it's back (I keep trying for up to 10 minutes)."
)
# The same, when the answer was shown (streamed) before its save failed.
NOT_SAVED_YET = (
    "My memory store can't be reached right now, so the answer above is not saved yet: "
    "I keep trying for up to 10 minutes."
)


def transient(exc: BaseException) -> bool:
    """`exc` (or what caused it) says the database could not be reached or written for
    now (refused or lost connection, a locked or read-only SQLite file, a full disk):
    a failure waiting may cure, not a statement that is wrong."""
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        if isinstance(cur, OperationalError | InterfaceError | CommitUncertain):
            return True
        if isinstance(cur, DBAPIError) and cur.connection_invalidated:
            return True
        if isinstance(cur, ConnectionError | TimeoutError):
            return True
        cur = cur.__cause__ or cur.__context__
    return False


class StoreWait:
    """One update's wait for the store: a deadline shared by every step of its turn,
    counted from the first failure, and the notice said once. `hold_s=0` never waits
    (a failure is raised at once, as callers without a channel want)."""

    def __init__(
        self,
        on_wait: Callable[[], Awaitable[None]] | None = None,
        *,
        hold_s: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.hold_s = HOLD_S if hold_s is None else hold_s
        self._on_wait = on_wait
        self._clock = clock
        self._since: float | None = None
        self._pause = FIRST_PAUSE_S
        self.waited = False  # the store failed and this update waited for it

    async def pause(self, exc: BaseException, what: str) -> bool:
        """After `what` failed with `exc`: True once it is worth trying again (after a
        pause, the notice said on the first one); False when the failure is not one
        waiting cures, or the bound has passed."""
        if not transient(exc):
            return False
        now = self._clock()
        if self._since is None:
            self._since = now
        left = self._since + self.hold_s - now
        if left <= 0:
            if self.waited:
                log.error("%s: the memory store stayed unreachable for %.0f s", what, self.hold_s)
            return False
        if not self.waited:
            self.waited = True
            log.warning(
                "%s: the memory store is unreachable (%s); holding the message and "
                "trying again for up to %.0f s",
                what,
                type(exc).__name__,
                self.hold_s,
            )
            if self._on_wait is not None:
                await self._on_wait()
        await asyncio.sleep(min(self._pause, left))
        self._pause = min(self._pause * 2, MAX_PAUSE_S)
        return True

    async def run(self, step: Callable[[], Awaitable[T]], what: str) -> T:
        """`await step()`, again after each pause while the store is down."""
        while True:
            try:
                return await step()
            except Exception as exc:
                if not await self.pause(exc, what):
                    raise


def no_wait() -> StoreWait:
    """A wait that raises the first failure (the behaviour without a channel)."""
    return StoreWait(hold_s=0)
