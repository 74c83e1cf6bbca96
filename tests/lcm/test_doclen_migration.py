"""lcm_0003 (PostgreSQL document lengths for BM25) on a database that already has rows:
they are backfilled, so search ranks them by BM25 at once, and new rows are indexed too."""

from __future__ import annotations

from alembic import command

from memory.compaction.summarizer import TruncatingSummarizer
from memory.contract.capabilities import ProviderContext
from memory.contract.types import Message, SearchQuery
from memory.storage.db import _alembic_config, create_engine, migrate, write_transaction
from plugins.lcm import create
from tests.lcm.conftest import session


def _upgrade_to_lcm_0002(sync_conn) -> None:  # type: ignore[no-untyped-def]
    cfg = _alembic_config(sync_conn)
    command.upgrade(cfg, "core@head")
    command.upgrade(cfg, "lcm_0002")


async def test_upgrade_backfills_document_lengths(db_url: str) -> None:
    engine = create_engine(db_url)
    s = session()
    try:
        async with write_transaction(engine) as conn:
            await conn.run_sync(_upgrade_to_lcm_0002)
        ctx = ProviderContext(engine=engine, summarizer=TruncatingSummarizer(), config={})
        old = create(ctx)
        await old.append(
            s,
            Message("user", "kestrel sighting today"),
            Message("user", "kestrel " + " ".join(f"word{i}" for i in range(60))),
        )
        await old.close()

        await migrate(engine)

        p = create(ctx)
        try:
            hits = await p.search(s, SearchQuery("kestrel", limit=10))
            assert [h.content for h in hits][:1] == ["kestrel sighting today"]
            assert hits[0].score > hits[1].score > 0
            # (after a short message: a message's context counts in its length)
            await p.append(s, Message("assistant", "noted"), Message("user", "a kestrel"))
            hits = await p.search(s, SearchQuery("kestrel", limit=10))
            assert [h.content for h in hits][:2] == ["a kestrel", "kestrel sighting today"]
        finally:
            await p.close()
    finally:
        await engine.dispose()
