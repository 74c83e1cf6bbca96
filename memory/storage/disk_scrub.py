"""Making forgets reach the disk now, on demand (`mnemo memory erase --scrub`).

A forget deletes rows in its transaction. SQLite then leaves no copy in its file or WAL
(`forgetting.scrub`, run after every forget; run again here, for a WAL checkpoint that
readers kept from completing). PostgreSQL keeps copies that only maintenance removes,
as measured on a throwaway cluster (tests/memory/test_forgetting_pg_disk.py):

- plain VACUUM marks dead tuples' space free, but their bytes stay in the table pages
  (conversations' old titles, rebuilt summaries' old rows) until written over, and a
  GIN index never drops a key, even one no row holds any more (the tsvector indexes);
- VACUUM FULL rewrites every table and index into new files; the old ones are truncated
  when it commits;
- the WAL (`pg_wal`) holds the rows as written until its segments go: a WAL switch and
  a checkpoint, twice, retire every segment older than the rewrite; with `wal_recycle`
  on (the default) a retired segment may be renamed for reuse instead of deleted, its
  bytes kept until new WAL overwrites them (seen in the test); with it off, deleted.

So, on PostgreSQL: VACUUM FULL of each table of the schema (each locked while it is
rewritten: the bot waits), then the WAL rounds. CHECKPOINT and pg_switch_wal need a
superuser (or the pg_checkpoint role and an EXECUTE grant): without them the tables
are rewritten and the WAL is left to PostgreSQL's own checkpoints. What was not reached
is said, never silently skipped.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import sqlalchemy as sa
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncEngine

from memory.storage.forgetting import scrub

WAL_ROUNDS = 2  # one switch and checkpoint left the segment before it in place
_INSUFFICIENT_PRIVILEGE = "42501"


@dataclass
class DiskScrub:
    tables: list[str] = field(default_factory=list)  # rewritten (PostgreSQL)
    wal_left: str = ""  # what of the WAL may still hold deleted rows ("" nothing)


async def scrub_tables(engine: AsyncEngine) -> list[str]:
    """The tables a PostgreSQL scrub rewrites: every table of the schema mnemo uses
    (memory's, the bot's, the plugins': all may hold what was said). [] on SQLite."""
    if engine.dialect.name != "postgresql":
        return []
    async with engine.connect() as conn:
        rows = await conn.execute(
            sa.text(
                "SELECT tablename FROM pg_tables WHERE schemaname = current_schema() "
                "ORDER BY tablename"
            )
        )
        return list(rows.scalars())


async def scrub_disk(engine: AsyncEngine) -> DiskScrub:
    """Leave no copy of deleted rows in the database's files (docstring above)."""
    if engine.dialect.name != "postgresql":
        await scrub(engine)
        return DiskScrub()
    done = DiskScrub()
    autocommit = engine.execution_options(isolation_level="AUTOCOMMIT")  # VACUUM's need
    async with autocommit.connect() as conn:
        quote = conn.dialect.identifier_preparer.quote
        for table in await scrub_tables(engine):
            await conn.execute(sa.text(f"VACUUM FULL {quote(table)}"))
            done.tables.append(table)
        try:
            for _ in range(WAL_ROUNDS):
                await conn.execute(sa.text("SELECT pg_switch_wal()"))
                await conn.execute(sa.text("CHECKPOINT"))
        except DBAPIError as exc:
            if getattr(exc.orig, "sqlstate", None) != _INSUFFICIENT_PRIVILEGE:
                raise
            done.wal_left = (
                "the WAL was not reached: CHECKPOINT and pg_switch_wal() need a superuser "
                "(or the pg_checkpoint role and EXECUTE on pg_switch_wal); PostgreSQL's own "
                "checkpoints retire the old segments later"
            )
            return done
        if await conn.scalar(sa.text("SELECT current_setting('wal_recycle')")) == "on":
            done.wal_left = (
                "the old WAL segments are retired, but with wal_recycle on PostgreSQL may "
                "keep one renamed for reuse, its bytes there until new WAL overwrites them; "
                "set wal_recycle = off (ALTER SYSTEM, then SELECT pg_reload_conf()) and "
                "scrub again to have them deleted"
            )
    return done
