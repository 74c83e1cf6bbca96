"""SQLite connections run inline on the event loop (memory/storage/sqlite_inline.py), through the
engine memory/storage/db.py builds: a busy database is waited out with asyncio sleeps, never by
blocking the loop, and for no longer than the URL's `timeout`."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.exc import OperationalError
from sqlalchemy.ext.asyncio import AsyncEngine

from memory.storage import sqlite_inline
from memory.storage.db import create_engine, write_transaction
from tests.waits import scaled

items = sa.Table(
    "items",
    sa.MetaData(),
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("name", sa.Text, nullable=False),
)


async def _engine(path: Path, query: str = "") -> AsyncEngine:
    engine = create_engine(f"sqlite+aiosqlite:///{path}{query}")
    async with write_transaction(engine) as conn:
        await conn.run_sync(items.metadata.create_all)
    return engine


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "x.db"


@pytest.fixture
async def sqlite_engine(db_path: Path) -> AsyncIterator[AsyncEngine]:
    eng = await _engine(db_path)
    try:
        yield eng
    finally:
        await eng.dispose()


@pytest.fixture
async def short_wait_engine(db_path: Path) -> AsyncIterator[AsyncEngine]:
    eng = await _engine(db_path, "?timeout=0.2")
    try:
        yield eng
    finally:
        await eng.dispose()


@contextmanager
def other_connection(path: Path) -> Iterator[sqlite3.Connection]:
    """A plain sqlite3 connection of this process, as another process's would be."""
    conn = sqlite3.connect(path, isolation_level=None, timeout=0)
    try:
        yield conn
    finally:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        conn.close()


async def _names(engine: AsyncEngine) -> list[str]:
    async with engine.connect() as conn:
        return list((await conn.execute(sa.select(items.c.name).order_by(items.c.id))).scalars())


async def test_a_locked_write_waits_without_blocking_the_loop(
    sqlite_engine: AsyncEngine, db_path: Path
) -> None:
    ticks = 0
    write_done = asyncio.Event()

    async def ticker() -> None:
        nonlocal ticks
        while not write_done.is_set():
            ticks += 1
            await asyncio.sleep(0.005)

    async def write() -> None:
        async with write_transaction(sqlite_engine) as conn:
            await conn.execute(items.insert().values(name="after the lock"))
        write_done.set()

    with other_connection(db_path) as other:
        other.execute("BEGIN IMMEDIATE")
        other.execute("INSERT INTO items (name) VALUES ('holder')")
        ticking = asyncio.create_task(ticker())
        writing = asyncio.create_task(write())
        await asyncio.sleep(0.3)
        # The loop ran this task and the ticker while the write waited for the lock.
        assert not writing.done()
        ticks_while_waiting = ticks
        other.execute("COMMIT")
        await asyncio.wait_for(writing, scaled(5))
        await ticking

    assert ticks_while_waiting > 1
    assert await _names(sqlite_engine) == ["holder", "after the lock"]


async def test_a_write_gives_up_after_the_busy_wait(
    short_wait_engine: AsyncEngine, db_path: Path
) -> None:
    async with write_transaction(short_wait_engine) as conn:
        await conn.execute(items.insert().values(name="before"))

    async def write() -> None:
        async with write_transaction(short_wait_engine) as conn:
            await conn.execute(items.insert().values(name="never"))

    with other_connection(db_path) as other:
        other.execute("BEGIN IMMEDIATE")
        started = time.monotonic()
        with pytest.raises(OperationalError) as caught:
            await asyncio.wait_for(write(), scaled(5))  # a hang guard only: the busy wait is 0.2 s
        waited = time.monotonic() - started
        other.execute("ROLLBACK")

    assert isinstance(caught.value.orig, sqlite3.OperationalError)
    assert "database is locked" in str(caught.value.orig)
    assert waited >= 0.2  # retried for the whole busy wait, not failed at once
    assert await _names(short_wait_engine) == ["before"]
    # The connection that gave up is usable again once the lock is free.
    async with write_transaction(short_wait_engine) as conn:
        await conn.execute(items.insert().values(name="later"))
    assert await _names(short_wait_engine) == ["before", "later"]


async def test_reads_run_while_another_connection_holds_the_write_lock(
    short_wait_engine: AsyncEngine, db_path: Path
) -> None:
    async with write_transaction(short_wait_engine) as conn:
        await conn.execute(items.insert().values(name="committed"))

    with other_connection(db_path) as other:
        other.execute("BEGIN IMMEDIATE")
        other.execute("INSERT INTO items (name) VALUES ('uncommitted')")
        # WAL: the read sees the last commit and does not wait for the writer.
        assert await asyncio.wait_for(_names(short_wait_engine), scaled(5)) == ["committed"]
        other.execute("COMMIT")

    assert await _names(short_wait_engine) == ["committed", "uncommitted"]


async def test_an_exception_rolls_the_write_back(sqlite_engine: AsyncEngine) -> None:
    with pytest.raises(RuntimeError, match="abandon"):
        async with write_transaction(sqlite_engine) as conn:
            await conn.execute(items.insert().values(name="kept?"))
            assert await conn.scalar(sa.select(sa.func.count()).select_from(items)) == 1
            raise RuntimeError("abandon")
    assert await _names(sqlite_engine) == []


