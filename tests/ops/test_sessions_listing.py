"""`mnemo memory sessions` costs a fixed number of SQL statements however many sessions
there are, and prints what each provider's per-session `stats` says."""

from __future__ import annotations

import io
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event
from sqlalchemy.engine import Engine

from bot.config.settings import Settings
from bot.ops import sessions
from memory.compaction.summarizer import TruncatingSummarizer
from memory.contract import registry
from memory.contract.capabilities import ProviderContext
from memory.contract.registry import create_provider
from memory.contract.types import CompactionMode, ListOptions, Message, Session, SessionStats
from memory.storage.db import create_engine, migrate
from memory.storage.history import HistoryStore
from tests.ops.conftest import T0, make_settings


@contextmanager
def sql_statements() -> Iterator[list[str]]:
    """Every statement any engine sends while the block runs (the command under test
    creates its own engine, so the listener is on the Engine class)."""
    statements: list[str] = []

    def record(conn, cursor, statement, *args) -> None:  # type: ignore[no-untyped-def]
        statements.append(statement)

    event.listen(Engine, "before_cursor_execute", record)
    try:
        yield statements
    finally:
        event.remove(Engine, "before_cursor_execute", record)


async def add_sessions(settings: Settings, tmp: Path, first: int, last: int) -> None:
    """Sessions `first`..`last - 1`: a few messages each (more for some), every fourth
    compacted (so summary counts differ), every seventh archived with a title."""
    engine = create_engine(settings.database.url)
    try:
        await migrate(engine)
        provider = create_provider(
            settings.memory.provider,
            ProviderContext(
                engine=engine,
                summarizer=TruncatingSummarizer(),
                data_dir=tmp,
                config=settings.provider_config(),
            ),
        )
        try:
            for i in range(first, last):
                session = Session(f"tg:{i}", "default", 1000 + i, "telegram")
                await provider.bootstrap(session)
                start = T0 + timedelta(minutes=i)
                await provider.append(
                    session,
                    *(
                        Message(
                            "user" if k % 2 == 0 else "assistant",
                            f"m{k} of {i} 'q' 100%",
                            created_at=start,
                        )
                        for k in range(4 + i % 5 * 2)
                    ),
                )
                if i % 4 == 0:
                    await provider.compact(session, CompactionMode.FULL)
                if i % 7 == 3:
                    info = await provider.load_info(session.id)
                    info.archived = True
                    info.title = f"archived {i}"
                    await provider.save_info(info)
        finally:
            await provider.close()
    finally:
        await engine.dispose()


async def expected_listing(settings: Settings, tmp: Path) -> str:
    """The listing as the command printed it before it counted in bulk: `list_info`
    and the provider's `stats` of each session."""
    engine = create_engine(settings.database.url)
    try:
        provider = create_provider(
            settings.memory.provider,
            ProviderContext(
                engine=engine,
                summarizer=TruncatingSummarizer(),
                data_dir=tmp,
                config=settings.provider_config(),
            ),
        )
        rows = [("SESSION", "USER", "MESSAGES", "SUMMARIES", "LAST ACTIVE", "TITLE")]
        try:
            for info in await HistoryStore(engine).list_info(ListOptions(include_archived=True)):
                stats = await provider.stats(
                    Session(info.id, info.agent_id, info.user_id, info.channel)
                )
                rows.append(
                    (
                        info.id,
                        str(info.user_id),
                        str(stats.message_count),
                        str(stats.summary_count),
                        info.last_active.strftime("%Y-%m-%d %H:%M:%S"),
                        ("[archived] " if info.archived else "") + info.title,
                    )
                )
        finally:
            await provider.close()
    finally:
        await engine.dispose()
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    return "".join(
        "  ".join(c.ljust(w) for c, w in zip(r[:5], widths, strict=True)) + "  " + r[5] + "\n"
        for r in rows
    )


async def listing(settings: Settings) -> tuple[str, int]:
    out = io.StringIO()
    with sql_statements() as statements:
        assert await sessions.sessions(settings, out=out) == 0
    return out.getvalue(), len(statements)


@pytest.mark.parametrize("provider", ["lcm", "simple"])
async def test_listing_costs_the_same_statements_for_5_and_50_sessions(
    db_url: str, tmp_path: Path, provider: str
) -> None:
    settings = make_settings(db_url, tmp_path, provider=provider)
    await add_sessions(settings, tmp_path, 0, 5)
    small, small_count = await listing(settings)
    assert small == await expected_listing(settings, tmp_path)

    await add_sessions(settings, tmp_path, 5, 50)
    large, large_count = await listing(settings)
    assert large == await expected_listing(settings, tmp_path)
    assert len(large.splitlines()) == 51
    # The data really varies: summaries where compacted, archived sessions marked.
    assert {line.split()[3] for line in large.splitlines()[1:]} - {"0"}
    assert "[archived] archived 3" in large
    assert large_count == small_count


class ProviderOnly:
    """A provider seen through the `Provider` contract alone, as a third party's plugin
    that cannot count sessions in bulk would be."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.name = inner.name

    async def bootstrap(self, session: Session) -> None:
        await self.inner.bootstrap(session)

    async def append(self, session: Session, *msgs: Message) -> None:
        await self.inner.append(session, *msgs)

    async def assemble(self, session: Session, budget: int, fresh_tail: int) -> list[Message]:
        return await self.inner.assemble(session, budget, fresh_tail)

    async def stats(self, session: Session) -> SessionStats:
        return await self.inner.stats(session)

    async def close(self) -> None:
        await self.inner.close()


async def test_a_provider_without_bulk_counts_lists_the_same(
    db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = make_settings(db_url, tmp_path, provider="lcm")
    await add_sessions(settings, tmp_path, 0, 9)
    bulk, bulk_count = await listing(settings)
    # Without `list_counts` the command asks `stats` session by session.
    factory = registry.get_factory("lcm")
    monkeypatch.setattr(
        registry, "get_factory", lambda name: lambda ctx: ProviderOnly(factory(ctx))
    )
    one_by_one, one_by_one_count = await listing(settings)
    assert one_by_one == bulk == await expected_listing(settings, tmp_path)
    assert one_by_one_count > bulk_count


async def test_no_sessions(db_url: str, tmp_path: Path) -> None:
    out = io.StringIO()
    engine = create_engine(db_url)
    await migrate(engine)  # a database, with no session in it
    await engine.dispose()
    assert await sessions.sessions(make_settings(db_url, tmp_path), out=out) == 0
    assert out.getvalue().startswith("no sessions in ")
