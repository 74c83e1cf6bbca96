"""Fact rows read back as `Fact`s with their evidence, and the owner's messages a
citation may name."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from memory.contract.facts import Fact
from memory.contract.types import as_utc
from memory.facts.models import evidence, facts
from memory.storage.history import conversations, messages

_CHUNK = 500


def owner_clause(user_id: int, agent_id: str) -> sa.ColumnElement[bool]:
    return sa.and_(facts.c.user_id == user_id, facts.c.agent_id == agent_id)


def to_fact(row: Any, ids: Sequence[int]) -> Fact:
    return Fact(
        id=row.id,
        user_id=int(row.user_id),
        agent_id=row.agent_id,
        key=row.key,
        value=row.value,
        state=row.state,
        valid_from=as_utc(row.valid_from),
        valid_to=as_utc(row.valid_to),
        version_from=int(row.version_from),
        version_to=None if row.version_to is None else int(row.version_to),
        source=row.source,
        session_id=row.session_id,
        replaced_by=row.replaced_by,
        created_at=as_utc(row.created_at),
        evidence=tuple(sorted(ids)),
    )


async def evidence_of(
    conn: AsyncConnection, fact_ids: Iterable[str], role: str | None = None
) -> dict[str, list[int]]:
    """The facts' evidence message ids, of every role or of `role` only."""
    out: dict[str, list[int]] = {}
    wanted = sorted(set(fact_ids))
    only = [] if role is None else [evidence.c.role == role]
    for i in range(0, len(wanted), _CHUNK):
        rows = await conn.execute(
            sa.select(evidence.c.fact_id, evidence.c.message_id).where(
                evidence.c.fact_id.in_(wanted[i : i + _CHUNK]), *only
            )
        )
        for fact_id, message_id in rows:
            out.setdefault(fact_id, []).append(int(message_id))
    return out


async def read_facts(conn: AsyncConnection, query: sa.Select[Any]) -> list[Fact]:
    """The facts `query` (over `memory_facts`) selects, in its order, with evidence."""
    rows = (await conn.execute(query)).all()
    ids = await evidence_of(conn, (r.id for r in rows))
    return [to_fact(r, ids.get(r.id, [])) for r in rows]


async def facts_by_id(conn: AsyncConnection, fact_ids: Iterable[str]) -> dict[str, Fact]:
    wanted = sorted(set(fact_ids))
    out: dict[str, Fact] = {}
    for i in range(0, len(wanted), _CHUNK):
        found = await read_facts(
            conn, sa.select(facts).where(facts.c.id.in_(wanted[i : i + _CHUNK]))
        )
        out.update((f.id, f) for f in found)
    return out


async def owned_message_dates(
    conn: AsyncConnection, user_id: int, agent_id: str, ids: Iterable[int]
) -> dict[int, datetime]:
    """The dates of the messages `ids` that are (user, agent)'s; others are left out."""
    wanted = sorted({i for i in ids if isinstance(i, int) and not isinstance(i, bool)})
    out: dict[int, datetime] = {}
    for i in range(0, len(wanted), _CHUNK):
        rows = await conn.execute(
            sa.select(messages.c.id, messages.c.created_at)
            .join(conversations, conversations.c.id == messages.c.conversation_id)
            .where(
                conversations.c.user_id == user_id,
                conversations.c.agent_id == agent_id,
                messages.c.id.in_(wanted[i : i + _CHUNK]),
            )
        )
        out.update((int(m), as_utc(d)) for m, d in rows)
    return out


async def in_conversation(conn: AsyncConnection, session_id: str, ids: Iterable[int]) -> set[int]:
    """Those of `ids` that are messages of the conversation `session_id`."""
    wanted = sorted(set(ids))
    out: set[int] = set()
    for i in range(0, len(wanted), _CHUNK):
        rows = await conn.execute(
            sa.select(messages.c.id)
            .join(conversations, conversations.c.id == messages.c.conversation_id)
            .where(
                conversations.c.session_id == session_id,
                messages.c.id.in_(wanted[i : i + _CHUNK]),
            )
        )
        out.update(int(m) for m in rows.scalars())
    return out


async def latest_user_message(conn: AsyncConnection, session_id: str) -> int | None:
    """The id of the conversation's newest user message (a turn's own)."""
    found = await conn.scalar(
        sa.select(messages.c.id)
        .join(conversations, conversations.c.id == messages.c.conversation_id)
        .where(conversations.c.session_id == session_id, messages.c.role == "user")
        .order_by(messages.c.seq.desc())
        .limit(1)
    )
    return None if found is None else int(found)
