"""Applying fact operations inside the write transaction (semantics:
memory/contract/facts.py). `apply_ops` changes rows only; the caller (`FactStores`) holds
the owner's lock, bumps the version and writes the changelog row."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from memory.contract.errors import InvalidArgument, NotFound
from memory.contract.facts import (
    MAX_OPS,
    Fact,
    FactCapReached,
    FactChange,
    FactOp,
    FactOpKind,
    FactState,
)
from memory.contract.types import as_utc, utcnow
from memory.facts.keys import clean_value, new_fact_id, normalize_key, same_value
from memory.facts.models import RETRACTION, SUPPORT, evidence, facts
from memory.facts.rows import facts_by_id, owned_message_dates, owner_clause, read_facts


@dataclass
class Writer:
    """Who writes, at which new version: what every new row records."""

    user_id: int
    agent_id: str
    version: int
    source: str
    session_id: str
    now: datetime = field(default_factory=utcnow)


@dataclass
class Applied:
    """What a call did: the changes, and the facts touched before and after (by id), for
    the changelog row."""

    changes: list[FactChange] = field(default_factory=list)
    before: dict[str, Fact] = field(default_factory=dict)
    touched: list[str] = field(default_factory=list)

    def touch(self, fact: Fact | None) -> None:
        if fact is None:
            return
        self.before.setdefault(fact.id, fact)
        if fact.id not in self.touched:
            self.touched.append(fact.id)

    def touch_new(self, fact_id: str) -> None:
        if fact_id not in self.touched:
            self.touched.append(fact_id)


def check_ops(ops: Sequence[FactOp]) -> None:
    if not isinstance(ops, Sequence) or isinstance(ops, str):
        raise InvalidArgument("fact operations must be a list")
    if not ops:
        raise InvalidArgument("no fact operation given")
    if len(ops) > MAX_OPS:
        raise InvalidArgument(f"at most {MAX_OPS} fact operations in one call, got {len(ops)}")
    for op in ops:
        if not isinstance(op, FactOp):
            raise InvalidArgument(f"not a fact operation: {op!r}")
        if op.kind not in {k.value for k in FactOpKind}:
            raise InvalidArgument(
                f"unknown fact operation {op.kind!r}: expected set, retract or merge"
            )


async def current_on(conn: AsyncConnection, w: Writer, key: str) -> Fact | None:
    found = await read_facts(
        conn,
        sa.select(facts).where(
            owner_clause(w.user_id, w.agent_id),
            facts.c.state == FactState.CURRENT.value,
            facts.c.key == key,
        ),
    )
    return found[0] if found else None


async def count_current(conn: AsyncConnection, user_id: int, agent_id: str) -> int:
    return int(
        await conn.scalar(
            sa.select(sa.func.count())
            .select_from(facts)
            .where(owner_clause(user_id, agent_id), facts.c.state == FactState.CURRENT.value)
        )
        or 0
    )


async def add_evidence(
    conn: AsyncConnection, fact_id: str, ids: Sequence[int], role: str = SUPPORT
) -> list[int]:
    """Link `ids` to the fact in `role` (models.py); the ones it did not have yet (a
    message it has keeps its role)."""
    have = set(
        (
            await conn.execute(
                sa.select(evidence.c.message_id).where(evidence.c.fact_id == fact_id)
            )
        ).scalars()
    )
    new = sorted(set(ids) - have)
    if new:
        await conn.execute(
            sa.insert(evidence),
            [{"fact_id": fact_id, "message_id": m, "role": role} for m in new],
        )
    return new


async def insert_fact(
    conn: AsyncConnection,
    w: Writer,
    key: str,
    value: str,
    valid_from: datetime,
    ids: Sequence[int],
    fact_id: str | None = None,
) -> str:
    fact_id = fact_id or new_fact_id()
    await conn.execute(
        sa.insert(facts).values(
            id=fact_id,
            user_id=w.user_id,
            agent_id=w.agent_id,
            key=key,
            value=value,
            state=FactState.CURRENT.value,
            valid_from=valid_from,
            valid_to=None,
            version_from=w.version,
            version_to=None,
            source=w.source,
            session_id=w.session_id,
            replaced_by=None,
            created_at=w.now,
        )
    )
    await add_evidence(conn, fact_id, ids)
    return fact_id


async def close_fact(
    conn: AsyncConnection,
    w: Writer,
    fact: Fact,
    state: FactState,
    valid_to: datetime,
    replaced_by: str | None,
) -> None:
    # An interval never ends before it starts (a cited message older than the fact).
    end = max(valid_to, fact.valid_from)
    await conn.execute(
        sa.update(facts)
        .where(facts.c.id == fact.id)
        .values(state=state.value, valid_to=end, version_to=w.version, replaced_by=replaced_by)
    )


async def _cited(
    conn: AsyncConnection, w: Writer, op: FactOp
) -> tuple[list[int], tuple[int, ...], datetime | None]:
    """The cited ids kept (the owner's), those dropped, and the earliest kept's date."""
    raw = list(op.message_ids or ())
    for i in raw:
        if isinstance(i, bool) or not isinstance(i, int):
            raise InvalidArgument(f"message ids must be integers, got {i!r}")
    dates = await owned_message_dates(conn, w.user_id, w.agent_id, raw)
    kept = sorted(dates)
    dropped = tuple(sorted(set(raw) - set(kept)))
    return kept, dropped, min(dates.values()) if dates else None


def _when(op: FactOp, earliest: datetime | None, now: datetime) -> datetime:
    if op.valid_from is not None:
        if not isinstance(op.valid_from, datetime):
            raise InvalidArgument("valid_from must be a date and time")
        return as_utc(op.valid_from)
    return earliest or now


async def apply_ops(
    conn: AsyncConnection, w: Writer, ops: Sequence[FactOp], max_facts: int
) -> Applied:
    check_ops(ops)
    before_count = await count_current(conn, w.user_id, w.agent_id)
    done = Applied()
    for op in ops:
        key = normalize_key(op.key)
        kept, dropped, earliest = await _cited(conn, w, op)
        if op.kind == FactOpKind.RETRACT:
            await _retract(conn, w, op, key, kept, dropped, earliest, done)
        elif op.kind == FactOpKind.SET:
            await _set(conn, w, op, key, kept, dropped, earliest, done)
        else:
            await _merge(conn, w, op, key, kept, dropped, earliest, done)
    after_count = await count_current(conn, w.user_id, w.agent_id)
    if after_count > max_facts and after_count > before_count:
        raise FactCapReached(max_facts)  # the transaction rolls back: nothing written
    # The changes as they stand at the end of the call (a fact set then superseded in
    # one call reads superseded).
    final = await facts_by_id(
        conn, [c.fact.id for c in done.changes] + [f.id for c in done.changes for f in c.closed]
    )
    done.changes = [
        replace(
            c,
            fact=final.get(c.fact.id, c.fact),
            closed=tuple(final.get(f.id, f) for f in c.closed),
        )
        for c in done.changes
    ]
    return done


async def _set(
    conn: AsyncConnection,
    w: Writer,
    op: FactOp,
    key: str,
    kept: list[int],
    dropped: tuple[int, ...],
    earliest: datetime | None,
    done: Applied,
) -> None:
    value = clean_value(op.value)
    old = await current_on(conn, w, key)
    done.touch(old)
    if old is not None and same_value(old.value, value):
        await add_evidence(conn, old.id, kept)
        fact = (await facts_by_id(conn, [old.id]))[old.id]
        done.changes.append(FactChange("restated", fact, (), dropped, w.version))
        return
    valid_from = _when(op, earliest, w.now)
    new_id = new_fact_id()
    closed: tuple[Fact, ...] = ()
    if old is not None:  # closed first: one current fact per key (a unique index)
        await close_fact(conn, w, old, FactState.SUPERSEDED, valid_from, new_id)
        closed = (old,)
    await insert_fact(conn, w, key, value, valid_from, kept, new_id)
    done.touch_new(new_id)
    fact = (await facts_by_id(conn, [new_id]))[new_id]
    action = "superseded" if old is not None else "created"
    done.changes.append(FactChange(action, fact, closed, dropped, w.version))


async def _retract(
    conn: AsyncConnection,
    w: Writer,
    op: FactOp,
    key: str,
    kept: list[int],
    dropped: tuple[int, ...],
    earliest: datetime | None,
    done: Applied,
) -> None:
    old = await current_on(conn, w, key)
    if old is None:
        raise NotFound(f"no current fact under {key!r} to retract")
    done.touch(old)
    # The message saying it stopped is the retraction's evidence (the timeline shows it),
    # in its own role: forgetting it undoes the retraction (memory/facts/forgetting.py).
    await add_evidence(conn, old.id, kept, RETRACTION)
    await close_fact(conn, w, old, FactState.RETRACTED, _when(op, earliest, w.now), None)
    fact = (await facts_by_id(conn, [old.id]))[old.id]
    done.changes.append(FactChange("retracted", fact, (fact,), dropped, w.version))


async def _merge(
    conn: AsyncConnection,
    w: Writer,
    op: FactOp,
    key: str,
    kept: list[int],
    dropped: tuple[int, ...],
    earliest: datetime | None,
    done: Applied,
) -> None:
    value = clean_value(op.value)
    if isinstance(op.merged_keys, str):
        raise InvalidArgument("merged_keys must be a list of keys")
    keys = list(dict.fromkeys([*(normalize_key(k) for k in op.merged_keys), key]))
    olds = [f for k in keys if (f := await current_on(conn, w, k)) is not None]
    if len(keys) < 2:
        raise InvalidArgument("a merge names the keys it merges (merged_keys)")
    for old in olds:
        done.touch(old)
    # The merged fact stands on everything its parts stood on.
    support = sorted({*kept, *(m for f in olds for m in f.evidence)})
    starts = [f.valid_from for f in olds]
    valid_from = as_utc(op.valid_from) if op.valid_from else min(starts or [earliest or w.now])
    new_id = new_fact_id()
    for old in olds:
        await close_fact(conn, w, old, FactState.SUPERSEDED, valid_from, new_id)
    await insert_fact(conn, w, key, value, valid_from, support, new_id)
    done.touch_new(new_id)
    fact = (await facts_by_id(conn, [new_id]))[new_id]
    done.changes.append(FactChange("merged", fact, tuple(olds), dropped, w.version))
