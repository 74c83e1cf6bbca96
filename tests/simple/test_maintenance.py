"""Export/import of compact markers and their integrity checks (operator commands)."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from memory.compaction.summarizer import StaticSummarizer
from memory.contract.capabilities import ProviderContext
from memory.contract.errors import InvalidArgument
from memory.contract.types import Message, Session, utcnow
from memory.storage.db import write_transaction
from plugins.simple import SimpleProvider, markers

S = Session("s-export", "bot", 7)
T = Session("s-import", "bot", 7)


def _msgs(n: int) -> list[Message]:
    return [Message("user" if i % 2 == 0 else "assistant", f"m{i} " + "y" * 200) for i in range(n)]


async def test_export_import_round_trip_and_integrity(engine: AsyncEngine, tmp_path: Path) -> None:
    ctx = ProviderContext(engine=engine, summarizer=StaticSummarizer("## Goal\nexport me"))
    provider = SimpleProvider(ctx, store_dir=tmp_path, keep_tail=2)
    await provider.append(S, *_msgs(6))
    await provider.compact(S)
    assert await provider.export_overlay("no-such-session") is None
    data = await provider.export_overlay(S.id)
    assert data is not None and [m["through_seq"] for m in data["markers"]] == [4]
    assert "export me" in provider.overlay_markdown(data)

    await provider.append(T, *_msgs(6))
    async with write_transaction(engine) as conn:
        conv_t = await provider.history.conversation_id(T.id, conn)
        assert conv_t is not None
        with pytest.raises(InvalidArgument, match="through_seq"):
            bad = {"markers": [{**data["markers"][0], "through_seq": 99}]}
            await provider.import_overlay(conn, conv_t, bad, {i: i for i in range(1, 7)})
        await provider.import_overlay(conn, conv_t, data, {i: i for i in range(1, 7)})
    assert await provider.export_overlay(T.id) == data
    assert "export me" in (await provider.assemble(T, 10_000, 0))[0].content
    assert await provider.check_integrity() == []

    async with write_transaction(engine) as conn:
        await markers.insert(
            conn, conv_t, through_seq=50, summary="x", archive_name="a",
            archived_at=utcnow(), messages_compacted=1, source_tokens=1,
        )  # fmt: skip
    codes = sorted(f.code for f in await provider.check_integrity())
    assert codes == ["marker_beyond_history"]