async def test_a_list_of_rows_is_inserted_with_executemany(sqlite_engine: AsyncEngine) -> None:
    many: list[bool] = []

    @event.listens_for(sqlite_engine.sync_engine, "before_cursor_execute")
    def _record(_conn, _cursor, statement, _params, _context, executemany) -> None:  # type: ignore[no-untyped-def]
        if statement.startswith("INSERT"):
            many.append(executemany)

    async with write_transaction(sqlite_engine) as conn:
        result = await conn.execute(items.insert(), [{"name": f"row {i}"} for i in range(5)])
        assert result.rowcount == 5
    assert many == [True]
    assert await _names(sqlite_engine) == [f"row {i}" for i in range(5)]


async def test_executemany_retried_on_busy_does_not_lose_rows(db_path: Path) -> None:
    # An iterator's rows are not lost when the first attempt fails on the lock.
    with sqlite3.connect(db_path) as setup:
        setup.execute("PRAGMA journal_mode=WAL")
        setup.execute("CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT NOT NULL)")
    conn = await sqlite_inline.connect(str(db_path), busy_wait=5)
    try:
        with other_connection(db_path) as other:
            other.execute("BEGIN IMMEDIATE")
            rows = ((f"row {i}",) for i in range(3))
            inserting = asyncio.create_task(
                conn.cursor().executemany("INSERT INTO items (name) VALUES (?)", rows)
            )
            await asyncio.sleep(0.05)
            assert not inserting.done()
            other.execute("COMMIT")
            await asyncio.wait_for(inserting, scaled(5))
        cursor = await conn.execute("SELECT name FROM items ORDER BY id")
        assert [name for (name,) in await cursor.fetchall()] == ["row 0", "row 1", "row 2"]
    finally:
        await conn.close()


async def test_a_closed_connection_cannot_be_used(db_path: Path) -> None:
    conn = await sqlite_inline.connect(str(db_path))
    await conn.execute("CREATE TABLE t (x)")
    await conn.close()
    await conn.close()  # closing twice is harmless
    with pytest.raises(ValueError, match="Connection closed"):
        await conn.execute("SELECT 1")
    with pytest.raises(ValueError, match="Connection closed"):
        await conn.cursor().__aenter__()
    with pytest.raises(ValueError, match="Connection closed"):
        await conn.commit()


async def test_the_engine_replaces_a_connection_closed_underneath_it(
    sqlite_engine: AsyncEngine,
) -> None:
    async with sqlite_engine.connect() as conn:
        raw = await conn.get_raw_connection()
        await raw.driver_connection.close()
        with pytest.raises(OperationalError) as caught:
            await conn.execute(sa.select(items.c.name))
        # Mapped to a disconnect, so the pool drops that connection.
        assert caught.value.connection_invalidated
    async with write_transaction(sqlite_engine) as conn:
        await conn.execute(items.insert().values(name="fresh connection"))
    assert await _names(sqlite_engine) == ["fresh connection"]


async def _statement_threads(engine: AsyncEngine) -> list[tuple[int, str]]:
    """Record (thread, statement) of every statement the engine's connections run."""
    seen: list[tuple[int, str]] = []
    async with engine.connect() as conn:
        raw = await conn.get_raw_connection()
        sqlite_conn = raw.driver_connection._conn  # type: ignore[union-attr]
        sqlite_conn.set_trace_callback(lambda sql: seen.append((threading.get_ident(), sql)))
    return seen


async def test_statements_off_the_loop_run_on_a_worker_thread(sqlite_engine: AsyncEngine) -> None:
    seen = await _statement_threads(sqlite_engine)
    loop_thread = threading.get_ident()
    async with write_transaction(sqlite_engine) as conn:
        await conn.execute(items.insert(), [{"name": f"row {i}"} for i in range(3)])
    async with sqlite_engine.connect() as conn:
        inline = (await conn.execute(sa.select(items.c.name).order_by(items.c.id))).all()
        async with sqlite_inline.off_loop(conn):
            result = await conn.execute(sa.select(items.c.name).order_by(items.c.id))
            off = result.all()
            assert (await conn.execute(sa.select(items.c.id).where(items.c.id > 99))).all() == []
        again = (await conn.execute(sa.select(items.c.name).order_by(items.c.id))).all()
    assert inline == off == again == [(f"row {i}",) for i in range(3)]
    selects = [thread for thread, sql in seen if sql.startswith("SELECT")]
    # inline, off the loop (2), inline again
    assert selects[0] == selects[3] == loop_thread
    assert selects[1] != loop_thread and selects[2] != loop_thread


async def test_a_cancelled_statement_off_the_loop_is_interrupted(
    sqlite_engine: AsyncEngine,
) -> None:
    started = threading.Event()
    loop = asyncio.get_running_loop()
    running = asyncio.Event()

    def mark(_i: int) -> int:
        if not started.is_set():
            started.set()
            loop.call_soon_threadsafe(running.set)
        return 1

    endless = (
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE mark(i)) "
        "SELECT count(*) FROM n"
    )

    async def run() -> None:
        async with sqlite_engine.connect() as conn:
            raw = await conn.get_raw_connection()
            await raw.driver_connection.create_function(  # type: ignore[union-attr]
                "mark", 1, mark
            )
            async with sqlite_inline.off_loop(conn):
                await conn.exec_driver_sql(endless)

    task = asyncio.create_task(run())
    await asyncio.wait_for(running.wait(), scaled(5))  # the loop runs beside the statement
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, scaled(5))
    # The connection went back to the pool with nothing running on it.
    async with write_transaction(sqlite_engine) as conn:
        await conn.execute(items.insert().values(name="after"))
    assert await _names(sqlite_engine) == ["after"]
