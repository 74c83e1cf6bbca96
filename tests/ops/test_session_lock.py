"""Whole-turn locks: never two turns of one session at once, in one process or across
two "replicas" (two engines on one PostgreSQL database); other sessions run freely."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from memory.contract.types import Message, Session
from memory.storage.db import create_engine
from memory.storage.history import HistoryStore
from memory.storage.session_lock import SessionLocks
from tests.waits import scaled


class Turns:
    """Records how many turns of a session are inside their critical section at once."""

    def __init__(self) -> None:
        self.inside: dict[str, int] = {}
        self.max_inside: dict[str, int] = {}
        self.done = 0

    async def turn(
        self, locks: SessionLocks, session: Session, store: HistoryStore, n: int
    ) -> None:
        async with locks.hold(session.id):
            self.inside[session.id] = self.inside.get(session.id, 0) + 1
            self.max_inside[session.id] = max(
                self.max_inside.get(session.id, 0), self.inside[session.id]
            )
            # A real turn: store the user message, yield to others (the "LLM"), store the reply.
            await store.append(session, Message("user", f"q{n}"))
            for _ in range(3):
                await asyncio.sleep(0)
            await store.append(session, Message("assistant", f"a{n}"))
            self.inside[session.id] -= 1
            self.done += 1


async def _pairs_in_order(store: HistoryStore, session_id: str) -> list[tuple[str, str]]:
    msgs = await store.load_history(session_id)
    return [(msgs[i].content, msgs[i + 1].content) for i in range(0, len(msgs), 2)]


async def test_turns_of_one_session_never_interleave(engine: AsyncEngine) -> None:
    locks = SessionLocks(engine)
    store = HistoryStore(engine)
    turns = Turns()
    sessions = [Session(f"chat-{i}", "a", i, "telegram") for i in range(3)]
    try:
        await asyncio.gather(*(turns.turn(locks, s, store, n) for n in range(8) for s in sessions))
    finally:
        await locks.close()
    assert turns.done == 24
    assert turns.max_inside == {s.id: 1 for s in sessions}
    for s in sessions:
        pairs = await _pairs_in_order(store, s.id)
        assert len(pairs) == 8
        # Every question is followed by its own answer: no turn slipped in between.
        assert all(q[1:] == a[1:] and q[0] == "q" and a[0] == "a" for q, a in pairs)
    assert locks.held_locally() == 0


async def test_other_sessions_are_not_blocked(engine: AsyncEngine) -> None:
    locks = SessionLocks(engine)
    try:
        # Would deadlock (and hit the test timeout) if "two" waited for "one".
        async with locks.hold("one"), locks.hold("two"):
            pass
    finally:
        await locks.close()


@pytest.fixture
async def replica_engine(engine: AsyncEngine, db_kind: str) -> AsyncIterator[AsyncEngine]:
    """A second engine on the same database: what a second replica process would have."""
    if db_kind != "postgres":
        pytest.skip("several replicas share PostgreSQL only")
    other = create_engine(engine.url.render_as_string(hide_password=False))
    yield other
    await other.dispose()


async def test_two_replicas_serialise_turns_of_one_chat(
    engine: AsyncEngine, replica_engine: AsyncEngine
) -> None:
    a, b = SessionLocks(engine), SessionLocks(replica_engine)
    store_a, store_b = HistoryStore(engine), HistoryStore(replica_engine)
    turns = Turns()
    session = Session("shared-chat", "a", 7, "telegram")
    try:
        await asyncio.gather(
            *(turns.turn(a, session, store_a, n) for n in range(0, 12, 2)),
            *(turns.turn(b, session, store_b, n) for n in range(1, 12, 2)),
        )
    finally:
        await a.close()
        await b.close()
    assert turns.max_inside == {session.id: 1}
    pairs = await _pairs_in_order(store_a, session.id)
    assert sorted(int(q[1:]) for q, _ in pairs) == list(range(12))
    assert all(q[1:] == a_[1:] for q, a_ in pairs)


async def test_replica_waits_then_proceeds_when_lock_released(
    engine: AsyncEngine, replica_engine: AsyncEngine
) -> None:
    a, b = SessionLocks(engine), SessionLocks(replica_engine)
    order: list[str] = []
    entered_a = asyncio.Event()
    release_a = asyncio.Event()

    async def holder() -> None:
        async with a.hold("chat"):
            order.append("a-in")
            entered_a.set()
            await release_a.wait()
            order.append("a-out")

    async def waiter() -> None:
        await entered_a.wait()
        async with b.hold("chat"):
            order.append("b-in")

    try:
        t1, t2 = asyncio.create_task(holder()), asyncio.create_task(waiter())
        await entered_a.wait()
        # b is now blocked on PostgreSQL; let a finish, then b must get in.
        for _ in range(20):
            await asyncio.sleep(0)
        release_a.set()
        await asyncio.gather(t1, t2)
    finally:
        await a.close()
        await b.close()
    assert order == ["a-in", "a-out", "b-in"]


async def test_cancelled_waiter_leaves_no_lock_behind(
    engine: AsyncEngine, replica_engine: AsyncEngine
) -> None:
    a, b = SessionLocks(engine), SessionLocks(replica_engine)
    try:
        async with a.hold("chat"):
            waiting = asyncio.create_task(_enter(b, "chat"))
            for _ in range(50):
                await asyncio.sleep(0.01)  # let b reach pg_advisory_lock on its own connection
            waiting.cancel()
            with pytest.raises(asyncio.CancelledError):
                await waiting
        # Neither the cancelled waiter nor the finished holder may still hold the chat.
        await asyncio.wait_for(_enter(b, "chat"), timeout=scaled(30))
        await asyncio.wait_for(_enter(a, "chat"), timeout=scaled(30))
    finally:
        await a.close()
        await b.close()


async def _enter(locks: SessionLocks, session_id: str) -> None:
    async with locks.hold(session_id):
        pass


async def test_closing_releases_the_process_locks(
    engine: AsyncEngine, replica_engine: AsyncEngine
) -> None:
    a, b = SessionLocks(engine), SessionLocks(replica_engine)
    held = a.hold("chat")
    await held.__aenter__()
    # A replica that shuts down (or dies) mid-turn must not keep the chat locked.
    await a.close()
    try:
        await asyncio.wait_for(_enter(b, "chat"), timeout=scaled(30))
    finally:
        await b.close()
