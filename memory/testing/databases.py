"""Throwaway databases for tests: a fresh SQLite file or a fresh PostgreSQL database,
migrated, and removed afterwards. PostgreSQL tests get their own database so that
parallel runs on the shared server never see each other's rows."""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from memory.db import create_engine, migrate

PG_ADMIN_URL = os.environ.get(
    "MNEMO_TEST_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
)


def _pg_url(dbname: str) -> str:
    base, _, _ = PG_ADMIN_URL.rpartition("/")
    return f"{base}/{dbname}"


@asynccontextmanager
async def temp_database_url(kind: str, tmp_dir: Path) -> AsyncIterator[str]:
    """Yield the URL of an empty database of `kind` ("sqlite" or "postgres")."""
    if kind == "sqlite":
        yield f"sqlite+aiosqlite:///{tmp_dir / f'mnemo-{uuid.uuid4().hex[:8]}.db'}"
        return
    if kind != "postgres":
        raise ValueError(f"unknown database kind {kind!r}")
    name = f"mnemo_t_{uuid.uuid4().hex[:12]}"
    admin = create_async_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    try:
        async with admin.connect() as conn:
            await conn.execute(text(f'CREATE DATABASE "{name}"'))
        yield _pg_url(name)
    finally:
        async with admin.connect() as conn:
            await conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        await admin.dispose()


@asynccontextmanager
async def temp_engine(kind: str, tmp_dir: Path) -> AsyncIterator[AsyncEngine]:
    """A migrated engine on a throwaway database."""
    async with temp_database_url(kind, tmp_dir) as url:
        engine = create_engine(url)
        try:
            await migrate(engine)
            yield engine
        finally:
            await engine.dispose()
