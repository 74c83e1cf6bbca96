"""The persistence underneath a cycle: slot claims and session leases."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import sqlalchemy as sa

from bot.jobs.reflect.models import ReflectSlot
from bot.jobs.reflect.reflector import slot_of
from bot.jobs.reflect.schedule import first_delay
from bot.jobs.reflect.state import Candidate, ReflectState
from memory.contract.types import Session

T0 = datetime(2026, 11, 26, 12, 0, tzinfo=UTC)
CAND = Candidate(Session("s1", "default", 1, "cli"), T0, None)


async def test_a_slot_is_claimed_once_per_agent(engine) -> None:
    a = ReflectState(engine, "default", "replica-a")
    b = ReflectState(engine, "default", "replica-b")
    other_agent = ReflectState(engine, "helper", "replica-b")
    assert await a.claim_slot(5) is True
    assert await b.claim_slot(5) is False
    assert await a.claim_slot(5) is False  # not even by its winner, twice
    assert await other_agent.claim_slot(5) is True  # slots are per agent
    assert await b.claim_slot(6) is True


async def test_old_slot_rows_are_pruned(engine) -> None:
    state = ReflectState(engine, "default", "a")
    for slot in (1, 2, 1001, 1002):
        assert await state.claim_slot(slot)
        await state.finish_slot(slot, reviewed=1, changes=0, failed=0)
    table = ReflectSlot.__table__
    async with engine.connect() as conn:
        kept = sorted((await conn.execute(sa.select(table.c.slot))).scalars())
    assert kept == [1001, 1002]  # 1 and 2 are KEEP_SLOTS behind


async def test_lease_excludes_others_until_released_or_expired(engine) -> None:
    a = ReflectState(engine, "default", "a")
    b = ReflectState(engine, "default", "b")
    lease = await a.lease(CAND, T0, lease_s=60, now=T0)
    assert lease is not None and lease.watermark is None
    assert await b.lease(CAND, T0, lease_s=60, now=T0 + timedelta(seconds=30)) is None
    # Expired: b takes over, and a's late outcome no longer writes anything.
    taken = await b.lease(CAND, T0, lease_s=60, now=T0 + timedelta(seconds=61))
    assert taken is not None
    assert await a.succeed(lease) is False
    assert await a.watermark("s1") is None
    assert await b.succeed(taken) is True
    assert await a.watermark("s1") == T0
    # Reviewed up to T0: nothing to lease for that activity any more, newer activity is.
    assert await a.lease(CAND, T0, lease_s=60) is None
    newer = await a.lease(CAND, T0 + timedelta(seconds=5), lease_s=60)
    assert newer is not None and newer.watermark == T0


async def test_failure_keeps_the_watermark_and_counts(engine) -> None:
    state = ReflectState(engine, "default", "a")
    lease = await state.lease(CAND, T0, lease_s=60)
    assert await state.fail(lease, "x" * 2000) is True
    assert len((await state.watermark_rows())["s1"].last_error) == 500  # bounded
    again = await state.lease(CAND, T0, lease_s=60)  # released: retried at once
    assert again is not None and again.watermark is None
    assert await state.fail(again, "boom") is True
    row = (await state.watermark_rows())["s1"]
    assert (row.watermark, row.lease_until, row.failures, row.last_error) == (None, None, 2, "boom")
    assert row.attempted_at is not None


def test_slot_arithmetic() -> None:
    assert slot_of(datetime.fromtimestamp(3600 * 10 + 5, UTC), 3600) == 10
    assert slot_of(datetime.fromtimestamp(3600 * 11 - 0.001, UTC), 3600) == 10
    # The first run lands just past the next boundary, in the next slot.
    now = 3600 * 10 + 1234.5
    first = now + first_delay(3600, now)
    assert slot_of(datetime.fromtimestamp(first, UTC), 3600) == 11
    assert 0 < first - 3600 * 11 <= 1
