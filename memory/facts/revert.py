"""Undoing one fact change as a new version (the review's Revert button, the console).

The change's changelog row holds the facts it touched before and after
(`changelog_lists`). What it created is closed as `reverted`; what it closed (superseded,
retracted, merged away) is reopened as a copy current from the revert's version, so a
snapshot at any earlier version still reads as it did; evidence a restatement added is
unlinked. A fact a later change moved on from the row's "after" is a Conflict: revert
the later change first."""

from __future__ import annotations

import json
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from memory.contract.errors import Conflict, InvalidArgument, StoreCorrupt
from memory.contract.facts import Fact, FactChange, FactState
from memory.facts.apply import Applied, Writer, add_evidence, insert_fact
from memory.facts.models import SUPPORT, evidence, facts
from memory.facts.rows import evidence_of, facts_by_id


def changelog_lists(before_text: str, after_text: str) -> tuple[list[dict[str, Any]], ...]:
    """A fact changelog row's (before, after): JSON lists of `Fact.to_dict()`."""
    try:
        before = json.loads(before_text) if before_text.strip() else []
        after = json.loads(after_text) if after_text.strip() else []
    except ValueError as exc:
        raise StoreCorrupt(f"a fact changelog row is not JSON: {exc}") from exc
    if not isinstance(before, list) or not isinstance(after, list):
        raise StoreCorrupt("a fact changelog row is not a JSON list")
    return before, after


def _reopens(prior: dict[str, Any], fact: Fact) -> bool:
    """The change closed this fact (superseded, retracted, merged away)."""
    return prior.get("state") == FactState.CURRENT and fact.state != FactState.CURRENT


def _cited(item: dict[str, Any]) -> set[int]:
    return {int(m) for m in item.get("evidence") or ()}


def _moved_on(now: Fact | None, then: dict[str, Any]) -> bool:
    return (
        now is None
        or now.state != then.get("state")
        or now.version_to != then.get("version_to")
        or now.replaced_by != then.get("replaced_by")
    )


async def revert_rows(
    conn: AsyncConnection, w: Writer, before: list[dict[str, Any]], after: list[dict[str, Any]]
) -> Applied:
    if not before and not after:
        raise InvalidArgument("that change removed facts on a forget: there is nothing to revert")
    was = {str(f["id"]): f for f in before}
    done = Applied()
    now = await facts_by_id(conn, [str(f["id"]) for f in after])
    for then in after:
        fid = str(then["id"])
        if _moved_on(now.get(fid), then):
            raise Conflict(
                f"fact {then.get('key')!r} changed again since (or was forgotten): "
                "revert the later change first"
            )
    # What the change created is closed before what it closed reopens: one current
    # fact per key (a unique index).
    reopening = [
        t
        for t in after
        if (p := was.get(str(t["id"]))) is not None and _reopens(p, now[str(t["id"])])
    ]
    for then in [t for t in after if t not in reopening] + reopening:
        fid = str(then["id"])
        fact = now[fid]
        prior = was.get(fid)
        done.touch(fact)
        if prior is None:  # created by the change: it never held
            await conn.execute(
                sa.update(facts)
                .where(facts.c.id == fid)
                .values(
                    state=FactState.REVERTED.value,
                    valid_to=fact.valid_from,
                    version_to=fact.version_to if fact.version_to is not None else w.version,
                )
            )
            closed = (await facts_by_id(conn, [fid]))[fid]
            done.changes.append(FactChange("reverted", closed, (closed,), (), w.version))
        elif _reopens(prior, fact):
            copy = await _reopen(conn, w, fact)
            done.touch_new(copy.id)
            done.changes.append(FactChange("reopened", copy, (), (), w.version))
        else:  # a restatement added evidence: unlink what it added, as the row shows it
            # (not what later restatements added since: they are their own changes)
            added = (_cited(then) - _cited(prior)) & set(fact.evidence)
            if added:
                await conn.execute(
                    evidence.delete().where(
                        evidence.c.fact_id == fid, evidence.c.message_id.in_(sorted(added))
                    )
                )
            back = (await facts_by_id(conn, [fid]))[fid]
            done.changes.append(FactChange("reverted", back, (), (), w.version))
    return done


async def _reopen(conn: AsyncConnection, w: Writer, fact: Fact) -> Fact:
    """`fact` current again from this version, as a copy; the closed row keeps its
    version interval and yields its valid interval to the copy (else a date in both
    would find the fact twice)."""
    copy_id = await insert_fact(conn, w, fact.key, fact.value, fact.valid_from, [])
    # What says it, not what said it stopped: the copy is not retracted.
    support = await evidence_of(conn, [fact.id], SUPPORT)
    await add_evidence(conn, copy_id, support.get(fact.id, []))
    await conn.execute(
        sa.update(facts)
        .where(facts.c.id == fact.id)
        .values(valid_to=fact.valid_from, replaced_by=copy_id)
    )
    return (await facts_by_id(conn, [copy_id]))[copy_id]
