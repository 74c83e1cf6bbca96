"""Forget and erase reaching the facts, inside the provider's forget transaction.

A forgotten message's evidence rows go. A fact left with no evidence that had some
(the forgotten messages alone supported it) is deleted, and what it had closed takes
its place: the fact it superseded (or the facts a merge replaced) reopens with the
deleted fact's end, so the memory reads as if the message had never been said. A
fact written without any citation is not touched. The changelog's copies of the
change are left, as profile versions are (docs/CHAT.md, "Forgetting").

A forget that removed a fact rewrote what earlier versions read, which a prompt built
at a session's snapshot (and cached per version, bot/model/prompt.py) must not keep
showing: the owner gets a new version, recorded by a content-free fact changelog row
(empty before and after: nothing to revert), and every session snapshot of the owner
moves to it, in the forget's transaction (the caller announces the move:
memory.storage.snapshots.moved()).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from memory.contract.context import change_source_from_context
from memory.contract.types import Action, Scope, utcnow
from memory.facts.models import evidence, facts
from memory.storage.store_models import MemoryChangelog, MemoryState, SessionSnapshotRow

_state: sa.Table = MemoryState.__table__  # type: ignore[attr-defined]
_snapshots: sa.Table = SessionSnapshotRow.__table__  # type: ignore[attr-defined]
_changelog: sa.Table = MemoryChangelog.__table__  # type: ignore[attr-defined]

_CHUNK = 500


async def supported_only_by(conn: AsyncConnection, message_ids: Sequence[int]) -> list[str]:
    """The facts whose every evidence message is among `message_ids`."""
    ids = sorted(set(message_ids))
    cited: set[str] = set()
    for i in range(0, len(ids), _CHUNK):
        cited.update(
            (
                await conn.execute(
                    sa.select(evidence.c.fact_id).where(
                        evidence.c.message_id.in_(ids[i : i + _CHUNK])
                    )
                )
            ).scalars()
        )
    out = []
    gone = set(ids)
    for fact_id in sorted(cited):
        rows = set(
            (
                await conn.execute(
                    sa.select(evidence.c.message_id).where(evidence.c.fact_id == fact_id)
                )
            ).scalars()
        )
        if rows <= gone:
            out.append(fact_id)
    return out


async def resting_on(conn: AsyncConnection, message_ids: Sequence[int]) -> list[str]:
    """The facts a forget of `message_ids` would remove, as "key: value" (a preview)."""
    doomed = await supported_only_by(conn, message_ids)
    if not doomed:
        return []
    rows = await conn.execute(
        sa.select(facts.c.key, facts.c.value).where(facts.c.id.in_(doomed)).order_by(facts.c.key)
    )
    return [f"{key}: {value}" for key, value in rows]


async def forget_evidence(conn: AsyncConnection, message_ids: Sequence[int]) -> int:
    """Drop `message_ids`' evidence and the facts they alone supported (module doc); the
    number of facts deleted. Call before the messages are deleted."""
    doomed = await supported_only_by(conn, message_ids)
    ids = sorted(set(message_ids))
    for i in range(0, len(ids), _CHUNK):
        await conn.execute(evidence.delete().where(evidence.c.message_id.in_(ids[i : i + _CHUNK])))
    if not doomed:
        return 0
    rows = {
        r.id: r for r in (await conn.execute(sa.select(facts).where(facts.c.id.in_(doomed)))).all()
    }
    heirs = (
        await conn.execute(
            sa.select(facts.c.id, facts.c.replaced_by).where(
                facts.c.replaced_by.in_(doomed), facts.c.id.not_in(doomed)
            )
        )
    ).all()
    # Deleted first: an heir that becomes current again must not meet them (one current
    # fact per key, a unique index).
    await conn.execute(facts.delete().where(facts.c.id.in_(doomed)))
    for heir_id, replaced_by in heirs:
        # Follow the chain past every deleted fact: the heir ends as the last one did.
        end = rows[replaced_by]
        while end.replaced_by in rows:
            end = rows[end.replaced_by]
        await conn.execute(
            sa.update(facts)
            .where(facts.c.id == heir_id)
            .values(
                state=end.state,
                valid_to=end.valid_to,
                version_to=end.version_to,
                replaced_by=end.replaced_by,
            )
        )
    for user_id, agent_id in sorted({(r.user_id, r.agent_id) for r in rows.values()}):
        await _new_version(conn, int(user_id), agent_id)
    return len(doomed)


async def _new_version(conn: AsyncConnection, user_id: int, agent_id: str) -> None:
    owned = sa.and_(_state.c.user_id == user_id, _state.c.agent_id == agent_id)
    now = utcnow()
    before = int(await conn.scalar(sa.select(_state.c.version).where(owned)) or 0)
    await conn.execute(sa.update(_state).where(owned).values(version=before + 1, updated_at=now))
    await conn.execute(
        sa.insert(_changelog).values(
            user_id=user_id,
            agent_id=agent_id,
            session_id="",
            scope=Scope.FACT.value,
            action=Action.DELETE.value,
            source=change_source_from_context().value,
            version_before=before,
            version_after=before + 1,
            before_text="",
            after_text="",
            created_at=now,
        )
    )
    await conn.execute(
        sa.update(_snapshots)
        .where(_snapshots.c.user_id == user_id, _snapshots.c.agent_id == agent_id)
        .values(version=before + 1, updated_at=now)
    )


async def erase_facts(conn: AsyncConnection, user_id: int, agent_id: str) -> int:
    """Every fact of (user, agent) with its evidence; how many facts."""
    owned = sa.and_(facts.c.user_id == user_id, facts.c.agent_id == agent_id)
    count = int(await conn.scalar(sa.select(sa.func.count()).select_from(facts).where(owned)) or 0)
    await conn.execute(
        evidence.delete().where(evidence.c.fact_id.in_(sa.select(facts.c.id).where(owned)))
    )
    await conn.execute(facts.delete().where(owned))
    return count
