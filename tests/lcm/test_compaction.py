"""Compaction: passes, protected tail, tool-call groups, failures, and concurrency."""

from __future__ import annotations

import asyncio

import pytest

from memory.compaction.summarizer import SummarizerError
from memory.contract.types import CompactionMode, CompactionResult, Message, ToolCall
from memory.text.tokens import estimate_tokens
from tests.lcm.conftest import (
    CountingSummarizer,
    context_view,
    dump_tables,
    expand_all,
    numbered,
    reconstruct,
    session,
    summary_id_of,
)
from tests.waits import scaled

INCREMENTAL, FULL = CompactionMode.INCREMENTAL, CompactionMode.FULL


async def test_incremental_is_one_leaf_and_one_condensed_pass(make_provider) -> None:
    summarizer = CountingSummarizer()
    p = make_provider(summarizer, keep_tail=4, leaf_chunk_size=4)
    s = session()
    msgs = numbered(30)
    await p.append(s, *msgs)
    before = (await p.stats(s)).context_tokens

    result = await p.compact(s, INCREMENTAL)

    # 26 messages outside the tail: six chunks of 4 (2 wait for more), then the six
    # leaves condense in groups of at most 4: one of 4 and one of 2.
    assert (result.leaf_summaries_created, result.condensed_summaries_created) == (6, 2)
    assert result.messages_compacted == 24
    assert summarizer.calls == 8
    assert result.tokens_before == before
    assert result.tokens_after == (await p.stats(s)).context_tokens < before
    view = await context_view(p, s)
    assert view[2:] == [m.content for m in msgs[24:]]
    d1, d2 = [await p.describe(v, s) for v in view[:2]]
    assert (d1.kind, d1.depth, len(d1.child_ids)) == ("condensed", 1, 4)
    assert (d2.kind, d2.depth, len(d2.child_ids)) == ("condensed", 1, 2)
    assert d1.descendant_count == 16 and d2.descendant_count == 8
    assert await reconstruct(p, s) == [m.content for m in msgs]
    stats = await p.stats(s)
    assert (stats.message_count, stats.summary_count) == (30, 8)


async def test_full_repeats_until_nothing_changes(make_provider) -> None:
    p = make_provider(CountingSummarizer(), keep_tail=4, leaf_chunk_size=4)
    s = session()
    msgs = numbered(68)
    await p.append(s, *msgs)
    result = await p.compact(s, FULL)
    # 64 messages -> 16 leaves -> 4 -> 1: one summary covers everything outside the tail.
    assert (result.leaf_summaries_created, result.condensed_summaries_created) == (16, 5)
    view = await context_view(p, s)
    assert len(view) == 5 and view[1:] == [m.content for m in msgs[-4:]]
    assert (await p.describe(view[0], s)).depth == 2
    assert await reconstruct(p, s) == [m.content for m in msgs]
    again = await p.compact(s, FULL)
    assert not again.changed and again.tokens_before == again.tokens_after > 0


async def test_later_leaves_condense_with_earlier_ones(make_provider) -> None:
    p = make_provider(CountingSummarizer(), keep_tail=2, leaf_chunk_size=4)
    s = session()
    history: list[Message] = []
    for turn in range(5):
        batch = numbered(6, start=turn * 6)
        history += batch
        await p.append(s, *batch)
        await p.compact(s, INCREMENTAL)
    assert await reconstruct(p, s) == [m.content for m in history]
    view = await context_view(p, s)
    assert view[-2:] == [m.content for m in history[-2:]]


async def test_fresh_tail_is_never_compacted(make_provider) -> None:
    p = make_provider(CountingSummarizer(), keep_tail=7, leaf_chunk_size=2)
    s = session()
    msgs = numbered(21)
    await p.append(s, *msgs)
    await p.compact(s, FULL)
    view = await context_view(p, s)
    assert view[-7:] == [m.content for m in msgs[-7:]]
    covered = [c for item in view if item.startswith("sum_") for c in await expand_all(p, item)]
    assert covered == [m.content for m in msgs[:-7]]


def _tool_turn(tag: str) -> list[Message]:
    return [
        Message(role="user", content=f"{tag} question"),
        Message(role="assistant", content="", tool_calls=[ToolCall(f"{tag}-c", "lookup", "{}")]),
        Message(role="tool", content=f"{tag} result", tool_call_id=f"{tag}-c", name="lookup"),
        Message(role="assistant", content=f"{tag} answer"),
    ]


async def test_a_tool_call_and_its_result_stay_together(make_provider) -> None:
    p = make_provider(CountingSummarizer(), keep_tail=1, leaf_chunk_size=2, condensed_min=10)
    s = session()
    # Chunks of two would cut between a call and its result, and a tail of one would
    # start at a tool result: both are widened instead.
    msgs = _tool_turn("a") + _tool_turn("b") + _tool_turn("c")[:3]
    await p.append(s, *msgs)
    await p.compact(s, INCREMENTAL)
    window = await p.assemble(s, 10**9, 10**6)
    assert [(m.role, m.content) for m in window[-2:]] == [("assistant", ""), ("tool", "c result")]
    leaves = [summary_id_of(m) for m in window[:-2]]
    roles = [[m.role for m in (await p.expand(sid, 10**6, s)).messages] for sid in leaves]
    assert roles == [
        ["user", "assistant", "tool"],
        ["assistant", "user"],
        ["assistant", "tool"],
        ["assistant", "user"],
    ]


