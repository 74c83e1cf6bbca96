"""No trace in the bytes: a unique token, planted in a message that was compacted into
summaries, searched and embedded, is forgotten; then no live row of any table holds it
(both databases, both providers) and, on SQLite, neither do the database file and its
WAL, byte for byte (FTS5 index segments, free pages and old WAL frames included)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from memory.contract.capabilities import ProviderContext
from memory.contract.registry import create_provider
from memory.contract.types import CompactionMode, Message, SearchQuery, Session
from memory.storage import forgetting as fg
from memory.storage.forgetting import Owner
from memory.transfer.session import export_session, render_markdown
from tests.fakes.summarizer import KeepingSummarizer

TOKEN = "Zqxuniqueplanted"
# What any copy would hold: the word itself, or the stem FTS5's porter tokenizer and
# PostgreSQL's english configuration index it under ("zqxuniqueplant").
NEEDLE = TOKEN.lower()[:-2]


def _provider(name: str, engine: AsyncEngine, tmp_path: Path):  # type: ignore[no-untyped-def]
    config = {"keep_tail": 4, "store_dir": str(tmp_path / "mem")}
    if name == "lcm":
        config = {"keep_tail": 4, "leaf_chunk_size": 4, "condensed_min": 2}
    return create_provider(
        name, ProviderContext(engine=engine, summarizer=KeepingSummarizer(), config=config)
    )


async def _live_rows_holding(engine: AsyncEngine, needle: str) -> list[str]:
    def scan(sync_conn) -> list[str]:  # type: ignore[no-untyped-def]
        found = []
        for name in sa.inspect(sync_conn).get_table_names():
            for row in sync_conn.exec_driver_sql(f'SELECT * FROM "{name}"'):
                if needle in repr(tuple(row)).lower():
                    found.append(name)
        return found

    async with engine.connect() as conn:
        return await conn.run_sync(scan)


@pytest.mark.parametrize("provider_name", ["lcm", "simple"])
async def test_a_forgotten_token_leaves_no_trace(
    engine: AsyncEngine, tmp_path: Path, provider_name: str
) -> None:
    provider = _provider(provider_name, engine, tmp_path)
    s = Session("tg-7", "default", 7)
    chat = [
        Message("user" if i % 2 == 0 else "assistant", f"msg{i} Zword{i} " + "x" * 30)
        for i in range(30)
    ]
    chat[7] = Message("assistant", f"the code is {TOKEN}, keep it")
    chat[8] = Message("user", "and what was the code again?")  # its search context quotes it
    await provider.append(s, *chat)
    await provider.compact(s, CompactionMode.FULL)
    await provider.append(s, *(Message("user", f"later {i} Zlater{i}") for i in range(8)))
    await provider.compact(s, CompactionMode.FULL)
    assert await provider.search(s, SearchQuery(text=TOKEN))
    assert await _live_rows_holding(engine, NEEDLE)
    assert NEEDLE in json.dumps(await export_session(engine, s.id, provider)).lower()

    owner = Owner(s.user_id, s.agent_id)
    preview = await fg.preview(provider, owner, TOKEN)
    await fg.forget(provider, owner, preview.ids, preview.needles)

    assert await _live_rows_holding(engine, NEEDLE) == []
    exported = await export_session(engine, s.id, provider)
    assert NEEDLE not in json.dumps(exported).lower()
    assert NEEDLE not in render_markdown(exported, provider).lower()
    assert not await provider.search(s, SearchQuery(text=TOKEN))
    for notes in (tmp_path / "mem").rglob("*"):  # simple's notes files (archives)
        if notes.is_file():
            assert NEEDLE.encode() not in notes.read_bytes().lower(), notes
    if engine.dialect.name == "sqlite":
        database = Path(str(engine.url.database))
        for path in (database, Path(f"{database}-wal")):
            if path.exists():
                assert NEEDLE.encode() not in path.read_bytes().lower(), path
    await provider.close()
