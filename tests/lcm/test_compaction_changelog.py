"""A compaction and its changelog row commit together, or neither does."""

from __future__ import annotations

import pytest

from memory.contract.types import CompactionMode, Scope
from tests.lcm.conftest import dump_tables, numbered, session


async def test_compaction_is_recorded_in_its_own_transaction(make_provider, engine) -> None:
    provider = make_provider(keep_tail=4, leaf_chunk_size=4)
    s = session()
    await provider.append(s, *numbered(20))
    result = await provider.compact(s, CompactionMode.FULL)
    assert result.changed
    [row] = await provider.read_changelog(s.user_id, s.agent_id, Scope.COMPACTION)
    assert row.session_id == s.id and row.action == "compact"
    assert row.before_text == f"{result.tokens_before} context tokens"


async def test_a_failing_record_rolls_the_compaction_back(
    make_provider, engine, monkeypatch
) -> None:
    provider = make_provider(keep_tail=4, leaf_chunk_size=4)
    s = session()
    await provider.append(s, *numbered(20))
    before = await dump_tables(engine)

    async def broken(conn, entry) -> None:
        raise RuntimeError("changelog unavailable")

    monkeypatch.setattr(provider, "record_changelog", broken)
    with pytest.raises(RuntimeError):
        await provider.compact(s, CompactionMode.FULL)
    assert await dump_tables(engine) == before
