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

A long read is the exception: a ranked search over a big history, or a scan, costs
tens to hundreds of milliseconds of SQL, and run inline it would stall every other chat
for that long (bench/search_scale.py measures the stall). Inside `off_loop(conn)` a
connection runs each statement on a worker thread instead, its rows fetched there too
(one hand-off per statement). It is meant for reads outside a write transaction, where
a hand-off costs latency only; a cancelled caller interrupts the statement and waits for
the thread, so the connection is never used by two threads at once.

The objects here imitate the part of aiosqlite's API that SQLAlchemy's aiosqlite dialect
calls (`create_engine` passes `connect` as `async_creator`), so the dialect, its
exceptions (sqlite3's) and the URL scheme stay as they are.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from contextlib import asynccontextmanager
from functools import partial
from typing import Any, TypeVar

from sqlalchemy.ext.asyncio import AsyncConnection

T = TypeVar("T")

# sqlite3 error codes retried like SQLite's busy handler retries them.
_RETRIED = {sqlite3.SQLITE_BUSY, 261}  # 261 = SQLITE_BUSY_RECOVERY (WAL being recovered)
_FIRST_SLEEP, _MAX_SLEEP = 0.001, 0.05


async def _retry_busy(
    busy_wait: float, call: Callable[..., T], *args: Any, thread: sqlite3.Connection | None = None
) -> T:
    """`call(*args)`, inline or (`thread`: the connection it uses) on a worker thread."""
    sleep, deadline = _FIRST_SLEEP, None
    while True:
        try:
            if thread is not None:
                return await _in_thread(thread, partial(call, *args))
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


async def _in_thread(conn: sqlite3.Connection, call: Callable[[], T]) -> T:
    """`call()` on a worker thread; if the caller is cancelled meanwhile, the statement is
    interrupted and waited for before the cancellation goes on."""
    future = asyncio.get_running_loop().run_in_executor(None, call)
    try:
        return await asyncio.shield(future)
    except asyncio.CancelledError:
        conn.interrupt()
        # sqlite3.OperationalError("interrupted"), expected
        with contextlib.suppress(Exception):
            await future
        raise


class InlineCursor:
    def __init__(self, connection: InlineConnection, timeout: float) -> None:
        self._connection = connection
        self._timeout = timeout
        self._sqlite_cursor: sqlite3.Cursor | None = None
        self._buffered: deque[Any] | None = None  # rows fetched on the worker thread

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
        self._buffered = None
        if self._connection.off_loop:
            cursor = self._cursor

            def run() -> list[Any]:
                cursor.execute(sql, parameters)
                return cursor.fetchall() if cursor.description else []

            rows = await _retry_busy(self._timeout, run, thread=self._connection._open())
            self._buffered = deque(rows)
            return self
        await _retry_busy(self._timeout, self._cursor.execute, sql, parameters)
        return self

    async def executemany(self, sql: str, parameters: Iterable[Any]) -> InlineCursor:
        # Materialised first: a retry must not find a half-consumed iterator.
        rows = list(parameters)
        await _retry_busy(self._timeout, self._cursor.executemany, sql, rows)
        return self

    async def fetchone(self) -> Any:
        return self._next()

    async def fetchmany(self, size: int | None = None) -> list[Any]:
        size = self._cursor.arraysize if size is None else size
        if self._buffered is not None:
            return [self._buffered.popleft() for _ in range(min(size, len(self._buffered)))]
        return self._cursor.fetchmany(size)

    async def fetchall(self) -> list[Any]:
        if self._buffered is not None:
            rows, self._buffered = list(self._buffered), deque()
            return rows
        return self._cursor.fetchall()

    def _next(self) -> Any:
        if self._buffered is not None:
            return self._buffered.popleft() if self._buffered else None
        return self._cursor.fetchone()

    async def close(self) -> None:
        self._cursor.close()

    def __aiter__(self) -> InlineCursor:
        return self

    async def __anext__(self) -> Any:
        row = self._next()
        if row is None:
            raise StopAsyncIteration
        return row


class InlineConnection:
    def __init__(self, conn: sqlite3.Connection, timeout: float) -> None:
        self._conn = conn
        # SQLAlchemy's adapter reads `_connection` as "still open".
        self._connection: sqlite3.Connection | None = conn
        self._timeout = timeout
        self.off_loop = 0  # > 0: statements run on a worker thread (module doc)

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


@asynccontextmanager
async def off_loop(conn: AsyncConnection) -> AsyncIterator[AsyncConnection]:
    """`conn` with its statements run on a worker thread meanwhile, when it is an inline
    SQLite connection (module doc); other drivers already wait without blocking the loop.
    For reads: a write transaction would hold the write lock across the hand-offs."""
    raw = await conn.get_raw_connection()
    driver = raw.driver_connection
    if not isinstance(driver, InlineConnection):
        yield conn
        return
    driver.off_loop += 1
    try:
        yield conn
    finally:
        driver.off_loop -= 1
