"""Automatic compactions share `COMPACTIONS_AT_ONCE` slots per pool: a burst of sessions
crossing the threshold together runs only that many summarizer calls at once, the rest
queue, and no reply waits for any of them."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field

from sqlalchemy.ext.asyncio import AsyncEngine

from bot.conversation.service import COMPACTIONS_AT_ONCE
from memory.contract.types import Session, SummarizeOptions
from tests.bot.conftest import PoolFactory
from tests.waits import scaled

SESSIONS = [Session(id=f"default:slots:{n}", user_id=n, channel="slots") for n in range(1, 7)]
# Generous: only reached when the pool never gets to the expected state (a hang, not a
# slow machine), so a regression fails instead of sitting out pytest's timeout.
STUCK_S = 5


@dataclass
class CountingSummarizer:
    """Blocks every call until `release`, tracking how many calls are inside at once."""

    release: asyncio.Event = field(default_factory=asyncio.Event)
    calls: int = 0
    in_flight: int = 0
    peak: int = 0
    changed: asyncio.Condition = field(default_factory=asyncio.Condition)

    async def summarize(self, text: str, opts: SummarizeOptions) -> str:
        self.calls += 1
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        async with self.changed:
            self.changed.notify_all()
        try:
            await self.release.wait()
        finally:
            self.in_flight -= 1
        return f"summary of {len(text)} characters"

    async def wait_for(self, predicate: Callable[[], bool], what: str) -> None:
        try:
            async with asyncio.timeout(scaled(STUCK_S)), self.changed:
                await self.changed.wait_for(predicate)
        except TimeoutError:
            raise AssertionError(
                f"never {what}: {self.in_flight} call(s) in flight, {self.calls} made"
            ) from None


async def test_a_burst_of_compactions_runs_a_few_at_a_time_and_no_reply_waits(
    sqlite_engine: AsyncEngine, make_pool: PoolFactory
):
    assert 1 < COMPACTIONS_AT_ONCE < len(SESSIONS), "the burst must exceed the slots"
    summarizer = CountingSummarizer()
    pool = make_pool(
        sqlite_engine, summarizer=summarizer, compaction={"max_tokens": 10, "keep_tail": 2}
    )
    long = "tell me about the sea " * 5
    for session in SESSIONS:  # two messages each, all in the kept tail
        assert not (await pool.chat(session, long)).error
    await pool.drain()
    assert summarizer.calls == 0

    # Every session crosses the threshold in the same moment: all the replies come back
    # while every summarizer call is still blocked.
    async with asyncio.timeout(scaled(STUCK_S)):
        replies = await asyncio.gather(*(pool.chat(s, long) for s in SESSIONS))
    assert all(r.text.startswith("echo:") for r in replies)
    await summarizer.wait_for(
        lambda: summarizer.in_flight >= COMPACTIONS_AT_ONCE,
        f"{COMPACTIONS_AT_ONCE} compactions at once",
    )
    # The compactions waiting for a slot hold up no session either: another round of
    # turns (many loop iterations, in which any unbounded compaction would start too).
    async with asyncio.timeout(scaled(STUCK_S)):
        replies = await asyncio.gather(*(pool.chat(s, "still there?") for s in SESSIONS))
    assert not any(r.error for r in replies)
    assert summarizer.in_flight == COMPACTIONS_AT_ONCE
    assert len(pool.background_tasks) == len(SESSIONS)  # the rest queue, none dropped
    before = {s.id: await pool.provider.stats(s) for s in SESSIONS}
    assert all(st.summary_count == 0 for st in before.values())

    summarizer.release.set()
    async with asyncio.timeout(scaled(STUCK_S)):
        await pool.drain()
    assert summarizer.peak == COMPACTIONS_AT_ONCE  # never more, and more than one at once
    assert summarizer.calls == len(SESSIONS)
    for session in SESSIONS:  # each session compacted once, its context smaller
        after = await pool.provider.stats(session)
        assert after.summary_count == 1, session.id
        assert after.context_tokens < before[session.id].context_tokens, session.id
