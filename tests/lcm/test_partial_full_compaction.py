"""A full compaction keeps the rounds it finished when a later round fails."""

from __future__ import annotations

import pytest

from memory.compaction.summarizer import SummarizerError
from memory.contract.errors import CompactionIncomplete
from memory.contract.types import CompactionMode, Scope
from memory.transfer.integrity import check_shared
from tests.lcm.conftest import (
    CountingSummarizer,
    context_view,
    dump_tables,
    numbered,
    reconstruct,
    session,
)

FULL, INCREMENTAL = CompactionMode.FULL, CompactionMode.INCREMENTAL

# keep_tail=4, leaf_chunk_size=4, 132 messages: 128 outside the tail. Round 1 makes 32
# leaves and condenses them into 8 (calls 1-40), round 2 condenses those into 2 (41-42),
# round 3 would make the last one (43).
MESSAGES, ROUND_3_CALL = 132, 43


async def _clean(provider, engine) -> None:  # noqa: ANN001
    assert await provider.check_integrity() == []
    assert await check_shared(engine) == []


async def test_a_failure_in_round_three_keeps_rounds_one_and_two(make_provider, engine) -> None:
    p = make_provider(CountingSummarizer(fail_on=ROUND_3_CALL))
    s = session()
    msgs = numbered(MESSAGES)
    await p.append(s, *msgs)
    before = (await p.stats(s)).context_tokens

    with pytest.raises(CompactionIncomplete) as caught:
        await p.compact(s, FULL)

    assert isinstance(caught.value.__cause__, SummarizerError)
    kept = caught.value.result
    assert (kept.leaf_summaries_created, kept.condensed_summaries_created) == (32, 10)
    assert kept.messages_compacted == 128
    stats = await p.stats(s)
    assert kept.tokens_before == before
    assert kept.tokens_after == stats.context_tokens < before
    assert stats.summary_count == 42
    view = await context_view(p, s)
    assert len(view) == 2 + 4 and view[2:] == [m.content for m in msgs[-4:]]
    assert [(await p.describe(v, s)).depth for v in view[:2]] == [2, 2]
    assert await reconstruct(p, s) == [m.content for m in msgs]
    await _clean(p, engine)
    # One changelog row per applied round, none for the round that failed.
    rows = await p.read_changelog(s.user_id, s.agent_id, Scope.COMPACTION)
    assert len(rows) == 2

    # A second /compact with a working summarizer finishes the job.
    again = await make_provider(CountingSummarizer()).compact(s, FULL)
    assert (again.leaf_summaries_created, again.condensed_summaries_created) == (0, 1)
    assert again.tokens_before == stats.context_tokens
    view = await context_view(p, s)
    assert len(view) == 1 + 4 and (await p.describe(view[0], s)).depth == 3
    assert await reconstruct(p, s) == [m.content for m in msgs]
    await _clean(p, engine)
    assert len(await p.read_changelog(s.user_id, s.agent_id, Scope.COMPACTION)) == 3


async def test_a_failure_inside_a_round_applies_none_of_that_round(make_provider, engine) -> None:
    # Call 42 is round 2's second condensed summary: its first (call 41) is dropped too.
    p = make_provider(CountingSummarizer(fail_on=ROUND_3_CALL - 1))
    s = session()
    msgs = numbered(MESSAGES)
    await p.append(s, *msgs)
    with pytest.raises(CompactionIncomplete) as caught:
        await p.compact(s, FULL)
    kept = caught.value.result
    assert (kept.leaf_summaries_created, kept.condensed_summaries_created) == (32, 8)
    assert (await p.stats(s)).summary_count == 40
    view = await context_view(p, s)
    assert [(await p.describe(v, s)).depth for v in view[:-4]] == [1] * 8
    assert await reconstruct(p, s) == [m.content for m in msgs]
    await _clean(p, engine)


async def test_a_failure_in_the_first_round_raises_itself_and_changes_nothing(
    make_provider, engine
) -> None:
    p = make_provider(CountingSummarizer(fail_on=40))  # round 1's last condensed summary
    s = session()
    await p.append(s, *numbered(MESSAGES))
    before = await dump_tables(engine)
    with pytest.raises(SummarizerError):
        await p.compact(s, FULL)
    assert await dump_tables(engine) == before


async def test_incremental_with_a_failing_summarizer_still_changes_nothing(
    make_provider, engine
) -> None:
    p = make_provider(CountingSummarizer(fail_on=36))  # after 32 leaves, among the condensed
    s = session()
    await p.append(s, *numbered(MESSAGES))
    before = await dump_tables(engine)
    with pytest.raises(SummarizerError):
        await p.compact(s, INCREMENTAL)
    assert await dump_tables(engine) == before


async def test_a_failing_changelog_record_in_a_later_round_keeps_the_earlier_ones(
    make_provider, engine, monkeypatch
) -> None:
    p = make_provider(CountingSummarizer())
    s = session()
    msgs = numbered(MESSAGES)
    await p.append(s, *msgs)
    record = p.record_changelog
    calls = 0

    async def second_fails(conn, entry) -> None:  # noqa: ANN001
        nonlocal calls
        calls += 1
        if calls == 2:
            raise RuntimeError("changelog unavailable")
        await record(conn, entry)

    monkeypatch.setattr(p, "record_changelog", second_fails)
    with pytest.raises(CompactionIncomplete) as caught:
        await p.compact(s, FULL)
    assert isinstance(caught.value.__cause__, RuntimeError)
    assert caught.value.result.condensed_summaries_created == 8  # round 2 rolled back
    assert (await p.stats(s)).summary_count == 40
    assert len(await p.read_changelog(s.user_id, s.agent_id, Scope.COMPACTION)) == 1
    assert await reconstruct(p, s) == [m.content for m in msgs]
    await _clean(p, engine)
