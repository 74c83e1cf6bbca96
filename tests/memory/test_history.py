"""The shared message history: exact round trips, ordering under concurrency, hostile text."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import pytest

from memory.contract.errors import NotFound
from memory.contract.types import ListOptions, Message, Session, SessionInfo, ToolCall
from memory.storage.history import HistoryStore
from memory.text.tokens import estimate_tokens

S1 = Session("s1", "agent", 42, "telegram")
S2 = Session("s2", "agent", 43, "telegram")


async def test_round_trip_is_exact(engine) -> None:
    store = HistoryStore(engine)
    t = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    msgs = [
        Message("user", "hello", created_at=t),
        Message(
            "assistant",
            "",
            tool_calls=[
                ToolCall("call_1", "memory", '{"action": "status"}'),
                ToolCall("call_2", "memory", "{}"),
            ],
            reasoning="thinking",
            created_at=t,
        ),
        Message("tool", "ok", tool_call_id="call_1", name="memory", created_at=t),
        Message("tool", "", tool_call_id="call_2", name="memory", created_at=t),
        Message("assistant", "done", created_at=t),
    ]
    stored = await store.append(S1, *msgs)
    assert [s.seq for s in stored] == [1, 2, 3, 4, 5]
    assert await store.load_history("s1") == msgs


async def test_hostile_text_is_stored_not_refused(engine) -> None:
    store = HistoryStore(engine)
    text = "a\x00b \ud800 c \U0001f600 ' \" % _ ; DROP TABLE messages; --"
    await store.append(S1, Message("user", text))
    [back] = await store.load_history("s1")
    assert back.content == "a\ufffdb \ufffd c \U0001f600 ' \" % _ ; DROP TABLE messages; --"


async def test_concurrent_appends_keep_call_order_and_unique_seq(engine) -> None:
    store = HistoryStore(engine)

    async def writer(i: int) -> None:
        await store.append(S1, Message("user", f"{i}-a"), Message("assistant", f"{i}-b"))

    await asyncio.gather(
        *(writer(i) for i in range(20)), store.append(S2, Message("user", "other"))
    )
    history = await store.load_history("s1")
    assert len(history) == 40
    for first, second in zip(history[::2], history[1::2], strict=True):
        assert first.content.endswith("-a") and second.content == first.content[:-1] + "b"
    assert [m.content for m in await store.load_history("s2")] == ["other"]


async def test_stats_and_info(engine) -> None:
    store = HistoryStore(engine)
    assert await store.message_stats(S1) == (0, 0, None, None)
    with pytest.raises(NotFound):
        await store.load_info("s1")
    await store.append(
        S1, Message("user", "  What   is the plan?  "), Message("assistant", "x" * 40)
    )
    count, tokens, oldest, newest = await store.message_stats(S1)
    assert (count, tokens) == (
        2,
        estimate_tokens("  What   is the plan?  ") + estimate_tokens("x" * 40),
    )
    assert oldest <= newest
    info = await store.load_info("s1")
    assert (info.title, info.user_id, info.archived) == ("What is the plan?", 42, False)
    await store.save_info(SessionInfo("s1", "agent", 42, "telegram", archived=True))
    await store.bootstrap(S2)
    assert [i.id for i in await store.list_info(ListOptions())] == ["s2"]
    assert {i.id for i in await store.list_info(ListOptions(include_archived=True))} == {"s1", "s2"}
    assert [
        i.id for i in await store.list_info(ListOptions(user_id=42, include_archived=True))
    ] == ["s1"]


async def test_a_rolled_back_first_append_leaves_no_stale_conversation(engine) -> None:
    store = HistoryStore(engine)
    with pytest.raises(RuntimeError):
        async with store.session_transaction(S1) as (_conn, _conv_id):
            raise RuntimeError("crash before commit")
    assert await store.conversation_id("s1") is None
    await store.append(S1, Message("user", "after the failure"))
    assert [m.content for m in await store.load_history("s1")] == ["after the failure"]


async def test_more_sessions_than_the_id_cache_holds_still_append_and_load(
    engine, monkeypatch
) -> None:
    import memory.storage.history

    monkeypatch.setattr(memory.storage.history, "CONV_ID_CACHE_SIZE", 3)
    store = HistoryStore(engine)
    sessions = [Session(f"lru{i}", "agent", 100 + i, "telegram") for i in range(8)]
    for round_ in ("first", "second"):  # the second round finds every id evicted
        for s in sessions:
            await store.append(s, Message("user", f"{s.id} {round_}"))
            assert len(store._conv_ids) <= 3
    for s in sessions:
        # one conversation per session, both appends in it
        assert [m.content for m in await store.load_history(s.id)] == [
            f"{s.id} first",
            f"{s.id} second",
        ]
        assert (await store.message_stats(s))[0] == 2
        assert len(store._conv_ids) <= 3
    ids = {await store.conversation_id(s.id) for s in sessions}
    assert len(ids) == len(sessions) and None not in ids


async def test_live_session_only_refuses_an_archived_session_and_nothing_else(engine) -> None:
    from memory.contract.errors import Conflict, SessionArchived
    from memory.contract.options import AppendOptions

    live = AppendOptions(live_only=True)
    store = HistoryStore(engine)
    await store.append(S1, Message("user", "before"))
    await store.save_info(SessionInfo("s1", "agent", 42, "telegram", archived=True))
    before = await store.load_info("s1")
    with pytest.raises(SessionArchived):
        await store.append(S1, Message("user", "refused"), options=live)
    assert issubclass(SessionArchived, Conflict)
    assert [m.content for m in await store.load_history("s1")] == ["before"]
    assert await store.load_info("s1") == before  # not touched either
    # Everything else still writes to an archived session (imports, compaction, tools).
    await store.append(S1, Message("user", "kept"))
    assert [m.content for m in await store.load_history("s1")] == ["before", "kept"]
    # a live session, new or not, is appended to
    await store.append(S2, Message("user", "new"), options=live)
    await store.append(S2, Message("assistant", "live"), options=live)
    assert [m.content for m in await store.load_history("s2")] == ["new", "live"]


async def test_parts_of_many_messages_are_read_in_chunks(engine, monkeypatch) -> None:
    """A backlog of more messages than PostgreSQL binds parameters (65535) is read: their
    parts come in chunks (here of 3, over 7 messages with parts), none lost or doubled."""
    from memory.storage import history

    monkeypatch.setattr(history, "PARTS_CHUNK", 3)
    store = HistoryStore(engine)
    msgs = []
    for i in range(7):
        call = ToolCall(f"call_{i}", "memory", f'{{"n": {i}}}')
        msgs += [
            Message("assistant", "", tool_calls=[call], reasoning=f"r{i}"),
            Message("tool", f"result {i}", tool_call_id=call.id, name="memory"),
        ]
    await store.append(S1, *msgs)
    assert await store.load_history("s1") == msgs


async def test_spans_date_many_sessions_in_one_query(engine) -> None:
    """The first and last messages' own times (an import's, not the day it was
    stored), for every asked session in one statement; unknown ids are left out."""
    from sqlalchemy import event

    store = HistoryStore(engine)
    first, mid, last = (datetime(2024, 3, d, 9, 30, tzinfo=UTC) for d in (2, 4, 6))
    await store.append(
        S1, *(Message("user", f"m{i}", created_at=t) for i, t in enumerate((first, mid, last)))
    )
    await store.append(S2, Message("user", "only", created_at=mid))
    statements: list[str] = []

    def count(_conn, _cursor, statement, *_args) -> None:
        statements.append(statement)

    event.listen(engine.sync_engine, "before_cursor_execute", count)
    try:
        spans = await store.spans(["s1", "s2", "nope"])
        assert await store.spans([]) == {}
    finally:
        event.remove(engine.sync_engine, "before_cursor_execute", count)
    assert spans == {"s1": (first, last), "s2": (mid, mid)}
    assert len([s for s in statements if s.lstrip().upper().startswith("SELECT")]) == 1
