"""Core 0009 and lcm_0006 on a database that already has rows: the SQLite index is
rebuilt with the shared stemmer (PostgreSQL's stems), and tool-call rows leave the index
on both databases."""

from __future__ import annotations

from alembic import command

from memory.compaction.summarizer import TruncatingSummarizer
from memory.contract.capabilities import ProviderContext
from memory.contract.types import Message, SearchMode, SearchQuery, ToolCall
from memory.storage.db import _alembic_config, create_engine, migrate, write_transaction
from plugins.lcm import create
from tests.lcm.conftest import session


def _upgrade_to_before(sync_conn) -> None:  # type: ignore[no-untyped-def]
    cfg = _alembic_config(sync_conn)
    command.upgrade(cfg, "0008_forget_requests")
    command.upgrade(cfg, "lcm_0005")


async def test_upgrade_reindexes_stems_and_drops_tool_call_rows(db_url: str) -> None:
    engine = create_engine(db_url)
    s = session()
    try:
        async with write_transaction(engine) as conn:
            await conn.run_sync(_upgrade_to_before)
        ctx = ProviderContext(engine=engine, summarizer=TruncatingSummarizer(), config={})
        old = create(ctx)
        call = ToolCall(id="c1", name="memory", arguments="{}")
        await old.append(
            s,
            Message("user", "we saw two octopuses at the aquarium"),
            Message("assistant", "", tool_calls=[call]),
            Message("tool", "1 result", tool_call_id="c1", name="memory"),
            Message("assistant", "lovely"),
            *(Message("user", f"small talk number {i}") for i in range(6)),
        )
        await old.close()

        await migrate(engine)

        p = create(ctx)
        try:
            hits = await p.search(s, SearchQuery("octopus", mode=SearchMode.FULL_TEXT))
            # Found by its stem on both databases; the tool-call row, whose context held
            # the word, is gone; the answer after it is found through that context.
            assert [h.content.split(" (after:")[0] for h in hits] == [
                "we saw two octopuses at the aquarium",
                "lovely",
            ]
            await p.append(s, Message("user", "an octopus again"))
            hits = await p.search(s, SearchQuery("octopuses", mode=SearchMode.FULL_TEXT))
            assert "an octopus again" in [h.content for h in hits]
        finally:
            await p.close()
    finally:
        await engine.dispose()
