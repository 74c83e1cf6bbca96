"""Whole-turn serialisation per session, across processes on PostgreSQL.

`HistoryStore` already serialises each *append* (a transaction-level advisory lock), but
a turn is longer than a transaction: user message -> assemble -> LLM (seconds) -> store
the reply. Two replicas behind a load balancer that handle two updates of one chat at
once would interleave those steps: both assemble without the other's message and their
replies land in either order. The pool therefore wraps each whole turn in
`SessionLocks.hold(session_id)`:

- In-process, an `asyncio.Lock` per session (the only lock needed on SQLite, whose
  deployment is one process). Waiters of one process queue here, holding no connection.
- On PostgreSQL, additionally a *session-level* advisory lock (`pg_advisory_lock`), which
  outlives transactions and is released when we unlock or when the connection drops (a
  crashed replica never leaves a chat locked). The uncontended case costs one
  `pg_try_advisory_lock` on a single connection shared by all sessions of this process;
  only when another replica holds the chat do we open a dedicated connection and block
  in `pg_advisory_lock` there (no polling), releasing it with the turn.

The key is derived from `turn:<session id>`, deliberately different from the history's
`session:<session id>` transaction lock: a turn holding the same key on one connection
would deadlock against its own append on another.

Connections holding a lock never go back to the pool still holding it: if an unlock is
not confirmed, the connection is invalidated (closed for real), which frees the lock.

The shared connection lives as long as the process, outside the pool's pre-ping, so a
server that dropped it (a restart, a failover, a proxy's idle timeout,
`pg_terminate_backend`) is found out by the next turn's statement: that turn takes the
lock again on a new connection (`memory.storage.db.retry_on_disconnect`), and a turn that held
its lock on the dead one releases nothing (the server already did).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from memory.storage.db import advisory_key, retry_on_disconnect

log = logging.getLogger(__name__)


def turn_lock_key(session_id: str) -> int:
    return advisory_key(f"turn:{session_id}")


class _LocalLock:
    __slots__ = ("lock", "users")

    def __init__(self) -> None:
        self.lock = asyncio.Lock()
        self.users = 0


class SessionLocks:
    """Per-session turn locks for one process; create one per engine and share it."""

    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine
        self.distributed = engine.dialect.name == "postgresql"
        self._local: dict[str, _LocalLock] = {}
        self._shared: AsyncConnection | None = None
        self._shared_guard = asyncio.Lock()
        self._closed = False

    @asynccontextmanager
    async def hold(self, session_id: str) -> AsyncIterator[None]:
        """Hold the session's turn lock for the body of the `async with`."""
        if self._closed:
            raise RuntimeError("SessionLocks is closed")
        entry = self._local.get(session_id)
        if entry is None:
            entry = self._local[session_id] = _LocalLock()
        entry.users += 1
        try:
            async with entry.lock:
                if not self.distributed:
                    yield
                    return
                key = turn_lock_key(session_id)
                holder = await retry_on_disconnect(
                    lambda: self._acquire(key), f"turn lock of session {session_id}"
                )
                try:
                    yield
                finally:
                    # Shielded: a cancelled turn must still unlock, or the chat stays
                    # locked for as long as this process lives.
                    await asyncio.shield(self._release(key, holder))
        finally:
            entry.users -= 1
            if entry.users == 0:
                self._local.pop(session_id, None)

    def held_locally(self) -> int:
        """Sessions with a turn running or waiting in this process."""
        return len(self._local)

    # -- PostgreSQL ----------------------------------------------------------------

    async def _shared_conn(self) -> AsyncConnection:
        if self._shared is None or self._shared.closed or self._shared.invalidated:
            conn = await self.engine.connect()
            # Autocommit: a lock connection must not sit "idle in transaction".
            self._shared = await conn.execution_options(isolation_level="AUTOCOMMIT")
        return self._shared

    async def _acquire(self, key: int) -> _Holder:
        """Take the advisory lock; returns the connection holding it. A connection the
        server dropped raises a disconnect (`hold` retries on a new connection): the
        lock, if it was granted, died with it."""
        async with self._shared_guard:
            conn = await self._shared_conn()
            try:
                got = await conn.scalar(text("SELECT pg_try_advisory_lock(:k)"), {"k": key})
            except BaseException:
                await self._drop_shared()
                raise
        if got:
            return _Holder(conn, dedicated=False)
        # Another replica runs a turn of this session: wait on a connection of our own.
        conn = await self.engine.connect()
        try:
            conn = await conn.execution_options(isolation_level="AUTOCOMMIT")
            await conn.execute(text("SELECT pg_advisory_lock(:k)"), {"k": key})
        except BaseException:
            # Cancelled or failed while waiting: the lock may have been granted just
            # before; closing the connection for real is the only safe way out.
            await _discard(conn)
            raise
        return _Holder(conn, dedicated=True)

    async def _release(self, key: int, holder: _Holder) -> None:
        conn = holder.conn
        if holder.dedicated:
            try:
                ok = await conn.scalar(text("SELECT pg_advisory_unlock(:k)"), {"k": key})
            except Exception:
                ok = False
            if ok:
                await conn.close()
            else:
                await _discard(conn)
            return
        async with self._shared_guard:
            if conn is not self._shared or conn.closed or conn.invalidated:
                # The connection died while the turn ran (and was replaced, perhaps): the
                # server dropped the lock with it, and another replica may have run a
                # turn meanwhile. Unlocking on its replacement would be wrong: that one
                # holds other sessions' locks.
                log.warning("turn lock connection was lost while a turn held it")
                return
            try:
                ok = await conn.scalar(text("SELECT pg_advisory_unlock(:k)"), {"k": key})
            except Exception as exc:
                log.warning(
                    "turn lock connection failed at release (%s); dropping it", type(exc).__name__
                )
                await self._drop_shared()
                return
            if not ok:
                log.warning("turn lock was not held at release; dropping the lock connection")
                await self._drop_shared()

    async def _drop_shared(self) -> None:
        conn, self._shared = self._shared, None
        if conn is not None:
            await _discard(conn)

    async def close(self) -> None:
        """Release the shared lock connection (and with it any lock it still holds)."""
        self._closed = True
        async with self._shared_guard:
            # Discarded, not pooled: a pooled connection would keep its session locks.
            await self._drop_shared()


@dataclass(frozen=True)
class _Holder:
    """The connection a turn's advisory lock lives on: the shared one, or a dedicated
    one opened to wait for another replica's turn."""

    conn: AsyncConnection
    dedicated: bool


async def _discard(conn: AsyncConnection) -> None:
    try:
        if not conn.invalidated:
            await conn.invalidate()
    except Exception:  # already broken: nothing more to release
        pass
    with suppress(Exception):
        await conn.close()
