"""Core revision 0014_followups goes both ways on a migrated database: down drops its
three tables, up makes them again (SQLite and PostgreSQL)."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import command

from memory.storage.db import _alembic_config, create_engine, migrate, write_transaction

TABLES = {"followups", "followup_sources", "followup_prefs"}


def _tables(sync_conn) -> set[str]:  # type: ignore[no-untyped-def]
    return set(sa.inspect(sync_conn).get_table_names()) & TABLES


def _down(sync_conn) -> None:  # type: ignore[no-untyped-def]
    command.downgrade(_alembic_config(sync_conn), "0014_followups-1")


async def test_followups_revision_downgrades_and_upgrades(db_url: str) -> None:
    engine = create_engine(db_url)
    try:
        await migrate(engine)
        async with engine.connect() as conn:
            assert await conn.run_sync(_tables) == TABLES
        async with write_transaction(engine) as conn:
            await conn.run_sync(_down)
        async with engine.connect() as conn:
            assert await conn.run_sync(_tables) == set()
        await migrate(engine)
        async with engine.connect() as conn:
            assert await conn.run_sync(_tables) == TABLES
    finally:
        await engine.dispose()
