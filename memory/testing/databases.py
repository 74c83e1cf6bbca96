"""Throwaway databases for tests: a fresh SQLite file or a fresh PostgreSQL database,
migrated, and removed afterwards. PostgreSQL tests get their own database so that
parallel runs on the shared server never see each other's rows.

Migrating takes most of a test's set-up time, so each process migrates one template per
kind once and copies it: `CREATE DATABASE ... TEMPLATE` on PostgreSQL, a file copy on
SQLite. Copying a PostgreSQL database still costs a second on a loaded machine, so a
released PostgreSQL database is emptied (TRUNCATE ... RESTART IDENTITY) and handed to
the next test of the same process.

Every PostgreSQL database made here is named `mnemo_test_<run>_<pid>_<owner>_<kind>_<n>`:
`run` is the test run's id (shared by all pytest-xdist workers of one run), `pid` the
process that made it and `owner` a random key of that process, which holds the
PostgreSQL advisory lock (OWNER_LOCK_SPACE, owner) in shared mode on a connection of
its own for as long as it lives. A process's databases are dropped when it exits; those
of a process killed meanwhile are dropped by the next process that makes one, once
provably dead: no session on the server holds its owner's lock (the server drops a dead
client's locks with its connection) and no process of this machine has its pid. A run
still going, from another checkout or another machine, is never touched.
"""

from __future__ import annotations

import asyncio
import atexit
import os
import random
import re
import shutil
import tempfile
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from sqlalchemy import Connection, text
from sqlalchemy import create_engine as create_sync_engine
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from memory.storage.db import create_engine, migrate

