"""Where reflect learns which sessions have new activity.

Providers that keep their history in the shared SQL tables (`memory.storage.history`: lcm,
simple) are served by one indexed-enough query on `conversations` (its `updated_at` is
the session's last activity) joined with the watermarks, so a cycle costs one small
query however many sessions exist. Any other provider that is a `SessionManager` (the
reference provider, a third party's) is served through `list_info`, whose
`last_active` says the same, with the watermarks compared in Python.
"""

from __future__ import annotations

from datetime import datetime
from typing import Protocol, cast

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from bot.jobs.reflect.state import Candidate, ReflectState, watermarks
from memory.contract.capabilities import Provider, SessionManager
from memory.contract.errors import NotFound
from memory.contract.tracing import unwrap
from memory.contract.types import ListOptions, Session, as_utc
from memory.storage.history import SessionHistory
from memory.storage.history_models import Conversation

conversations: sa.Table = Conversation.__table__  # type: ignore[attr-defined]


class ActivitySource(Protocol):
    async def candidates(self, batch: int, now: datetime) -> list[Candidate]: ...

    async def activity_at(self, session_id: str) -> datetime | None: ...


class SharedHistoryActivity:
    def __init__(self, engine: AsyncEngine, agent_id: str) -> None:
        self.engine = engine
        self.agent_id = agent_id

    async def candidates(self, batch: int, now: datetime) -> list[Candidate]:
        """At most `batch` sessions of this agent with activity after their watermark and
        no live lease, least recently attempted first (never attempted before all).
        Archived sessions count too: what was said before `/new` is worth keeping."""
        c, w = conversations, watermarks
        query = (
            sa.select(
                c.c.session_id,
                c.c.agent_id,
                c.c.user_id,
                c.c.channel,
                c.c.updated_at,
                w.c.watermark,
            )
            .select_from(c.outerjoin(w, w.c.session_id == c.c.session_id))
            .where(
                c.c.agent_id == self.agent_id,
                sa.or_(w.c.watermark.is_(None), c.c.updated_at > w.c.watermark),
                sa.or_(w.c.lease_until.is_(None), w.c.lease_until < now),
            )
            .order_by(sa.nulls_first(w.c.attempted_at.asc()), c.c.updated_at, c.c.id)
            .limit(batch)
        )
        async with self.engine.connect() as conn:
            rows = (await conn.execute(query)).all()
        return [
            Candidate(
                session=Session(r.session_id, r.agent_id, int(r.user_id), r.channel),
                activity_at=as_utc(r.updated_at),
                watermark=as_utc(r.watermark),
            )
            for r in rows
        ]

    async def activity_at(self, session_id: str) -> datetime | None:
        async with self.engine.connect() as conn:
            value = await conn.scalar(
                sa.select(conversations.c.updated_at).where(
                    conversations.c.session_id == session_id
                )
            )
        return as_utc(value)


class SessionManagerActivity:
    def __init__(self, provider: SessionManager, state: ReflectState) -> None:
        self.provider = provider
        self.state = state

    async def candidates(self, batch: int, now: datetime) -> list[Candidate]:
        infos = await self.provider.list_info(
            ListOptions(agent_id=self.state.agent_id, include_archived=True)
        )
        marks = await self.state.watermark_rows()
        found: list[tuple[tuple, Candidate]] = []
        for info in infos:
            active = as_utc(info.last_active or info.created_at)
            if active is None:
                continue
            mark = marks.get(info.id)
            if mark is not None:
                if mark.watermark is not None and active <= mark.watermark:
                    continue
                if mark.lease_until is not None and mark.lease_until >= now:
                    continue
            attempted = mark.attempted_at if mark is not None else None
            key = (attempted is not None, attempted or now, active, info.id)
            session = Session(info.id, info.agent_id, info.user_id, info.channel)
            found.append((key, Candidate(session, active, mark.watermark if mark else None)))
        found.sort(key=lambda item: item[0])
        return [cand for _, cand in found[:batch]]

    async def activity_at(self, session_id: str) -> datetime | None:
        try:
            info = await self.provider.load_info(session_id)
        except NotFound:
            return None
        return as_utc(info.last_active or info.created_at)


def activity_source(
    provider: Provider, engine: AsyncEngine, state: ReflectState
) -> ActivitySource | None:
    """The cheapest source that works for `provider`; None when it has none."""
    inner = unwrap(provider)
    if isinstance(inner, SessionHistory):
        return SharedHistoryActivity(engine, state.agent_id)
    if isinstance(inner, SessionManager):
        # (the provider itself, traced or not, answers what its inner one does)
        return SessionManagerActivity(cast(SessionManager, provider), state)
    return None
