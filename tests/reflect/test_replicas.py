"""Several replicas on one PostgreSQL: each cycle runs once, each session is reviewed by
one reviewer at a time (separate engines and providers, as separate processes have)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
import sqlalchemy as sa

from bot.jobs.reflect.models import ReflectSlot
from memory.compaction.summarizer import StaticSummarizer
from memory.contract.capabilities import ProviderContext
from memory.contract.registry import get_factory
from memory.contract.types import Message, Session
from memory.storage.db import create_engine
from memory.testing.databases import temp_engine
from tests.reflect.conftest import make_reflector

pytestmark = pytest.mark.postgres

INTERVAL_S = 60.0
SESSION = Session("tg:5", "default", 5, "telegram")


@pytest.fixture
async def replicas(tmp_path: Path, llm) -> AsyncIterator[tuple]:
    """Two (engine, provider, reflector) replicas on one fresh PostgreSQL database."""
    async with temp_engine("postgres", tmp_path) as engine_a:
        engine_b = create_engine(engine_a.url.render_as_string(hide_password=False))
        try:
            out = []
            for name, engine in (("a", engine_a), ("b", engine_b)):
                provider = get_factory("lcm")(
                    ProviderContext(
                        engine=engine,
                        summarizer=StaticSummarizer(),
                        config={"store_dir": str(tmp_path / name)},
                    )
                )
                out.append(
                    (
                        engine,
                        provider,
                        make_reflector(
                            engine, provider, llm, interval_s=INTERVAL_S, replica_id=name
                        ),
                    )
                )
            yield tuple(out)
        finally:
            await engine_b.dispose()


async def test_ten_cycles_each_run_once(replicas, fake_llm) -> None:
    (engine, provider_a, a), (_, provider_b, b) = replicas
    for cycle in range(10):
        writer = provider_a if cycle % 2 else provider_b  # activity arrives via either
        await writer.append(
            SESSION, Message("user", f"fact number {cycle}"), Message("assistant", "noted")
        )
        # Both replicas' timers fire in the same slot (a little apart in time).
        start = 1_000 * INTERVAL_S + cycle * INTERVAL_S
        reports = await asyncio.gather(
            a.run_scheduled(datetime.fromtimestamp(start + 1, UTC)),
            b.run_scheduled(datetime.fromtimestamp(start + 2.5, UTC)),
        )
        ran = [r for r in reports if not r.skipped]
        assert len(ran) == 1, [r.skipped for r in reports]
        assert [s.status for s in ran[0].sessions] == ["unchanged"]
        assert "already claimed" in next(r for r in reports if r.skipped).skipped
    assert len(fake_llm.requests) == 10  # one review per cycle, never two
    slots = ReflectSlot.__table__
    async with engine.connect() as conn:
        rows = (
            await conn.execute(
                sa.select(slots.c.slot, slots.c.claimed_by, slots.c.reviewed, slots.c.finished_at)
            )
        ).all()
    assert sorted(r.slot for r in rows) == list(range(1000, 1010))
    assert all(r.claimed_by in ("a", "b") and r.reviewed == 1 and r.finished_at for r in rows)


async def test_manual_cycle_beside_a_scheduled_one_reviews_once(replicas, fake_llm) -> None:
    (_, provider_a, a), (_, _, b) = replicas
    for i in range(3):
        await provider_a.append(Session(f"s{i}", "default", i, "cli"), Message("user", "hi"))
    fake_llm.pause()  # hold the first review so the two cycles overlap
    manual = asyncio.create_task(a.run_cycle())
    await fake_llm.wait_for_requests(1)
    scheduled = asyncio.create_task(b.run_cycle(slot=7))
    await asyncio.sleep(0.2)  # let it select and meet the lease
    fake_llm.resume()
    reports = await asyncio.gather(manual, scheduled)
    reviewed = [s.session_id for r in reports for s in r.sessions if s.status != "busy"]
    assert sorted(reviewed) == ["s0", "s1", "s2"]  # each exactly once, split or not
    assert len(fake_llm.requests) == 3