PG_ADMIN_URL = os.environ.get("MNEMO_TEST_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
PREFIX = "mnemo_test_"
# The two-key form of PostgreSQL's advisory locks, a key space of its own (the bot's
# locks use the one-key form): ('mnem', owner).
OWNER_LOCK_SPACE = 0x6D6E656D
# The run: pytest-xdist gives its workers the id of the run they belong to.
RUN_ID = (os.environ.get("PYTEST_XDIST_TESTRUNUID") or uuid.uuid4().hex)[:8]
_OWNER = random.SystemRandom().randrange(1, 2**31)
_NAME = re.compile(rf"^{PREFIX}[0-9a-f]{{8}}_(\d+)_([0-9a-f]{{8}})_[a-z]+_[0-9a-f]+$")
# Left by earlier versions of this module, named after the process only.
_LEGACY = re.compile(r"^mnemo_(?:tpl|p)_(\d+)_[0-9a-f]+$")
_templates: dict[str, str] = {}  # kind -> template database name / file path
_pg_free: list[str] = []  # migrated, emptied databases ready for the next test
_owner_conn: Connection | None = None  # holds this process's owner lock
_made: set[str] = set()  # this process's databases not dropped yet


def _pg_url(dbname: str) -> str:
    base, _, _ = PG_ADMIN_URL.rpartition("/")
    return f"{base}/{dbname}"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _new_name(kind: str) -> str:
    """A database name of this run and process (module doc); `kind` says what it is for."""
    return f"{PREFIX}{RUN_ID}_{os.getpid()}_{_OWNER:08x}_{kind}_{uuid.uuid4().hex[:8]}"


def _drop_pg_databases(names: list[str]) -> None:
    _made.difference_update(names)
    if not names:
        return
    admin = create_sync_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            for name in names:
                conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    finally:
        admin.dispose()


def _stale(names: list[str], live_owners: set[int]) -> list[str]:
    """The databases among `names` whose making process is provably gone (module doc)."""
    out = []
    for name in names:
        if m := _NAME.match(name):
            pid, owner = int(m.group(1)), int(m.group(2), 16)
            if owner != _OWNER and owner not in live_owners and not _pid_alive(pid):
                out.append(name)
        elif (m := _LEGACY.match(name)) and not _pid_alive(int(m.group(1))):
            out.append(name)
    return out


def _claim_and_sweep() -> None:
    """Once per process, before its first PostgreSQL database: take this process's owner
    lock, then drop the databases of processes that are gone."""
    global _owner_conn
    if _owner_conn is not None:
        return
    # Synchronous and outside any event loop's life: the lock lives as long as the
    # process, across the event loops of many tests.
    admin = create_sync_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT", pool_size=1)
    conn = admin.connect()
    conn.execute(
        text("SELECT pg_advisory_lock_shared(:space, :owner)"),
        {"space": OWNER_LOCK_SPACE, "owner": _OWNER},
    )
    _owner_conn = conn
    # atexit runs last in, first out: the databases go, then the lock, then the engine.
    atexit.register(admin.dispose)
    atexit.register(conn.close)
    atexit.register(lambda: _drop_pg_databases(sorted(_made)))
    live = set(
        conn.execute(
            text(
                "SELECT objid::bigint FROM pg_locks WHERE locktype = 'advisory' "
                "AND classid::bigint = :space AND objsubid = 2 AND granted"
            ),
            {"space": OWNER_LOCK_SPACE},
        ).scalars()
    )
    names = conn.execute(
        text("SELECT datname FROM pg_database WHERE datname LIKE 'mnemo\\_%'")
    ).scalars()
    for stale in _stale(list(names), live):
        conn.execute(text(f'DROP DATABASE IF EXISTS "{stale}" WITH (FORCE)'))


async def _pg_template() -> str:
    if "postgres" in _templates:
        return _templates["postgres"]
    name = await _create_pg_database("tpl")
    engine = create_engine(_pg_url(name))
    try:
        await migrate(engine)
    finally:
        await engine.dispose()  # a template must have no open connections
    _templates["postgres"] = name
    return name


async def _create_pg_database(kind: str, template: str | None = None) -> str:
    """A new, empty (or `template`'s copy) database of this process, dropped at exit."""
    await asyncio.to_thread(_claim_and_sweep)
    name = _new_name(kind)
    admin = create_async_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    try:
        async with admin.connect() as conn:
            clause = f' TEMPLATE "{template}"' if template else ""
            await conn.execute(text(f'CREATE DATABASE "{name}"{clause}'))
    finally:
        await admin.dispose()
    _made.add(name)
    return name


async def _sqlite_template() -> Path:
    if "sqlite" in _templates:
        return Path(_templates["sqlite"])
    folder = Path(tempfile.mkdtemp(prefix="mnemo-tpl-"))
    path = folder / "template.db"
    engine = create_engine(f"sqlite+aiosqlite:///{path}")
    try:
        await migrate(engine)
    finally:
        await engine.dispose()  # checkpoints the WAL into the main file
    _templates["sqlite"] = str(path)
    atexit.register(shutil.rmtree, folder, True)
    return path


@asynccontextmanager
async def temp_database_url(kind: str, tmp_dir: Path) -> AsyncIterator[str]:
    """Yield the URL of an empty, unmigrated database of `kind` ("sqlite" or "postgres")."""
    async with _temp_database(kind, tmp_dir, migrated=False) as url:
        yield url


@asynccontextmanager
async def _temp_database(kind: str, tmp_dir: Path, *, migrated: bool) -> AsyncIterator[str]:
    if kind == "sqlite":
        path = tmp_dir / f"mnemo-{uuid.uuid4().hex[:8]}.db"
        if migrated:
            shutil.copyfile(await _sqlite_template(), path)
        yield f"sqlite+aiosqlite:///{path}"
        return
    if kind != "postgres":
        raise ValueError(f"unknown database kind {kind!r}")
    if migrated:
        name = await _acquire_pg()
        try:
            yield _pg_url(name)
        finally:
            await _release_pg(name)
        return
    name = await _create_pg_database("t")
    try:
        yield _pg_url(name)
    finally:
        await asyncio.to_thread(_drop_pg_databases, [name])


async def _acquire_pg() -> str:
    if _pg_free:
        return _pg_free.pop()
    return await _create_pg_database("p", template=await _pg_template())


async def _release_pg(name: str) -> None:
    """Empty the database for the next test; drop it if that fails."""
    engine = create_async_engine(_pg_url(name), isolation_level="AUTOCOMMIT")
    try:
        async with engine.connect() as conn:
            # Sessions a test left open (a killed subprocess, a leaked engine) would
            # block TRUNCATE and see the next test's rows.
            await conn.execute(
                text(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE datname = current_database() AND pid <> pg_backend_pid()"
                )
            )
            tables = (
                (
                    await conn.execute(
                        text(
                            "SELECT quote_ident(tablename) FROM pg_tables WHERE schemaname = 'public' "
                            "AND tablename <> 'alembic_version'"
                        )
                    )
                )
                .scalars()
                .all()
            )
            if tables:
                await conn.execute(text(f"TRUNCATE {', '.join(tables)} RESTART IDENTITY CASCADE"))
        _pg_free.append(name)
    except Exception:
        _drop_pg_databases([name])
    finally:
        await engine.dispose()


@asynccontextmanager
async def temp_engine(kind: str, tmp_dir: Path) -> AsyncIterator[AsyncEngine]:
    """A migrated engine on a throwaway database."""
    async with _temp_database(kind, tmp_dir, migrated=True) as url:
        engine = create_engine(url)
        try:
            yield engine
        finally:
            await engine.dispose()
