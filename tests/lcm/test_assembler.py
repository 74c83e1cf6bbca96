"""Assembler: the summary XML, the budget, and a cost bounded by the window."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import sqlalchemy as sa

from memory.contract.types import CompactionMode, Message
from memory.text.tokens import message_tokens
from tests.lcm.conftest import CountingSummarizer, context_view, numbered, session, summary_id_of


async def test_summaries_are_the_seed_xml_user_message(make_provider) -> None:
    class Quoting:
        async def summarize(self, text, opts):  # noqa: ANN001, ANN202
            return 'a < b & "c" </content></summary> end'

    p = make_provider(Quoting(), keep_tail=2, leaf_chunk_size=4, condensed_min=2)
    s = session()
    msgs = numbered(10)
    await p.append(s, *msgs)
    await p.compact(s, CompactionMode.INCREMENTAL)
    window = await p.assemble(s, 10**6, 2)
    first = window[0]
    assert first.role == "user"
    node = ET.fromstring(first.content)  # well-formed despite the hostile summary text
    assert node.tag == "summary"
    assert node.get("id") == summary_id_of(first)
    assert (node.get("kind"), node.get("depth")) == ("condensed", "1")
    assert node.get("earliest_at") == msgs[0].created_at.isoformat()
    assert node.get("latest_at") == msgs[7].created_at.isoformat()
    assert node.find("parents") is not None and list(node.find("parents")) == []
    children = [ref.get("id") for ref in node.find("children")]
    described = await p.describe(node.get("id"), s)
    assert children == described.child_ids and len(children) == 2
    assert node.find("content").text.strip() == 'a < b & "c" </content></summary> end'
    assert [m.content for m in window[1:]] == [m.content for m in msgs[8:]]


async def test_budget_takes_newest_first_and_stops_at_the_first_misfit(make_provider) -> None:
    p = make_provider(CountingSummarizer(), keep_tail=4, leaf_chunk_size=4)
    s = session()
    msgs = numbered(20)
    await p.append(s, *msgs)
    await p.compact(s, CompactionMode.INCREMENTAL)
    full = await p.assemble(s, 10**9, 10**6)
    costs = [message_tokens(m) for m in full]
    # Fresh tail of 2 plus exactly the next three older items.
    budget = sum(costs[-5:])
    window = await p.assemble(s, budget, 2)
    assert [m.content for m in window] == [m.content for m in full[-5:]]
    assert sum(message_tokens(m) for m in window) <= budget
    # One token less: the oldest of those no longer fits, and nothing older is taken.
    window = await p.assemble(s, budget - 1, 2)
    assert [m.content for m in window] == [m.content for m in full[-4:]]


async def test_summary_items_count_at_their_rendered_size(make_provider) -> None:
    p = make_provider(CountingSummarizer(), keep_tail=2, leaf_chunk_size=4, condensed_min=9)
    s = session()
    await p.append(s, *numbered(6))
    await p.compact(s, CompactionMode.INCREMENTAL)
    view = await context_view(p, s)
    assert view[0].startswith("sum_")
    full = await p.assemble(s, 10**9, 2)
    summary_cost = message_tokens(full[0])
    described = await p.describe(view[0], s)
    assert summary_cost > described.token_count  # the XML wrapper is paid for too
    tail_cost = sum(message_tokens(m) for m in full[1:])
    assert len(await p.assemble(s, tail_cost + summary_cost - 1, 2)) == 2
    assert len(await p.assemble(s, tail_cost + summary_cost, 2)) == 3


async def test_fresh_tail_over_budget_and_unknown_session(make_provider) -> None:
    p = make_provider()
    s = session()
    assert await p.assemble(s, 1000, 5) == []
    msgs = numbered(6)
    await p.append(s, *msgs)
    assert [m.content for m in await p.assemble(s, 0, 3)] == [m.content for m in msgs[-3:]]
    assert await p.assemble(s, 0, 0) == []
    assert [m.content for m in await p.assemble(s, -5, 1)] == [msgs[-1].content]


async def test_reasoning_and_tool_calls_come_back_exactly(make_provider) -> None:
    p = make_provider()
    s = session()
    from memory.contract.types import ToolCall

    msgs = [
        Message("user", "hi"),
        Message("assistant", "", tool_calls=[ToolCall("c1", "f", '{"a": 1}')], reasoning="why"),
        Message("tool", "42", tool_call_id="c1", name="f"),
    ]
    await p.append(s, *msgs)
    out = await p.assemble(s, 10**6, 10)
    assert [
        (m.role, m.content, m.tool_calls, m.tool_call_id, m.name, m.reasoning) for m in out
    ] == [(m.role, m.content, m.tool_calls, m.tool_call_id, m.name, m.reasoning) for m in msgs]


async def test_work_depends_on_the_window_not_the_history(make_provider, engine) -> None:
    """The same window over a short and a ten times longer history costs the same
    statements with the same number of parameters (page limits and id lists): nothing
    in assemble grows with the history."""
    p = make_provider(keep_tail=4)
    short, long_ = session("short"), session("long")
    await p.append(short, *numbered(60))
    for start in range(0, 600, 100):
        await p.append(long_, *numbered(100, start=start))

    async def profile(s) -> list[tuple[str, int]]:
        rows: list[tuple[str, int]] = []

        def count(conn, cursor, statement, params, context, executemany):  # noqa: ANN001
            rows.append((statement.split()[0], len(params or ())))

        sa.event.listen(engine.sync_engine, "before_cursor_execute", count)
        try:
            out = await p.assemble(s, 300, 4)
        finally:
            sa.event.remove(engine.sync_engine, "before_cursor_execute", count)
        assert 4 <= len(out) < 40
        return rows

    assert await profile(short) == await profile(long_)
