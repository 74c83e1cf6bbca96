"""Property test: after any sequence of appends (tool calls among them), compactions and
forgets, the stored history is exactly what was appended minus what was forgotten, in
order; lcm's context expands back to exactly that history; no summary keeps a word of a
forgotten message; doctor is clean. lcm and simple, SQLite and PostgreSQL."""

from __future__ import annotations

import itertools
import uuid
from pathlib import Path

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy.ext.asyncio import AsyncEngine

from memory.contract.capabilities import ProviderContext
from memory.contract.registry import create_provider
from memory.contract.types import CompactionMode, Message, Session, ToolCall
from memory.storage import forgetting as fg
from memory.storage.forgetting import Owner
from memory.transfer.integrity import check_shared
from tests.fakes.summarizer import KeepingSummarizer
from tests.lcm.conftest import reconstruct

_counter = itertools.count()


def _turn(kind: str) -> list[Message]:
    n = next(_counter)
    if kind == "tools":
        return [
            Message("user", f"Zq{n} question"),
            Message("assistant", "", tool_calls=[ToolCall(f"c{n}", "memory", "{}")]),
            Message("tool", f"Zr{n} result", tool_call_id=f"c{n}", name="memory"),
            Message("assistant", f"Za{n} answer"),
        ]
    return [Message("user", f"Zu{n} hello"), Message("assistant", f"Zv{n} hi")]


OPS = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.sampled_from(["plain", "tools"])),
        st.tuples(st.just("compact"), st.sampled_from(list(CompactionMode))),
        st.tuples(st.just("forget"), st.integers(0, 10**6)),
    ),
    min_size=1,
    max_size=14,
)


async def _derived(engine: AsyncEngine, name: str, conv_session: str) -> str:
    table, column = ("summaries", "content") if name == "lcm" else ("simple_compactions", "summary")
    async with engine.connect() as conn:
        rows = await conn.execute(
            sa.text(
                f"SELECT t.{column} FROM {table} t JOIN conversations c "
                "ON c.id = t.conversation_id WHERE c.session_id = :s"
            ),
            {"s": conv_session},
        )
        return " ".join(r[0] for r in rows)


@pytest.mark.parametrize("name", ["lcm", "simple"])
@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(ops=OPS)
async def test_forgetting_keeps_the_rest_lossless(
    engine: AsyncEngine, tmp_path: Path, name: str, ops: list[tuple[str, object]]
) -> None:
    config: dict[str, object] = {"keep_tail": 2, "leaf_chunk_size": 2, "condensed_min": 2}
    if name == "simple":
        config = {"keep_tail": 2, "store_dir": str(tmp_path / "mem")}
    provider = create_provider(
        name, ProviderContext(engine=engine, summarizer=KeepingSummarizer(), config=config)
    )
    s = Session(id=f"prop-{uuid.uuid4().hex}", user_id=5)
    owner = Owner(s.user_id, s.agent_id)
    history: list[str] = []
    gone: set[str] = set()
    for op, arg in ops:
        if op == "append":
            turn = _turn(str(arg))
            history += [m.text() for m in turn]
            await provider.append(s, *turn)
        elif op == "compact":
            await provider.compact(s, CompactionMode(str(arg)))
        else:
            async with engine.connect() as conn:
                ids = await fg.matching_text(conn, owner, "hello") + await fg.matching_text(
                    conn, owner, "answer"
                )
                ids = [
                    i for i in ids if (await fg.owned_items(conn, owner, [i]))[0].session_id == s.id
                ]
            if not ids:
                continue
            target = sorted(ids)[int(str(arg)) % len(ids)]
            preview = await fg.preview(provider, owner, str(target))
            async with engine.connect() as conn:
                texts = [
                    m.text() for _, m in await provider.history.load_messages(conn, ids=preview.ids)
                ]
            report = await fg.forget(provider, owner, preview.ids)
            assert report.messages == len(preview.ids)
            for text in texts:
                history.remove(text)
                gone |= {w for w in text.split() if w.startswith("Z")}
    assert [m.text() for m in await provider.load_history(s.id)] == history
    if name == "lcm":
        assert await reconstruct(provider, s) == history
    derived = set((await _derived(engine, name, s.id)).split())
    assert not gone & derived
    assert await check_shared(engine) == []
    assert await provider.check_integrity() == []
    await provider.close()
