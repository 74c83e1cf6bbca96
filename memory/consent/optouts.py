"""Who opted out of a shared memory (table `memory_optouts`, core revision
`0013_group_consent`): one row per (scope, agent, member). A channel asks `opted_out`
before it stores a member's message there; the row holds ids and a date, never words.

An erasure of the group's memory leaves the rows: an opt-out is the member's wish about
the group, not part of what the group remembers."""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from memory.contract.types import Owner, utcnow
from memory.storage.db import conflict_insert, write_transaction

_metadata = sa.MetaData()
optouts = sa.Table(
    "memory_optouts",
    _metadata,
    sa.Column("user_id", sa.BigInteger, primary_key=True, autoincrement=False),
    sa.Column("agent_id", sa.String(128), primary_key=True),
    sa.Column("member_id", sa.BigInteger, primary_key=True, autoincrement=False),
    sa.Column("since", sa.DateTime(timezone=True), nullable=False),
)
t = optouts.c


def _row(owner: Owner, member: int) -> tuple[sa.ColumnElement[bool], ...]:
    return t.user_id == owner.user_id, t.agent_id == owner.agent_id, t.member_id == member


async def opted_out(engine: AsyncEngine, owner: Owner, member: int) -> bool:
    """Whether `member` keeps their messages out of `owner`'s memory (a primary key read,
    made for every message of a group: no cache, so an opt-out holds on every replica
    from the next message on)."""
    async with engine.connect() as conn:
        found = await conn.scalar(sa.select(t.member_id).where(*_row(owner, member)))
    return found is not None


async def opt_out(engine: AsyncEngine, owner: Owner, member: int) -> bool:
    """Record the opt-out; False when it was recorded already."""
    async with write_transaction(engine) as conn:
        done = await conn.execute(
            conflict_insert(conn, optouts)
            .values(
                user_id=owner.user_id, agent_id=owner.agent_id, member_id=member, since=utcnow()
            )
            .on_conflict_do_nothing()
            .returning(t.member_id)  # (asyncpg's rowcount does not tell an ignored row)
        )
        return done.first() is not None


async def opt_in(engine: AsyncEngine, owner: Owner, member: int) -> bool:
    """Drop the opt-out; False when there was none."""
    async with write_transaction(engine) as conn:
        done = await conn.execute(optouts.delete().where(*_row(owner, member)))
    return bool(done.rowcount)
