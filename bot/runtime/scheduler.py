"""The application's one scheduler: every periodic or background job of a running bot
(reflect's interval job, the embeddings worker's polling, ...) is an APScheduler job
on it, so one place starts them and one place stops them.

`Scheduler` is APScheduler's `AsyncIOScheduler` (so plugins schedule on it with the
ordinary `add_job`) that also knows which job runs are in flight: `stop(grace_s)`
fires nothing new, gives the runs in flight `grace_s` seconds, then cancels them and
waits until they have ended. APScheduler's own shutdown cancels runs without waiting
for them, which would let a job still use the database pool being closed.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable
from datetime import UTC
from typing import Any

from apscheduler.schedulers.asyncio import AsyncIOScheduler

log = logging.getLogger(__name__)


class Scheduler(AsyncIOScheduler):
    def __init__(self, **options: Any) -> None:
        options.setdefault("timezone", UTC)
        super().__init__(**options)
        self._runs: set[asyncio.Task[Any]] = set()
        self._stopping = False

    def add_job(self, func: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        """APScheduler's `add_job`; a coroutine function's runs are tracked for `stop`."""
        if asyncio.iscoroutinefunction(func):
            kwargs.setdefault("name", getattr(func, "__qualname__", None) or repr(func))
            func = self._tracked(func)
        return super().add_job(func, *args, **kwargs)

    def _tracked(self, func: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(func)
        async def run(*args: Any, **kwargs: Any) -> Any:
            task = asyncio.current_task()
            assert task is not None
            self._runs.add(task)
            try:
                return await func(*args, **kwargs)
            except asyncio.CancelledError:
                if self._stopping:  # our own stop: not an error of the job
                    return None
                raise
            finally:
                self._runs.discard(task)

        return run

    @property
    def in_flight(self) -> int:
        """Job runs going on now."""
        return len(self._runs)

    async def stop(self, grace_s: float = 0.0) -> None:
        """Fire nothing new; runs in flight get `grace_s` seconds, then are cancelled.
        Returns once none is running. Safe to call twice, or before `start`."""
        if self.running:
            self.pause()
        if self._runs and grace_s > 0:
            await asyncio.wait(set(self._runs), timeout=grace_s)
        self._stopping = True
        runs = set(self._runs)
        for task in runs:
            task.cancel()
        if runs:
            log.info("stopping %d background job(s) in flight", len(runs))
            await asyncio.gather(*runs, return_exceptions=True)
        if self.running:
            self.shutdown(wait=False)
            await asyncio.sleep(0)  # AsyncIOScheduler shuts down in a callback of the loop
