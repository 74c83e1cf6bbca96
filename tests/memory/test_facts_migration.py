"""Core revision 0016_fact_evidence_role goes both ways on a migrated database (SQLite
and PostgreSQL): down drops the evidence role, up adds it again."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import command

from memory.storage.db import _alembic_config, create_engine, migrate, write_transaction


def _columns(sync_conn) -> set[str]:  # type: ignore[no-untyped-def]
    return {c["name"] for c in sa.inspect(sync_conn).get_columns("memory_fact_evidence")}


def _down(sync_conn) -> None:  # type: ignore[no-untyped-def]
    command.downgrade(_alembic_config(sync_conn), "0015_facts")


async def test_evidence_role_revision_downgrades_and_upgrades(db_url: str) -> None:
    engine = create_engine(db_url)
    try:
        await migrate(engine)
        async with engine.connect() as conn:
            assert "role" in await conn.run_sync(_columns)
        async with write_transaction(engine) as conn:
            await conn.run_sync(_down)
        async with engine.connect() as conn:
            assert "role" not in await conn.run_sync(_columns)
        await migrate(engine)
        async with engine.connect() as conn:
            assert "role" in await conn.run_sync(_columns)
    finally:
        await engine.dispose()
