"""The conformance kit run on the reference provider (SQLite and PostgreSQL), which
proves the kit before the real providers land; plus the reference's own specifics."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from memory.compaction.summarizer import StaticSummarizer, SummarizerError
from memory.contract.capabilities import (
    Compactor,
    Explorer,
    NoteStore,
    ProviderContext,
    Summarizer,
    capabilities_of,
)
from memory.contract.errors import InvalidArgument
from memory.contract.tracing import with_tracing
from memory.contract.types import CompactionMode, Message, Session
from memory.testing.conformance import (
    KitSummarizer,
    ProviderConformance,
    assert_no_orphan_tool_results,
    filler,
    shapes,
    tool_exchange,
)
from memory.testing.reference import ReferenceProvider, create


def _create(engine: AsyncEngine, summarizer: Summarizer, tmp_path: Path, **config: object):
    return create(
        ProviderContext(
            engine=engine,
            summarizer=summarizer,
            data_dir=tmp_path,
            config={"keep_tail": 4, **config},
        )
    )


class TestReference(ProviderConformance):
    @pytest.fixture
    async def provider(
        self, engine: AsyncEngine, tmp_path: Path, summarizer: Summarizer
    ) -> AsyncIterator[ReferenceProvider]:
        p = _create(engine, summarizer, tmp_path)
        yield p
        await p.close()


class TestTracedReference(ProviderConformance):
    """The kit through the tracing wrapper: capabilities must survive wrapping. (SQLite
    only: the wrapper does not care about the database, TestReference covers both.)"""

    @pytest.fixture
    def db_kind(self) -> str:
        return "sqlite"

    @pytest.fixture
    async def provider(self, engine: AsyncEngine, tmp_path: Path, summarizer: Summarizer):
        p = with_tracing(_create(engine, summarizer, tmp_path), [])
        yield p
        await p.close()


class TestMinimalReference(ProviderConformance):
    """Without Compactor, Explorer and NoteStore: their tests must skip, the rest pass
    (SQLite only, as above)."""

    @pytest.fixture
    def db_kind(self) -> str:
        return "sqlite"

    @pytest.fixture
    async def provider(self, engine: AsyncEngine, tmp_path: Path, summarizer: Summarizer):
        p = _create(engine, summarizer, tmp_path, compactor=False, notes=False)
        yield p
        await p.close()


def test_config_flags_choose_capabilities(engine: AsyncEngine, tmp_path: Path) -> None:
    full = _create(engine, StaticSummarizer(), tmp_path)
    bare = _create(engine, StaticSummarizer(), tmp_path, compactor=False, notes=False)
    for cap in (Compactor, Explorer, NoteStore):
        assert isinstance(full, cap) and not isinstance(bare, cap)
    assert "ProfileStore" in capabilities_of(bare) and "Searcher" in capabilities_of(bare)


async def test_failed_summarizer_changes_nothing(engine: AsyncEngine, tmp_path: Path) -> None:
    p = _create(engine, StaticSummarizer(fail=True), tmp_path)
    s = Session(id="s1", user_id=5)
    msgs = [filler(i) for i in range(12)]
    await p.append(s, *msgs)
    before = await p.assemble(s, 10**9, 2)
    with pytest.raises(SummarizerError):
        await p.compact(s, CompactionMode.FULL)
    assert shapes(await p.assemble(s, 10**9, 2)) == shapes(before) == shapes(msgs)
    assert (await p.stats(s)).summary_count == 0


async def test_compaction_keeps_tool_exchange_whole_and_logs(
    engine: AsyncEngine, tmp_path: Path
) -> None:

    p = _create(engine, KitSummarizer(), tmp_path)
    s = Session(id="s2", user_id=5)
    # keep_tail 4 falls inside the 5-message tool exchange: the whole unit is kept.
    await p.append(s, *(filler(i) for i in range(6)), *tool_exchange("k"))
    result = await p.compact(s, CompactionMode.INCREMENTAL)
    assert result.messages_compacted == 7  # 6 fillers + the exchange's user turn
    context = await p.assemble(s, 10**9, 4)
    assert context[0].content.startswith('<summary id="')
    assert_no_orphan_tool_results(context)
    assert shapes(context[1:]) == shapes(tool_exchange("k")[1:])
    rows = await p.read_changelog(5, "default", "compaction")
    assert len(rows) == 1 and rows[0].session_id == "s2" and rows[0].action == "compact"
    # A second compaction has nothing new to take.
    assert not (await p.compact(s, CompactionMode.FULL)).changed


async def test_assemble_of_unknown_session_is_empty(engine: AsyncEngine, tmp_path: Path) -> None:
    p = _create(engine, StaticSummarizer(), tmp_path)
    assert await p.assemble(Session(id="nobody"), 100, 5) == []
    with pytest.raises(InvalidArgument, match="Message"):
        await p.append(Session(id="x"), Message(role="user", content="ok"), "not a message")  # type: ignore[arg-type]
    assert await p.load_history("x") == []  # the valid message was not stored either


async def test_stored_messages_are_copies(engine: AsyncEngine, tmp_path: Path) -> None:
    p = _create(engine, StaticSummarizer(), tmp_path)
    s = Session(id="c")
    m = Message(role="user", content="original")
    await p.append(s, m)
    m.content = "mutated by the caller"
    (await p.assemble(s, 100, 5))[0].content = "mutated by a reader"
    assert [x.content for x in await p.load_history("c")] == ["original"]
