"""The one async engine factory and the migration runner.

SQLite (`sqlite+aiosqlite://`) is the embedded default; PostgreSQL
(`postgresql+psycopg://`) serves several replicas. Both run the same Alembic chain:
the core branch lives in `memory/migrations/versions`, and every package registered
under the `mnemo.migrations` entry-point group adds its own branch (lcm, simple,
reflect, or a third party's), so a plugin brings its tables without touching core.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from functools import partial
from importlib.metadata import entry_points
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from sqlalchemy import Table, event, text
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.dialects.sqlite.aiosqlite import SQLiteDialect_aiosqlite
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from memory.search import stems
from memory.storage import sqlite_inline
from memory.text.sanitize import clean_parameters, storable

if TYPE_CHECKING:
    from alembic.config import Config

log = logging.getLogger(__name__)

MIGRATIONS_GROUP = "mnemo.migrations"
# Any fixed 64-bit key: serialises `migrate` across replicas starting together.
_MIGRATE_LOCK_KEY = 0x6D6E656D6F  # "mnemo"


def is_sqlite(engine: AsyncEngine) -> bool:
    return engine.dialect.name == "sqlite"


def create_engine(url: str, *, echo: bool = False) -> AsyncEngine:
    """Engine for `url`; a relative SQLite path gets its directory created."""
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        db = parsed.database
        if db and db != ":memory:" and not db.startswith("file:"):
            Path(db).expanduser().parent.mkdir(parents=True, exist_ok=True)
        # Statements run on the loop's thread (memory/storage/sqlite_inline.py explains why), in
        # autocommit mode: transactions are begun by the `begin` hook below, because
        # Python's sqlite3 would otherwise not BEGIN before DDL and start writes late.
        [database], options = SQLiteDialect_aiosqlite().create_connect_args(parsed)
        engine = create_async_engine(
            url,
            echo=echo,
            async_creator=partial(
                sqlite_inline.connect,
                database,
                busy_wait=float(options.get("timeout", 30)),
                uri=bool(options.get("uri")),
            ),
        )
        event.listen(engine.sync_engine, "connect", _sqlite_pragmas)
        event.listen(engine.sync_engine, "begin", _sqlite_begin)
    else:
        engine = create_async_engine(
            url, echo=echo, pool_pre_ping=True, pool_size=10, max_overflow=20
        )
    # No NUL or lone surrogate reaches either database, whatever path a text took.
    event.listen(engine.sync_engine, "before_cursor_execute", clean_parameters, retval=True)
    return engine


def _sqlite_pragmas(dbapi_conn, _record) -> None:  # type: ignore[no-untyped-def]
    # WAL lets readers run beside the writer; foreign keys are off by default in
    # SQLite; synchronous=NORMAL in WAL mode fsyncs at checkpoints, not every commit.
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA foreign_keys=ON")
    cur.execute("PRAGMA busy_timeout=0")  # waits are asyncio sleeps (sqlite_inline)
    cur.execute("PRAGMA synchronous=NORMAL")
    # Deleted content is overwritten with zeros, so a forgotten message leaves no copy in
    # free pages or in page slack (memory/storage/forgetting.py); the cost is a write of pages
    # that deletes free anyway.
    cur.execute("PRAGMA secure_delete=ON")
    cur.close()
    # The search index's tokens (memory/search/stems.py), called by its triggers: every
    # connection that writes messages or summaries needs it.
    stems.register(dbapi_conn)


def _sqlite_begin(conn) -> None:  # type: ignore[no-untyped-def]
    # A write transaction takes the write lock up front (BEGIN IMMEDIATE): two deferred
    # transactions that both read then write deadlock, and SQLite answers that with an
    # immediate SQLITE_BUSY instead of waiting out the busy timeout.
    if conn.get_execution_options().get(WRITE_OPTION):
        conn.exec_driver_sql("BEGIN IMMEDIATE")
    else:
        conn.exec_driver_sql("BEGIN")


WRITE_OPTION = "mnemo_write"


_writer_locks: weakref.WeakKeyDictionary[object, asyncio.Lock] = weakref.WeakKeyDictionary()


def _writer_lock(engine: AsyncEngine) -> asyncio.Lock:
    lock = _writer_locks.get(engine.sync_engine)
    if lock is None:
        lock = _writer_locks[engine.sync_engine] = asyncio.Lock()
    return lock


@asynccontextmanager
async def write_transaction(engine: AsyncEngine) -> AsyncIterator[AsyncConnection]:
    """One write transaction: committed on success, rolled back on any exception.

    Use this (not `engine.begin()`) for every read-modify-write, so SQLite takes its
    write lock before the first read. On SQLite, writers of this process also queue on
    an asyncio lock: SQLite admits one writer anyway, and its busy handler polls with
    sleeps of up to 100 ms, which would dominate latency under concurrency. Other
    processes still wait through `busy_timeout`.
    """
    if is_sqlite(engine):
        async with _writer_lock(engine), engine.connect() as conn:
            conn = await conn.execution_options(**{WRITE_OPTION: True})
            async with conn.begin():
                yield conn
        return
    async with engine.connect() as conn:
        committing = False
        try:
            async with conn.begin():
                yield conn
                committing = True
        except DBAPIError as exc:
            # The server answered COMMIT with an error (a termination's FATAL included):
            # nothing was committed. Only a connection lost with no answer leaves the
            # outcome open, and retrying then could write the transaction twice.
            if (
                committing
                and exc.connection_invalidated
                and getattr(exc.orig, "sqlstate", None) is None
            ):
                raise CommitUncertain(
                    "the database connection was lost during COMMIT; the transaction "
                    "may or may not have been committed"
                ) from exc
            raise


class CommitUncertain(Exception):
    """The connection died while COMMIT was on its way: committed or not, nobody knows.
    Deliberately not a `DBAPIError`, so `retry_on_disconnect` never repeats it."""


# Attempts of a whole transaction (or read) whose connection the server closed: a
# restart, a failover or a proxy's idle timeout drops every connection at once, and the
# pool's pre-ping only tests a connection when it is checked out.
RECONNECT_ATTEMPTS = 3
RECONNECT_PAUSE_S = 0.05

T = TypeVar("T")


def is_disconnect(exc: BaseException) -> bool:
    """`exc` says the connection was lost (the statement never reached a live server,
    or its transaction died with the connection), not that the statement was wrong."""
    return isinstance(exc, DBAPIError) and bool(exc.connection_invalidated)


async def retry_on_disconnect(
    run: Callable[[], Awaitable[T]], what: str, *, idempotent: bool = False
) -> T:
    """`await run()`, run again on a fresh connection when the server dropped the
    connection under it. `run` must be one whole unit: reads, or a transaction from its
    BEGIN (a dead connection's transaction is rolled back by the server, so it is redone
    whole, never continued). A COMMIT whose answer was lost (`CommitUncertain`) is run
    again only when `run` is `idempotent` (writing it twice changes nothing). A database
    that stays unreachable fails the next attempt's connect, which is raised as is."""
    for attempt in range(1, RECONNECT_ATTEMPTS + 1):
        try:
            return await run()
        except CommitUncertain:
            if not idempotent or attempt == RECONNECT_ATTEMPTS:
                raise
            log.warning("%s: the answer to COMMIT was lost; running it again", what)
        except DBAPIError as exc:
            if not is_disconnect(exc) or attempt == RECONNECT_ATTEMPTS:
                raise
            log.warning(
                "%s: the database connection was lost (%s); retrying on a new one",
                what,
                type(exc.orig).__name__,
            )
        await asyncio.sleep(RECONNECT_PAUSE_S * attempt)
    raise AssertionError("unreachable")