async def test_summarizer_failure_leaves_every_table_identical(make_provider, engine) -> None:
    p = make_provider(CountingSummarizer(fail_on=5), keep_tail=2, leaf_chunk_size=2)
    s = session()
    await p.append(s, *numbered(30))
    before = await dump_tables(engine)
    with pytest.raises(SummarizerError):
        await p.compact(s, FULL)
    assert await dump_tables(engine) == before


async def test_empty_summary_is_a_failure_not_a_summary(make_provider, engine) -> None:
    class Blank:
        async def summarize(self, text, opts):  # noqa: ANN001, ANN202
            return "   "

    p = make_provider(Blank())
    s = session()
    await p.append(s, *numbered(12))
    before = await dump_tables(engine)
    with pytest.raises(SummarizerError):
        await p.compact(s, INCREMENTAL)
    assert await dump_tables(engine) == before


async def test_append_lands_while_the_summarizer_is_thinking(make_provider) -> None:
    gate = asyncio.Event()
    summarizer = CountingSummarizer(gate=gate)
    p = make_provider(summarizer, keep_tail=4, leaf_chunk_size=4)
    s = session()
    msgs = numbered(12)
    await p.append(s, *msgs)
    task = asyncio.create_task(p.compact(s, INCREMENTAL))
    await summarizer.entered.wait()
    late = numbered(3, start=100, word="late")
    # Would deadlock (and hit the timeout) if compaction held the session's lock.
    await asyncio.wait_for(p.append(s, *late), timeout=scaled(60))
    gate.set()
    result = await task
    assert result.leaf_summaries_created == 2 and result.messages_compacted == 8
    view = await context_view(p, s)
    assert view[-7:] == [m.content for m in msgs[8:] + late]
    assert await reconstruct(p, s) == [m.content for m in msgs + late]


async def test_a_plan_overtaken_by_another_compaction_is_skipped(make_provider) -> None:
    gate = asyncio.Event()
    summarizer = CountingSummarizer(gate=gate)
    p = make_provider(summarizer, keep_tail=4, leaf_chunk_size=4)
    s = session()
    msgs = numbered(12)
    await p.append(s, *msgs)
    slow = asyncio.create_task(p.compact(s, INCREMENTAL))
    await summarizer.entered.wait()
    fast = await p.compact(s, INCREMENTAL)  # the gate holds only the first call
    assert fast.leaf_summaries_created == 2
    gate.set()
    overtaken = await slow
    assert not overtaken.changed and overtaken.tokens_after == (await p.stats(s)).context_tokens
    stats = await p.stats(s)
    assert stats.summary_count == fast.leaf_summaries_created + fast.condensed_summaries_created
    assert await reconstruct(p, s) == [m.content for m in msgs]


async def test_nothing_to_compact_changes_nothing_and_gives_the_size(make_provider) -> None:
    summarizer = CountingSummarizer()
    p = make_provider(summarizer, keep_tail=4, leaf_chunk_size=4)
    s = session()
    assert await p.compact(s, FULL) == CompactionResult()  # unknown session
    await p.append(s, *numbered(7))  # 3 outside the tail: fewer than a chunk
    result = await p.compact(s, FULL)
    assert not result.changed and result.duration_s == 0
    # /compact answers "nothing to compact (N tokens in context)" with it
    assert result.tokens_before == result.tokens_after == (await p.stats(s)).context_tokens > 0
    assert summarizer.calls == 0


async def test_needs_compaction_and_changelog(make_provider) -> None:
    p = make_provider(CountingSummarizer())
    s = session()
    assert not await p.needs_compaction(s, 0)
    await p.append(s, *numbered(10))
    tokens = (await p.stats(s)).context_tokens
    assert await p.needs_compaction(s, tokens - 1)
    assert not await p.needs_compaction(s, tokens)
    assert not await p.needs_compaction(s, -1)
    result = await p.compact(s, FULL)
    [entry] = await p.read_changelog(s.user_id, s.agent_id, scope="compaction")
    assert (entry.action, entry.session_id) == ("compact", s.id)
    assert f"{result.tokens_after} context tokens" in entry.after_text


async def test_summarizer_gets_targets_and_previous_summary(make_provider) -> None:
    summarizer = CountingSummarizer()
    p = make_provider(summarizer, keep_tail=0, leaf_chunk_size=4, condensed_min=3)
    s = session()
    msgs = numbered(8)
    await p.append(s, *msgs)
    await p.compact(s, INCREMENTAL)
    (text1, opts1), (text2, opts2) = summarizer.inputs
    assert "msg0" in text1 and "msg3" in text1 and "msg4" not in text1
    assert not opts1.is_condensed and opts1.previous == ""
    source_tokens = sum(estimate_tokens(m.content) for m in msgs[:4])
    assert opts1.target_tokens == source_tokens // 3
    assert "msg4" in text2 and opts2.previous.startswith("S1[")
    assert len(await context_view(p, s)) == 2  # two leaves: fewer than condensed_min


async def test_bad_config_is_a_clear_error(engine) -> None:
    from memory.contract.capabilities import ProviderContext
    from memory.contract.errors import InvalidArgument
    from plugins.lcm import create

    for bad in ({"leaf_chunk_size": 1}, {"keep_tail": -1}, {"condensed_min": "3"}):
        with pytest.raises(InvalidArgument, match=next(iter(bad))):
            create(ProviderContext(engine=engine, summarizer=CountingSummarizer(), config=bad))
