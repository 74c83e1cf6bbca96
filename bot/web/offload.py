"""The console's CPU work (templates, the summary graph's SVG, diffs) off the event loop.

The console shares its event loop with the bot (Telegram, `/healthz`, the SIGTERM
handler): a page drawn on the loop stalls all of them for as long as it takes, forever
if a drawing loop never ends (issue #32: a short conversation's graph did). Here each
piece of work runs in a thread of its own and is awaited at most `limit_s`; past that
the page answers `TooSlow` (the guard's 503) and the loop never waited.

Daemon threads, not an executor: a thread cannot be stopped, and a runaway one in
`concurrent.futures` would be joined at exit, holding up the shutdown. `workers` slots
bound how many run at once; a slot frees when its thread ends, not when its page gave
up, so runaway work cannot pile up threads, and pages then wait for a slot (within the
same limit) instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

WORKERS = 4
LIMIT_S = 10.0  # the heaviest page measured takes ~0.3 s (bench/RESULTS.md, issue 21)


class TooSlow(Exception):
    """The work did not finish (or start) within the time limit."""


class Offload:
    def __init__(self, workers: int = WORKERS, limit_s: float = LIMIT_S) -> None:
        self.limit_s = limit_s
        self._slots = asyncio.Semaphore(workers)

    async def run(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """`fn(*args, **kwargs)` in a daemon thread; its result or exception, or TooSlow."""
        loop = asyncio.get_running_loop()
        result: asyncio.Future[T] = loop.create_future()

        def finish(value: Any, error: BaseException | None) -> None:
            self._slots.release()
            if result.done():  # the page gave up on it
                return
            if error is None:
                result.set_result(value)
            else:
                result.set_exception(error)

        def work() -> None:
            value, error = None, None
            try:
                value = fn(*args, **kwargs)
            except BaseException as exc:  # handed to the awaiting page
                error = exc
            with contextlib.suppress(RuntimeError):  # the loop closed: nobody is waiting
                loop.call_soon_threadsafe(finish, value, error)

        try:
            async with asyncio.timeout(self.limit_s):
                await self._slots.acquire()
                try:
                    threading.Thread(target=work, name="console-render", daemon=True).start()
                except BaseException:
                    self._slots.release()
                    raise
                return await result
        except TimeoutError:
            raise TooSlow(f"not done within {self.limit_s:g} s") from None
