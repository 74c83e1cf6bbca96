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
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from memory.db import advisory_key

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
                dedicated = await self._acquire(key)
                try:
                    yield
                finally:
                    # Shielded: a cancelled turn must still unlock, or the chat stays
                    # locked for as long as this process lives.
                    await asyncio.shield(self._release(key, dedicated))
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

    async def _acquire(self, key: int) -> AsyncConnection | None:
        """Take the advisory lock; returns the dedicated connection holding it, or None
        when the shared connection holds it."""
        async with self._shared_guard:
            conn = await self._shared_conn()
            try:
                got = await conn.scalar(text("SELECT pg_try_advisory_lock(:k)"), {"k": key})
            except BaseException:
                await self._drop_shared()
                raise
        if got:
            return None
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
        return conn

    async def _release(self, key: int, dedicated: AsyncConnection | None) -> None:
        if dedicated is not None:
            try:
                ok = await dedicated.scalar(text("SELECT pg_advisory_unlock(:k)"), {"k": key})
            except Exception:
                ok = False
            if ok:
                await dedicated.close()
            else:
                await _discard(dedicated)
            return
        async with self._shared_guard:
            conn = self._shared
            if conn is None or conn.closed or conn.invalidated:
                # The connection died while the turn ran: the server already dropped
                # the lock, and another replica may have run a turn meanwhile.
                log.warning("turn lock connection was lost while a turn held it")
                return
            try:
                ok = await conn.scalar(text("SELECT pg_advisory_unlock(:k)"), {"k": key})
            except Exception:
                ok = False
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


async def _discard(conn: AsyncConnection) -> None:
    try:
        if not conn.invalidated:
            await conn.invalidate()
    except Exception:  # already broken: nothing more to release
        pass
    try:
        await conn.close()
    except Exception:
        pass
