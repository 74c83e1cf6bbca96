"""memory/storage/usage.py on SQLite and PostgreSQL: rows written with the work or alone, never
twice; the periods, windows and reports the budgets and the operator read."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from memory.contract.context import with_agent_id, with_session_id, with_user_id
from memory.storage.db import migrate, write_transaction
from memory.storage.prices import Price, format_cost, total_cost
from memory.storage.usage import (
    TokenUsage,
    UsageRecorder,
    UsageRow,
    UsageStore,
    next_day,
    next_month,
    split_by_scope,
    usage_records,
    write_pending,
)

NOW = datetime(2026, 11, 26, 15, 30, tzinfo=UTC)


@pytest.fixture
async def store(engine: AsyncEngine) -> UsageStore:
    await migrate(engine)
    return UsageStore(engine)


async def count(engine: AsyncEngine) -> int:
    async with engine.connect() as conn:
        return int(await conn.scalar(sa.select(sa.func.count()).select_from(usage_records)) or 0)


async def test_rows_go_with_the_work_or_alone_never_twice(store: UsageStore) -> None:
    recorder = UsageRecorder(store)
    seen: list[UsageRow] = []
    recorder.observers.append(seen.append)
    with with_user_id(42), with_agent_id("a"), with_session_id("s1"):
        # Committed with the work: written once, inside its transaction.
        async with recorder.collecting(committed_on_success=True):
            await recorder.record(recorder.row("summary", "m", TokenUsage(100, 10, 20)))
            assert await count(store.engine) == 0  # not before the work commits
            async with write_transaction(store.engine) as conn:
                await write_pending(conn)
        assert await count(store.engine) == 1
        # The work's transaction rolled back: the tokens were spent, the row is written alone.
        with pytest.raises(RuntimeError):
            async with recorder.collecting(committed_on_success=True):
                await recorder.record(recorder.row("summary", "m", TokenUsage(50)))
                async with write_transaction(store.engine) as conn:
                    await write_pending(conn)
                    raise RuntimeError("the compaction failed after its summary")
        assert await count(store.engine) == 2
        # A transaction that committed but whose outcome the code could not confirm: the
        # row is written again on settling, and stays one row.
        async with recorder.collecting() as ledger:
            await recorder.record(recorder.row("chat", "m", TokenUsage(7, 0, 3)))
            async with write_transaction(store.engine) as conn:
                await ledger.write(conn)
        assert await count(store.engine) == 3
        # No ledger: written at once.
        await recorder.record(recorder.row("search", "m", TokenUsage(4, estimated=True)))
        assert await count(store.engine) == 4
    assert [r.kind for r in seen] == ["summary", "summary", "chat", "search"]
    async with store.engine.connect() as conn:
        kept = (await conn.execute(sa.select(usage_records))).all()
    assert {(r.user_id, r.agent_id, r.session_id) for r in kept} == {(42, "a", "s1")}
    assert sorted(r.estimated for r in kept) == [False, False, False, True]


async def test_periods_windows_and_reports(store: UsageStore) -> None:
    def row(kind: str, at: datetime, user: int = 42, model: str = "m", n: int = 100) -> UsageRow:
        return UsageRow(kind, model, TokenUsage(n, n // 2, n // 10), user_id=user, at=at)

    await store.write(
        [
            row("chat", NOW),
            row("chat", NOW - timedelta(hours=1), model="other"),
            row("summary", NOW - timedelta(days=1)),  # this month, not today
            row("chat", NOW - timedelta(days=40)),  # last month
            row("summary", NOW - timedelta(minutes=5), user=43),
            row("embedding", NOW - timedelta(minutes=10), user=43),
        ]
    )
    period = await store.period(42, NOW)
    assert sorted(period.today) == ["m", "other"]
    assert period.total(period.today) == TokenUsage(200, 100, 20)
    assert period.total(period.month) == TokenUsage(300, 150, 30)
    since = NOW - timedelta(hours=1)
    assert await store.window(since, ("summary", "reflect", "embedding"), 43) == (2, 220)
    assert await store.window(since, ("summary", "reflect", "embedding")) == (2, 220)
    assert await store.window(since, ("summary",), 42) == (0, 0)
    by_day = await store.report("day", NOW - timedelta(days=2))
    assert [(r.key, r.model, r.calls) for r in by_day] == [
        ("2026-11-25", "m", 1),
        ("2026-11-26", "m", 3),
        ("2026-11-26", "other", 1),
    ]
    by_user = await store.report("user", NOW - timedelta(days=2))
    assert {(r.key, r.model): r.calls for r in by_user} == {
        ("42", "m"): 2,
        ("42", "other"): 1,
        ("43", "m"): 2,
    }
    by_kind = await store.report("kind", NOW - timedelta(days=60), NOW - timedelta(days=30))
    assert [(r.key, r.calls, r.tokens.total) for r in by_kind] == [("chat", 1, 110)]


def test_resets_prices_and_shares() -> None:
    assert next_day(NOW) == datetime(2026, 11, 27, tzinfo=UTC)
    assert next_month(NOW) == datetime(2026, 12, 1, tzinfo=UTC)
    assert next_month(datetime(2026, 12, 31, 23, tzinfo=UTC)) == datetime(2027, 1, 1, tzinfo=UTC)
    price = Price(input=0.15, output=0.60, cached_input=0.075)
    usage = TokenUsage(prompt=1_000_000, cached_prompt=400_000, completion=100_000)
    assert price.cost(usage) == pytest.approx(0.6 * 0.15 + 0.4 * 0.075 + 0.1 * 0.60)
    assert Price(input=1.0).cost(TokenUsage(10, 10)) == pytest.approx(10 / 1e6)  # no discount
    assert total_cost({"m": usage}, {"m": price}) == pytest.approx(price.cost(usage))
    assert [format_cost(c) for c in (0, 0.000123, 0.0019, 0.5, 1234.567)] == [
        "0.00",
        "0.000123",
        "0.0019",
        "0.50",
        "1,234.57",
    ]
    assert total_cost({"m": usage, "n": TokenUsage(5)}, {"m": price}) is None  # partial: none
    shares = split_by_scope(TokenUsage(101, 0, 0), [(1, "a", 30), (2, "a", 10), (1, "a", 10)])
    assert {(u, s.prompt) for u, _, s in shares} == {(1, 81), (2, 20)}  # 4:1, rest to 1
    assert sum(s.prompt for _, _, s in shares) == 101
