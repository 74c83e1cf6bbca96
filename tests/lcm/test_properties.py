"""Property test: whatever the sequence of appends, compactions and assembles,
(a) expanding every context item recursively gives back exactly the history,
(b) a window exceeds its budget only by the fresh tail,
(c) windows are chronological suffixes of the context."""

from __future__ import annotations

import itertools
import uuid

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memory.contract.types import CompactionMode, Message, Session, ToolCall
from memory.text.tokens import message_tokens
from tests.lcm.conftest import CountingSummarizer, reconstruct, summary_id_of

_counter = itertools.count()


def _turn(kind: str, size: int) -> list[Message]:
    n = next(_counter)
    if kind == "tools":
        return [
            Message("user", f"m{n} question"),
            Message(
                "assistant",
                "",
                tool_calls=[ToolCall(f"c{n}a", "f", "{}"), ToolCall(f"c{n}b", "f", "{}")],
            ),
            Message("tool", f"m{n} result a", tool_call_id=f"c{n}a", name="f"),
            Message("tool", f"m{n} result b", tool_call_id=f"c{n}b", name="f"),
            Message("assistant", f"m{n} answer " + "z" * size),
        ]
    return [
        Message("user" if i % 2 == 0 else "assistant", f"m{n}.{i} " + "w" * (size * (i + 1)))
        for i in range(size % 4 + 1)
    ]


OPS = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.sampled_from(["plain", "tools"]), st.integers(1, 60)),
        st.tuples(st.just("compact"), st.sampled_from(list(CompactionMode)), st.just(0)),
        st.tuples(st.just("assemble"), st.integers(0, 400), st.integers(0, 6)),
    ),
    min_size=1,
    max_size=25,
)


def _fresh_tail_length(full: list[Message], fresh_tail: int) -> int:
    """Length of the suffix of `full` the assembler must always keep."""
    if fresh_tail <= 0:
        return 0
    seen = 0
    for k in range(1, len(full) + 1):
        msg = full[-k]
        if summary_id_of(msg) is None:
            seen += 1
        if seen >= fresh_tail and msg.role != "tool":
            return k
    return len(full)


def _oldest_first(msgs: list[Message]) -> bool:
    return all(a.created_at <= b.created_at for a, b in itertools.pairwise(msgs))


@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    ops=OPS,
    keep_tail=st.integers(0, 5),
    chunk=st.integers(2, 5),
    condensed_min=st.integers(2, 3),
)
async def test_lossless_budgeted_chronological(
    make_provider, ops, keep_tail, chunk, condensed_min
) -> None:
    p = make_provider(
        CountingSummarizer(),
        keep_tail=keep_tail,
        leaf_chunk_size=chunk,
        condensed_min=condensed_min,
    )
    s = Session(id=f"prop-{uuid.uuid4().hex}", user_id=5)
    history: list[Message] = []
    for op, a, b in ops:
        if op == "append":
            turn = _turn(a, b)
            history += turn
            await p.append(s, *turn)
        elif op == "compact":
            await p.compact(s, a)
        else:
            full = await p.assemble(s, 10**9, 10**6)
            window = await p.assemble(s, a, b)
            k = len(window)
            assert [m.content for m in window] == [m.content for m in full[len(full) - k :]]
            assert _oldest_first(window)
            must_keep = _fresh_tail_length(full, b)
            assert k >= must_keep
            if k > must_keep:
                assert sum(message_tokens(m) for m in window) <= a
    expected = [m.text() for m in history]
    assert await reconstruct(p, s) == expected
    assert [m.text() for m in await p.load_history(s.id)] == expected
