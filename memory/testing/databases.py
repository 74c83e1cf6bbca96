"""Throwaway databases for tests: a fresh SQLite file or a fresh PostgreSQL database,
migrated, and removed afterwards. PostgreSQL tests get their own database so that
parallel runs on the shared server never see each other's rows.

Migrating takes most of a test's set-up time, so each process migrates one template per
kind once and copies it: `CREATE DATABASE ... TEMPLATE` on PostgreSQL, a file copy on
SQLite. Copying a PostgreSQL database still costs a second on a loaded machine, so a
released PostgreSQL database is emptied (TRUNCATE ... RESTART IDENTITY) and handed to
the next test of the same process. Templates and pooled databases are named after the
process and dropped when it exits (and any left behind by a killed process is dropped by
the next one).
"""

from __future__ import annotations

import atexit
import os
import re
import shutil
import tempfile
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from sqlalchemy import create_engine as create_sync_engine
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from memory.db import create_engine, migrate

PG_ADMIN_URL = os.environ.get("MNEMO_TEST_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
_TEMPLATE_PREFIX = "mnemo_tpl_"
_POOLED_PREFIX = "mnemo_p_"
_templates: dict[str, str] = {}  # kind -> template database name / file path
_pg_free: list[str] = []  # migrated, emptied databases ready for the next test


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


def _drop_pg_databases(names: list[str]) -> None:
    if not names:
        return
    admin = create_sync_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            for name in names:
                conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    finally:
        admin.dispose()


def _orphaned_templates(names: list[str]) -> list[str]:
    out = []
    for name in names:
        m = re.match(rf"^(?:{_TEMPLATE_PREFIX}|{_POOLED_PREFIX})(\d+)_", name)
        if m and int(m.group(1)) != os.getpid() and not _pid_alive(int(m.group(1))):
            out.append(name)
    return out


async def _pg_template() -> str:
    if "postgres" in _templates:
        return _templates["postgres"]
    name = f"{_TEMPLATE_PREFIX}{os.getpid()}_{uuid.uuid4().hex[:8]}"
    admin = create_async_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    try:
        async with admin.connect() as conn:
            existing = (
                (
                    await conn.execute(
                        text(
                            "SELECT datname FROM pg_database WHERE datname LIKE :p OR datname LIKE :q"
                        ),
                        {"p": f"{_TEMPLATE_PREFIX}%", "q": f"{_POOLED_PREFIX}%"},
                    )
                )
                .scalars()
                .all()
            )
            for stale in _orphaned_templates(list(existing)):
                await conn.execute(text(f'DROP DATABASE IF EXISTS "{stale}" WITH (FORCE)'))
            await conn.execute(text(f'CREATE DATABASE "{name}"'))
    finally:
        await admin.dispose()
    engine = create_engine(_pg_url(name))
    try:
        await migrate(engine)
    finally:
        await engine.dispose()  # a template must have no open connections
    _templates["postgres"] = name
    atexit.register(_drop_pg_databases, [name])
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
    template = None
    name = f"mnemo_t_{uuid.uuid4().hex[:12]}"
    admin = create_async_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    try:
        async with admin.connect() as conn:
            clause = f' TEMPLATE "{template}"' if template else ""
            await conn.execute(text(f'CREATE DATABASE "{name}"{clause}'))
        yield _pg_url(name)
    finally:
        async with admin.connect() as conn:
            await conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        await admin.dispose()


async def _acquire_pg() -> str:
    if _pg_free:
        return _pg_free.pop()
    template = await _pg_template()
    name = f"{_POOLED_PREFIX}{os.getpid()}_{uuid.uuid4().hex[:8]}"
    admin = create_async_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    try:
        async with admin.connect() as conn:
            await conn.execute(text(f'CREATE DATABASE "{name}" TEMPLATE "{template}"'))
    finally:
        await admin.dispose()
    atexit.register(_drop_pg_databases, [name])
    return name


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
