"""SQLite statements run on the event loop's own thread, for `sqlite+aiosqlite://` URLs.

aiosqlite runs each call on a worker thread and hands the result back through the event
loop: about three hand-offs per statement (open cursor, execute, close), each waiting its
turn among everything else the loop has ready. Inside a write transaction those waits are
paid while holding SQLite's only write lock, so under load every writer queues behind
event-loop iterations rather than behind SQL: under many concurrent turns the lock was
held most of the time for statements that take tens of microseconds (WAL with
synchronous=NORMAL does not fsync at commit; figures in bench/RESULTS.md). Run inline,
a statement costs less than one hand-off did and the write lock is held only for SQL.

The one wait SQLite can impose, another process holding the write lock, must not block
the loop: these connections run with `busy_timeout=0`, and SQLITE_BUSY is retried with
asyncio sleeps until the connection's timeout, as SQLite's busy handler would (it too
retries only plain SQLITE_BUSY; a stale snapshot fails at once).

The objects here imitate the part of aiosqlite's API that SQLAlchemy's aiosqlite dialect
calls (`create_engine` passes `connect` as `async_creator`), so the dialect, its
exceptions (sqlite3's) and the URL scheme stay as they are.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

T = TypeVar("T")

# sqlite3 error codes retried like SQLite's busy handler retries them.
_RETRIED = {sqlite3.SQLITE_BUSY, 261}  # 261 = SQLITE_BUSY_RECOVERY (WAL being recovered)
_FIRST_SLEEP, _MAX_SLEEP = 0.001, 0.05


async def _retry_busy(busy_wait: float, call: Callable[..., T], *args: Any) -> T:
    sleep, deadline = _FIRST_SLEEP, None
    while True:
        try:
            return call(*args)
        except sqlite3.OperationalError as exc:
            if getattr(exc, "sqlite_errorcode", None) not in _RETRIED:
                raise
            now = time.monotonic()
            deadline = deadline if deadline is not None else now + busy_wait
            if now >= deadline:
                raise
            await asyncio.sleep(min(sleep, deadline - now))
            sleep = min(sleep * 2, _MAX_SLEEP)


class InlineCursor:
    def __init__(self, connection: InlineConnection, timeout: float) -> None:
        self._connection = connection
        self._timeout = timeout
        self._sqlite_cursor: sqlite3.Cursor | None = None

    @property
    def _cursor(self) -> sqlite3.Cursor:
        if self._sqlite_cursor is None:
            self._sqlite_cursor = self._connection._open().cursor()
        return self._sqlite_cursor

    async def __aenter__(self) -> InlineCursor:
        # Opened here, as aiosqlite does: SQLAlchemy's dialect recognises a closed
        # connection ("Connection closed") only from here and then discards it.
        _ = self._cursor
        return self

    async def __aexit__(self, *_: object) -> None:
        self._cursor.close()

    @property
    def description(self) -> Any:
        return self._cursor.description

    @property
    def rowcount(self) -> int:
        return self._cursor.rowcount

    @property
    def lastrowid(self) -> int | None:
        return self._cursor.lastrowid

    @property
    def arraysize(self) -> int:
        return self._cursor.arraysize

    @arraysize.setter
    def arraysize(self, value: int) -> None:
        self._cursor.arraysize = value

    async def execute(self, sql: str, parameters: Any = ()) -> InlineCursor:
        await _retry_busy(self._timeout, self._cursor.execute, sql, parameters)
        return self

    async def executemany(self, sql: str, parameters: Iterable[Any]) -> InlineCursor:
        # Materialised first: a retry must not find a half-consumed iterator.
        rows = list(parameters)
        await _retry_busy(self._timeout, self._cursor.executemany, sql, rows)
        return self

    async def fetchone(self) -> Any:
        return self._cursor.fetchone()

    async def fetchmany(self, size: int | None = None) -> list[Any]:
        return self._cursor.fetchmany(self._cursor.arraysize if size is None else size)

    async def fetchall(self) -> list[Any]:
        return self._cursor.fetchall()

    async def close(self) -> None:
        self._cursor.close()

    def __aiter__(self) -> InlineCursor:
        return self

    async def __anext__(self) -> Any:
        row = self._cursor.fetchone()
        if row is None:
            raise StopAsyncIteration
        return row


class InlineConnection:
    def __init__(self, conn: sqlite3.Connection, timeout: float) -> None:
        self._conn = conn
        # SQLAlchemy's adapter reads `_connection` as "still open".
        self._connection: sqlite3.Connection | None = conn
        self._timeout = timeout

    def cursor(self) -> InlineCursor:
        return InlineCursor(self, self._timeout)

    async def execute(self, sql: str, parameters: Sequence[Any] = ()) -> InlineCursor:
        return await self.cursor().execute(sql, parameters)

    async def commit(self) -> None:
        await _retry_busy(self._timeout, self._open().commit)

    async def rollback(self) -> None:
        self._open().rollback()

    async def create_function(self, *args: Any, **kwargs: Any) -> None:
        self._open().create_function(*args, **kwargs)

    async def close(self) -> None:
        self.stop()

    def stop(self) -> None:
        if self._connection is not None:
            self._connection = None
            self._conn.close()

    @property
    def isolation_level(self) -> str | None:
        return self._conn.isolation_level

    def _open(self) -> sqlite3.Connection:
        if self._connection is None:
            raise ValueError("Connection closed")  # the text SQLAlchemy's dialect maps
        return self._connection


async def connect(database: str, *, busy_wait: float = 30.0, uri: bool = False) -> InlineConnection:
    """A connection in autocommit mode (`isolation_level=None`: transactions are begun
    explicitly, see memory/storage/db.py) whose busy waits are asyncio sleeps."""
    conn = sqlite3.connect(
        database, timeout=0, isolation_level=None, uri=uri, check_same_thread=False
    )  # closed by GC from any thread
    conn.execute("PRAGMA busy_timeout=0")
    return InlineConnection(conn, busy_wait)
