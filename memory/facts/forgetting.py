"""Forget and erase reaching the facts, inside the provider's forget transaction.

The rule: the memory reads as if the forgotten messages had never been said. Their
evidence rows go. A fact left with no support that had some (the forgotten messages
alone said it) is deleted, and what it had closed takes its place: the fact it
superseded (or the facts a merge replaced) reopens with the deleted fact's end. A
retraction whose cited messages are all forgotten never happened: the fact it closed
(still closed by it: a revert had not reopened it) reopens from the retraction's time,
current again, or superseded by the next fact set on its key since, if there is one. A
retraction's messages are its own evidence rows (role `retraction`, models.py), so a
forget tells "said it" from "said it stopped". A fact, or a retraction, written without
any citation is not touched. The changelog's copies of the change are left, as profile
versions are (docs/CHAT.md, "Forgetting").

A forget that removed or reopened a fact rewrote what earlier versions read, which a
prompt built at a session's snapshot (and cached per version, bot/model/prompt.py) must
not keep showing: the owner gets a new version, recorded by a content-free fact
changelog row (empty before and after: nothing to revert), and every session snapshot
of the owner moves to it, in the forget's transaction (the caller announces the move:
memory.storage.snapshots.moved()).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from memory.contract.context import change_source_from_context
from memory.contract.facts import FactState
from memory.contract.types import Action, Scope, as_utc, utcnow
from memory.facts.apply import add_evidence
from memory.facts.models import RETRACTION, SUPPORT, evidence, facts
from memory.facts.rows import evidence_of, owner_clause
from memory.storage.store_models import MemoryChangelog, MemoryState, SessionSnapshotRow

_state: sa.Table = MemoryState.__table__  # type: ignore[attr-defined]
_snapshots: sa.Table = SessionSnapshotRow.__table__  # type: ignore[attr-defined]
_changelog: sa.Table = MemoryChangelog.__table__  # type: ignore[attr-defined]

_CHUNK = 500


async def only_by(
    conn: AsyncConnection, message_ids: Sequence[int], role: str = SUPPORT
) -> list[str]:
    """The facts with evidence in `role` among `message_ids` and none outside them."""
    ids = sorted(set(message_ids))
    cited: set[str] = set()
    for i in range(0, len(ids), _CHUNK):
        cited.update(
            (
                await conn.execute(
                    sa.select(evidence.c.fact_id).where(
                        evidence.c.message_id.in_(ids[i : i + _CHUNK]), evidence.c.role == role
                    )
                )
            ).scalars()
        )
    held = await evidence_of(conn, cited, role)
    gone = set(ids)
    return [f for f in sorted(cited) if set(held.get(f, [])) <= gone]


async def _unretracted(
    conn: AsyncConnection, message_ids: Sequence[int], doomed: Sequence[str]
) -> list[Any]:
    """The fact rows whose retraction rests on `message_ids` alone and still holds."""
    ids = [f for f in await only_by(conn, message_ids, RETRACTION) if f not in set(doomed)]
    if not ids:
        return []
    rows = await conn.execute(
        sa.select(facts)
        .where(
            facts.c.id.in_(ids),
            facts.c.state == FactState.RETRACTED.value,
            facts.c.replaced_by.is_(None),
        )
        .order_by(facts.c.id)
    )
    return list(rows.all())


def _lines(rows: Sequence[Any]) -> list[str]:
    return [f"{r.key}: {r.value}" for r in sorted(rows, key=lambda r: (r.key, r.id))]


async def resting_on(conn: AsyncConnection, message_ids: Sequence[int]) -> list[str]:
    """The facts a forget of `message_ids` would remove, as "key: value" (a preview)."""
    doomed = await only_by(conn, message_ids)
    if not doomed:
        return []
    rows = await conn.execute(
        sa.select(facts.c.id, facts.c.key, facts.c.value).where(facts.c.id.in_(doomed))
    )
    return _lines(rows.all())


async def retracted_by(conn: AsyncConnection, message_ids: Sequence[int]) -> list[str]:
    """The facts a forget of `message_ids` would bring back (their retraction goes), as
    "key: value" (a preview)."""
    return _lines(await _unretracted(conn, message_ids, await only_by(conn, message_ids)))


async def forget_evidence(conn: AsyncConnection, message_ids: Sequence[int]) -> int:
    """Drop `message_ids`' evidence, the facts they alone supported, and the retractions
    they alone made (module doc); the number of facts deleted or reopened. Call before
    the messages are deleted."""
    doomed = await only_by(conn, message_ids)
    back = await _unretracted(conn, message_ids, doomed)
    ids = sorted(set(message_ids))
    owners = {(int(r.user_id), r.agent_id) for r in back}
    if doomed:
        owners |= await _delete(conn, doomed, set(ids))
    for i in range(0, len(ids), _CHUNK):
        await conn.execute(evidence.delete().where(evidence.c.message_id.in_(ids[i : i + _CHUNK])))
    for row in back:
        await _reopen(conn, row)
    for user_id, agent_id in sorted(owners):
        await _new_version(conn, user_id, agent_id)
    return len(doomed) + len(back)


async def _delete(
    conn: AsyncConnection, doomed: Sequence[str], gone: set[int]
) -> set[tuple[int, str]]:
    """Delete `doomed`; what they closed takes their place. Their owners."""
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
    # Follow the chain past every deleted fact: the heir ends as the last one did, and
    # a retraction that ended it now ends the heir (its messages go with it).
    ends = {}
    for heir_id, replaced_by in heirs:
        end = rows[replaced_by]
        while end.replaced_by in rows:
            end = rows[end.replaced_by]
        ends[heir_id] = end
    retractions = await evidence_of(conn, [e.id for e in ends.values()], RETRACTION)
    # Deleted first: an heir that becomes current again must not meet them (one current
    # fact per key, a unique index).
    await conn.execute(facts.delete().where(facts.c.id.in_(doomed)))
    for heir_id, end in ends.items():
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
        said = retractions.get(end.id, [])
        if said and set(said) <= gone:  # that retraction is forgotten too
            await _reopen(conn, (await conn.execute(_row(heir_id))).one())
        else:
            await add_evidence(conn, heir_id, sorted(set(said) - gone), RETRACTION)
    return {(int(r.user_id), r.agent_id) for r in rows.values()}


def _row(fact_id: str) -> sa.Select[Any]:
    return sa.select(facts).where(facts.c.id == fact_id)


async def _reopen(conn: AsyncConnection, row: Any) -> None:
    """A retracted fact whose retraction never happened: current again, or superseded
    by the first fact its key had after the retraction (one current fact per key)."""
    later = (
        await conn.execute(
            sa.select(facts.c.id, facts.c.valid_from, facts.c.version_from)
            .where(
                owner_clause(int(row.user_id), row.agent_id),
                facts.c.key == row.key,
                facts.c.id != row.id,
                facts.c.state != FactState.REVERTED.value,
                facts.c.version_from >= row.version_to,
            )
            .order_by(facts.c.version_from, facts.c.valid_from, facts.c.id)
            .limit(1)
        )
    ).first()
    if later is None:
        values: dict[str, Any] = {
            "state": FactState.CURRENT.value,
            "valid_to": None,
            "version_to": None,
        }
    else:
        values = {
            "state": FactState.SUPERSEDED.value,
            "valid_to": max(as_utc(later.valid_from), as_utc(row.valid_from)),
            "version_to": later.version_from,
            "replaced_by": later.id,
        }
    await conn.execute(sa.update(facts).where(facts.c.id == row.id).values(**values))


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
