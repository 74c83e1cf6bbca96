"""describe / expand: decided DAG semantics, token caps, ownership, and the reviewer."""

from __future__ import annotations

import pytest

from memory.contract.errors import InvalidArgument, NotFound
from memory.contract.types import CompactionMode, Message, ToolCall
from memory.contract.types import utcnow as now
from tests.lcm.conftest import CountingSummarizer, context_view, numbered, session


async def _tree(make_provider):  # noqa: ANN202 - (provider, session, msgs, top id)
    p = make_provider(CountingSummarizer(), keep_tail=2, leaf_chunk_size=4)
    s = session()
    msgs = numbered(10)
    await p.append(s, *msgs)
    await p.compact(s, CompactionMode.INCREMENTAL)  # 2 leaves -> 1 condensed
    [top, *_] = await context_view(p, s)
    return p, s, msgs, top


async def test_parents_contain_children_constitute(make_provider) -> None:
    p, s, msgs, top = await _tree(make_provider)
    condensed = await p.describe(top, s)
    assert (condensed.kind, condensed.depth, condensed.parent_ids) == ("condensed", 1, [])
    assert condensed.descendant_count == 8
    assert condensed.earliest_at == msgs[0].created_at
    assert condensed.latest_at == msgs[7].created_at
    leaves = [await p.describe(c, s) for c in condensed.child_ids]
    assert [(leaf.kind, leaf.depth, leaf.parent_ids, leaf.child_ids) for leaf in leaves] == [
        ("leaf", 0, [top], []),
        ("leaf", 0, [top], []),
    ]
    expanded = await p.expand(top, 10**6, s)
    assert [c.summary_id for c in expanded.children] == condensed.child_ids
    assert [c.content for c in expanded.children] == [leaf.content for leaf in leaves]
    first = await p.expand(condensed.child_ids[0], 10**6, s)
    assert [m.content for m in first.messages] == [m.content for m in msgs[:4]]
    assert [m.seq for m in first.messages] == [1, 2, 3, 4]
    assert not first.truncated


async def test_expand_respects_token_cap(make_provider) -> None:
    p, s, msgs, top = await _tree(make_provider)
    leaf = (await p.describe(top, s)).child_ids[1]
    full = await p.expand(leaf, 10**6, s)
    cap = full.messages[0].token_count + full.messages[1].token_count
    capped = await p.expand(leaf, cap, s)
    assert [m.content for m in capped.messages] == [m.content for m in msgs[4:6]]
    assert capped.truncated
    tiny = await p.expand(leaf, 3, s)  # not even one fits: the first, cut to the cap
    assert len(tiny.messages) == 1 and tiny.truncated and tiny.messages[0].token_count <= 3
    assert msgs[4].content.startswith(tiny.messages[0].content.rstrip("…"))
    with pytest.raises(InvalidArgument):
        await p.expand(leaf, 0, s)


async def test_expand_shows_tool_calls(make_provider) -> None:
    p = make_provider(CountingSummarizer(), keep_tail=1, leaf_chunk_size=3)
    s = session()
    await p.append(
        s,
        Message("user", "q"),
        Message("assistant", "", tool_calls=[ToolCall("c1", "weather", '{"city": "Oslo"}')]),
        Message("tool", "rain", tool_call_id="c1", name="weather"),
        Message("assistant", "it rains"),
    )
    await p.compact(s, CompactionMode.INCREMENTAL)
    [leaf, _] = await context_view(p, s)
    contents = [m.content for m in (await p.expand(leaf, 10**6, s)).messages]
    assert contents == ["q", 'weather({"city": "Oslo"})', "rain"]


async def test_ownership_is_the_users_conversations(make_provider) -> None:
    p, s, _, top = await _tree(make_provider)
    leaf = (await p.describe(top, s)).child_ids[0]
    same_user_new_chat = session("later", s.user_id)
    stranger = session("x", s.user_id + 1)
    other_agent = session("y", s.user_id, agent_id="other")
    for sid in (top, leaf):
        assert (await p.describe(sid, same_user_new_chat)).summary_id == sid
        assert (await p.describe(sid, None)).summary_id == sid  # the operator
        for who in (stranger, other_agent):
            with pytest.raises(NotFound) as err:
                await p.describe(sid, who)
            with pytest.raises(NotFound):
                await p.expand(sid, 100, who)
    # The same answer as for an id that never existed: nothing is revealed.
    with pytest.raises(NotFound) as missing:
        await p.describe("sum_0123456789abcdef", stranger)
    assert str(err.value).replace(leaf, "ID") == str(missing.value).replace(
        "sum_0123456789abcdef", "ID"
    )


async def test_review_context_has_summaries_then_new_messages(make_provider) -> None:
    p, s, msgs, top = await _tree(make_provider)
    since = now()
    assert await p.build_review_context(s, since) == ""
    await p.append(s, Message("user", "I adopted a cat named Miso"))
    text = await p.build_review_context(s, since)
    assert text.index(f'<summary id="{top}"') < text.index("Miso")
    assert msgs[-1].content not in text  # old messages appear only through summaries
    everything = await p.build_review_context(s, None)
    assert msgs[0].content in everything and "Miso" in everything
    assert await p.build_review_context(session("never"), None) == ""
