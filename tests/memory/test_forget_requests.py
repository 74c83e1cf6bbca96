"""Pending forget requests in the database (memory/storage/forget_requests.py): two replicas
confirming one request at the same moment act on it once, the end of a request (an
erasure's included) leaves nothing of what it would forget. SQLite and PostgreSQL, two engines (as two
processes have) on one database."""

from __future__ import annotations

import asyncio
from pathlib import Path

import sqlalchemy as sa

from bot.app.services import register_erasure_hooks
from memory.storage import forget_requests as requests
from memory.storage.db import create_engine, write_transaction
from memory.storage.forget_requests import forget_requests
from memory.storage.forgetting import ErasureReport, Owner, run_erase_hooks
from memory.testing.databases import temp_engine

OWNER = Owner(42, "default")


async def test_two_replicas_racing_take_a_request_once(db_kind: str, tmp_path: Path) -> None:
    async with temp_engine(db_kind, tmp_path) as one:
        two = create_engine(one.url.render_as_string(hide_password=False))
        try:
            for _ in range(10):
                code = await requests.keep(one, "s1", OWNER, ids=(7, 8), needles=("green tea",))
                taken = await asyncio.gather(
                    requests.take(one, "s1", OWNER, code), requests.take(two, "s1", OWNER, code)
                )
                assert [t.ids for t in taken if t is not None] == [(7, 8)]
                assert await requests.take(two, "s1", OWNER, code) is None
                assert await requests.take(one, "s1", OWNER, code) is None
            async with one.connect() as conn:
                held = (
                    await conn.execute(
                        sa.select(
                            forget_requests.c.state,
                            forget_requests.c.message_ids,
                            forget_requests.c.needles,
                        )
                    )
                ).all()
            assert len(held) == 10 and set(held) == {("done", None, None)}
        finally:
            await two.dispose()


async def test_a_request_is_taken_only_in_its_conversation_by_its_owner(
    db_kind: str, tmp_path: Path
) -> None:
    async with temp_engine(db_kind, tmp_path) as engine:
        code = await requests.keep(engine, "s1", OWNER, everything=True)
        assert await requests.take(engine, "s2", OWNER, code) is None
        assert await requests.take(engine, "s1", Owner(43, "default"), code) is None
        taken = await requests.take(engine, "s1", OWNER, code)
        assert taken is not None and taken.everything


async def test_an_erasure_ends_the_owners_pending_requests(db_kind: str, tmp_path: Path) -> None:
    register_erasure_hooks()  # as `mnemo run` and `mnemo memory erase` do
    async with temp_engine(db_kind, tmp_path) as engine:
        mine = await requests.keep(engine, "s1", OWNER, ids=(7,), needles=("green tea",))
        theirs = await requests.keep(engine, "s2", Owner(43, "default"), ids=(9,))
        async with write_transaction(engine) as conn:
            report = ErasureReport()
            await run_erase_hooks(conn, OWNER, report)
        assert report.extra["pending forget request(s)"] == 1
        assert await requests.take(engine, "s1", OWNER, mine) is None
        async with engine.connect() as conn:
            words = await conn.scalar(
                sa.select(forget_requests.c.needles).where(forget_requests.c.code == mine)
            )
        assert words is None
        taken = await requests.take(engine, "s2", Owner(43, "default"), theirs)
        assert taken is not None and taken.ids == (9,)
