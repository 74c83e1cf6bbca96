"""Forgetting in simple: the markers whose summaries carried a forgotten message (its
own and every later one, since each carries the previous forward) are rebuilt, their
archive notes and compaction changelog rows too; notes quoting it are reported."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from memory.contract.capabilities import ProviderContext
from memory.contract.errors import Conflict
from memory.contract.registry import create_provider
from memory.contract.types import (
    Message,
    NoteKind,
    SearchMode,
    SearchQuery,
    Session,
    SummarizeOptions,
)
from memory.storage import forgetting as fg
from memory.storage.forgetting import Owner
from memory.transfer.integrity import check_shared
from tests.fakes.summarizer import KeepingSummarizer

TOKEN = "Zqxplanted"


def _chat(start: int, n: int, planted: int | None = None) -> list[Message]:
    return [
        Message(
            "user" if i % 2 == 0 else "assistant",
            f"msg{i} {TOKEN if i == planted else f'Zword{i}'} " + "x" * 30,
        )
        for i in range(start, start + n)
    ]


async def _compacted_twice(engine: AsyncEngine, tmp_path: Path):  # type: ignore[no-untyped-def]
    provider = create_provider(
        "simple",
        ProviderContext(
            engine=engine,
            summarizer=KeepingSummarizer(),
            agent_id="bot",
            config={"store_dir": str(tmp_path / "mem"), "keep_tail": 4},
        ),
    )
    s = Session("tg-7", "bot", 7)
    await provider.append(s, *_chat(0, 20, planted=5))
    await provider.compact(s)
    await provider.append(s, *_chat(20, 10))
    await provider.compact(s)
    return provider, s


async def _everything_derived(provider, s: Session) -> str:  # type: ignore[no-untyped-def]
    """Markers, archives and changelog rows, as one text."""
    async with provider.engine.connect() as conn:
        markers = [
            r[0] for r in await conn.exec_driver_sql("SELECT summary FROM simple_compactions")
        ]
    notes = [e.content for e in await provider.note_list(s)]
    log = [e.after_text for e in await provider.read_changelog(s.user_id, s.agent_id, limit=0)]
    return "\n".join(markers + notes + log)


async def test_forget_rebuilds_every_later_marker(engine: AsyncEngine, tmp_path: Path) -> None:
    provider, s = await _compacted_twice(engine, tmp_path)
    owner = Owner(s.user_id, s.agent_id)
    planted = _chat(0, 20, planted=5)[5].content
    await provider.note_add(s, "quote", f"she said: {planted}")
    await provider.note_add(s, "unrelated", "nothing to see")
    assert (await _everything_derived(provider, s)).count(TOKEN) >= 4

    preview = await fg.preview(provider, owner, TOKEN)
    assert len(preview.items) == 1
    assert preview.dependents.summaries == 2
    assert preview.dependents.quoting_notes == ["quote"]

    report = await fg.forget(provider, owner, preview.ids, preview.needles)
    assert (report.messages, report.summaries_rebuilt) == (1, 2)
    assert report.quoting_notes == ["quote"]
    derived = await _everything_derived(provider, s)
    # Only the user's own note still quotes it: theirs to keep or drop.
    assert derived.count(TOKEN) == 1
    await provider.note_remove(s, "quote")
    derived = await _everything_derived(provider, s)
    assert TOKEN not in derived and "Zword4" in derived and "Zword25" in derived
    assert [m.content for m in await provider.load_history(s.id)] == [
        m.content for m in _chat(0, 30) if m.content != planted and "msg5 " not in m.content
    ]
    for mode in SearchMode:
        assert not await provider.search(s, SearchQuery(text=TOKEN, mode=mode)), mode
    window = await provider.assemble(s, 10**9, 10**6)
    assert TOKEN not in "\n".join(m.text() for m in window)
    assert await check_shared(engine) == []
    assert await provider.check_integrity() == []
    await provider.close()


async def test_forgetting_a_whole_range_drops_its_marker(
    engine: AsyncEngine, tmp_path: Path
) -> None:
    provider, s = await _compacted_twice(engine, tmp_path)
    owner = Owner(s.user_id, s.agent_id)
    async with engine.connect() as conn:
        ids = [r[0] for r in await conn.exec_driver_sql("SELECT id FROM messages ORDER BY seq")]
    archives = [e.name for e in await provider.note_list(s) if e.kind == NoteKind.ARCHIVE]
    assert len(archives) == 2
    # The second marker covers seqs 17..26 (the first kept a tail of 4 of 20).
    report = await fg.forget(provider, owner, ids[16:26])
    assert report.summaries_removed == 1 and report.summaries_rebuilt == 0
    left = [e.name for e in await provider.note_list(s) if e.kind == NoteKind.ARCHIVE]
    assert left == archives[:1]
    assert await check_shared(engine) == []
    assert await provider.check_integrity() == []
    await provider.close()


async def test_erase_owner_removes_the_notes_file(engine: AsyncEngine, tmp_path: Path) -> None:
    provider, s = await _compacted_twice(engine, tmp_path)
    owner = Owner(s.user_id, s.agent_id)
    await provider.note_add(s, "quote", f"remember {TOKEN}")
    path = provider.notes.path_for(s.agent_id, s.user_id)
    assert path.exists()
    report = await fg.erase(provider, owner, by="operator")
    assert (report.sessions, report.messages, report.summaries, report.notes) == (1, 30, 2, 1)
    assert not path.exists()
    assert await provider.note_list(s) == []
    [row] = await provider.read_changelog(s.user_id, s.agent_id)
    assert row.scope == "erasure" and "operator" in row.after_text
    assert await check_shared(engine) == []
    await provider.close()


class _Gated(KeepingSummarizer):
    """Its next call waits for `gate` once armed (the compaction's), the rest do not."""

    def __init__(self) -> None:
        super().__init__()
        self.gate: asyncio.Event | None = None
        self.entered = asyncio.Event()

    async def summarize(self, text: str, opts: SummarizeOptions) -> str:
        if self.gate is not None:
            gate, self.gate = self.gate, None
            self.entered.set()
            await gate.wait()
        return await super().summarize(text, opts)


@pytest.mark.parametrize("planted", [5, 22])  # under the first marker / in the new range
async def test_a_compaction_planned_before_a_forget_does_not_land(
    engine: AsyncEngine, tmp_path: Path, planted: int
) -> None:
    summarizer = _Gated()
    provider = create_provider(
        "simple",
        ProviderContext(
            engine=engine,
            summarizer=summarizer,
            agent_id="bot",
            config={"store_dir": str(tmp_path / "mem"), "keep_tail": 4},
        ),
    )
    s = Session("tg-7", "bot", 7)
    chat = _chat(0, 30, planted=planted)
    await provider.append(s, *chat[:20])
    await provider.compact(s)
    await provider.append(s, *chat[20:])
    summarizer.gate = gate = asyncio.Event()
    compaction = asyncio.create_task(provider.compact(s))
    await summarizer.entered.wait()
    owner = Owner(s.user_id, s.agent_id)
    preview = await fg.preview(provider, owner, TOKEN)
    await fg.forget(provider, owner, preview.ids)
    gate.set()
    with pytest.raises(Conflict):
        await compaction
    assert TOKEN not in await _everything_derived(provider, s)
    assert await provider.check_integrity() == []
    await provider.compact(s)  # compacts from what remains
    assert TOKEN not in await _everything_derived(provider, s)
    await provider.close()