def conflict_insert(conn: AsyncConnection, table: Table) -> postgresql.Insert | sqlite.Insert:
    """An INSERT into `table` that takes `on_conflict_do_nothing` / `_do_update`: both
    dialects have them, but each under its own class."""
    if conn.dialect.name == "postgresql":
        return postgresql.insert(table)
    return sqlite.insert(table)


def advisory_key(name: str) -> int:
    """A stable signed 64-bit key for PostgreSQL advisory locks. The name is cleaned as
    its rows are (a lone surrogate cannot be encoded, and names the same row as U+FFFD)."""
    return int.from_bytes(
        hashlib.blake2b(storable(name).encode(), digest_size=8).digest(), "big", signed=True
    )


async def lock_for_transaction(conn: AsyncConnection, name: str) -> None:
    """Serialise transactions that name the same key until this one ends.

    PostgreSQL: a transaction-level advisory lock (works across replicas). SQLite: a
    no-op, because `write_transaction` already holds the database's single write lock.
    """
    if conn.dialect.name == "postgresql":
        await conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": advisory_key(name)})


def migration_locations() -> list[str]:
    """Directories of every installed migration branch, core first."""
    locations: list[str] = []
    for ep in sorted(entry_points(group=MIGRATIONS_GROUP), key=lambda e: e.name != "memory"):
        try:
            module = ep.load()
        except Exception as exc:  # a broken plugin must not block the others
            log.warning("migrations %r not loaded: %s", ep.name, exc)
            continue
        files = getattr(module, "__file__", None)
        if files:
            locations.append(str(Path(files).parent))
        else:  # namespace package
            locations.extend(str(p) for p in module.__path__)
    return locations


def _alembic_config(connection) -> Config:  # type: ignore[no-untyped-def]
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(Path(__file__).parent.parent / "migrations"))
    cfg.set_main_option("version_locations", " ".join(migration_locations()))
    cfg.set_main_option("path_separator", "space")
    cfg.attributes["connection"] = connection
    return cfg


def _upgrade(sync_conn) -> None:  # type: ignore[no-untyped-def]
    from alembic import command

    command.upgrade(_alembic_config(sync_conn), "heads")


@dataclass(frozen=True)
class Migrated:
    """What `migrate` found and left: the branch heads before and after (no heads
    before: the schema was created just now)."""

    before: frozenset[str]
    after: frozenset[str]

    @property
    def created(self) -> bool:
        return not self.before

    @property
    def changed(self) -> bool:
        return self.before != self.after


async def migrate(engine: AsyncEngine) -> Migrated:
    """Apply every pending migration of every branch (idempotent)."""
    async with write_transaction(engine) as conn:
        if engine.dialect.name == "postgresql":
            await conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": _MIGRATE_LOCK_KEY})
        before = await current_heads(conn)
        await conn.run_sync(_upgrade)
        after = await current_heads(conn)
    return Migrated(frozenset(before), frozenset(after))


async def current_heads(conn: AsyncConnection) -> set[str]:
    def _read(sync_conn) -> set[str]:  # type: ignore[no-untyped-def]
        from alembic.runtime.migration import MigrationContext

        return set(MigrationContext.configure(sync_conn).get_current_heads())

    return await conn.run_sync(_read)
