"""Whole-turn locks per session: two messages for one session never interleave their
turns, different sessions run in parallel.

The app passes shared locks (`memory.storage.session_lock.SessionLocks`, which also serialise one
session's turns across replicas on PostgreSQL); without them the conversation service keeps
`LocalTurnLocks`: one in-process slot (a lock) per session, reaped when idle.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager, contextmanager
from dataclasses import dataclass
from typing import Protocol

DEFAULT_IDLE_S = 900.0


class TurnLocks(Protocol):
    """Whole-turn locks per session, e.g. `memory.storage.session_lock.SessionLocks`, which also
    serialises one session's turns across replicas on PostgreSQL."""

    def hold(self, session_id: str) -> AbstractAsyncContextManager[None]: ...


@dataclass
class _Slot:
    lock: asyncio.Lock
    last_used: float
    users: int = 0  # turns holding or waiting for the lock: never reaped while > 0


class LocalTurnLocks:
    """One lock per session in this process; slots unused for `idle_s` are reaped."""

    def __init__(
        self, *, idle_s: float = DEFAULT_IDLE_S, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.idle_s = idle_s
        self._clock = clock
        self._slots: dict[str, _Slot] = {}

    @property
    def active(self) -> int:
        return len(self._slots)

    def reap_idle(self) -> int:
        """Drop slots unused for `idle_s`; returns how many went."""
        now = self._clock()
        idle = [
            k for k, s in self._slots.items() if s.users == 0 and now - s.last_used >= self.idle_s
        ]
        for key in idle:
            del self._slots[key]
        return len(idle)

    @contextmanager
    def _slot(self, session_id: str) -> Iterator[_Slot]:
        self.reap_idle()
        slot = self._slots.get(session_id)
        if slot is None:
            slot = self._slots[session_id] = _Slot(asyncio.Lock(), self._clock())
        slot.users += 1
        try:
            yield slot
        finally:
            slot.users -= 1
            slot.last_used = self._clock()

    @asynccontextmanager
    async def hold(self, session_id: str) -> AsyncIterator[None]:
        with self._slot(session_id) as slot:
            async with slot.lock:
                yield
