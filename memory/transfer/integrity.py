"""Integrity checks of the shared tables, for `mnemo memory doctor`.

Checked here, for every provider:
- `messages_seq_gap`: a conversation's seqs are exactly 1..n (appends never skip), or,
  in a conversation the changelog says messages were forgotten from (scope `forget`),
  increasing from at least 1 with the holes the forgotten messages left;
- `message_parts_ordinal_gap`: a message's parts are numbered 0..k-1;
- `changelog_version_backwards`: per (user, agent), in insertion order, `version_after`
  never decreases;
- `changelog_version_gap`: a store write (profile, soul, constraint, fact) starts at the
  version the previous one ended at, and ends one later;
- `memory_state_version_mismatch`: the stored version is the last store write's;
- `snapshot_ahead`: no session sees a version that does not exist yet.

Provider-specific checks (lcm's DAG, say) come from `IntegrityChecker`.
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from memory.contract.maintenance import Fault
from memory.contract.types import Scope
from memory.storage.forgetting import FORGET_SCOPE
from memory.storage.history import conversations, messages, parts
from memory.storage.stores import changelog_table, snapshot_table, state_table

STORE_SCOPES = (Scope.PROFILE.value, Scope.SOUL.value, Scope.CONSTRAINT.value, Scope.FACT.value)


async def check_shared(engine: AsyncEngine) -> list[Fault]:
    """Every fault in the shared tables, in a stable order."""
    async with engine.connect() as conn:
        faults = await _message_seqs(conn)
        faults += await _part_ordinals(conn)
        faults += await _changelog(conn)
        faults += await _snapshots(conn)
    return faults


async def _message_seqs(conn: AsyncConnection) -> list[Fault]:
    query = (
        sa.select(
            conversations.c.session_id,
            sa.func.count(messages.c.id),
            sa.func.min(messages.c.seq),
            sa.func.max(messages.c.seq),
        )
        .join(messages, messages.c.conversation_id == conversations.c.id)
        .group_by(conversations.c.id, conversations.c.session_id)
        .order_by(conversations.c.id)
    )
    forgot = set(
        (
            await conn.execute(
                sa.select(changelog_table.c.session_id)
                .where(changelog_table.c.scope == FORGET_SCOPE)
                .distinct()
            )
        ).scalars()
    )
    faults = []
    for session_id, count, low, high in (await conn.execute(query)).all():
        # (conversation, seq) is unique, so count == high - low + 1 means no holes.
        holes_allowed = session_id in forgot and low >= 1 and high >= count
        if (low != 1 or high != count) and not holes_allowed:
            faults.append(
                Fault(
                    "messages_seq_gap",
                    f"session {session_id}",
                    f"{count} messages with seq {low}..{high}; expected 1..{count}",
                )
            )
    return faults


async def _part_ordinals(conn: AsyncConnection) -> list[Fault]:
    query = (
        sa.select(
            conversations.c.session_id,
            messages.c.seq,
            sa.func.count(parts.c.id),
            sa.func.min(parts.c.ordinal),
            sa.func.max(parts.c.ordinal),
        )
        .join(messages, parts.c.message_id == messages.c.id)
        .join(conversations, messages.c.conversation_id == conversations.c.id)
        .group_by(conversations.c.session_id, messages.c.seq, messages.c.id)
        .having(
            sa.or_(
                sa.func.min(parts.c.ordinal) != 0,
                sa.func.max(parts.c.ordinal) != sa.func.count(parts.c.id) - 1,
            )
        )
        .order_by(messages.c.id)
    )
    return [
        Fault(
            "message_parts_ordinal_gap",
            f"session {sid} message seq {seq}",
            f"{count} parts with ordinals {low}..{high}; expected 0..{count - 1}",
        )
        for sid, seq, count, low, high in (await conn.execute(query)).all()
    ]


async def _changelog(conn: AsyncConnection) -> list[Fault]:
    states = {
        (r.user_id, r.agent_id): r.version
        for r in (
            await conn.execute(
                sa.select(state_table.c.user_id, state_table.c.agent_id, state_table.c.version)
            )
        ).all()
    }
    query = sa.select(
        changelog_table.c.id,
        changelog_table.c.user_id,
        changelog_table.c.agent_id,
        changelog_table.c.scope,
        changelog_table.c.version_before,
        changelog_table.c.version_after,
    ).order_by(changelog_table.c.user_id, changelog_table.c.agent_id, changelog_table.c.id)
    faults: list[Fault] = []
    owner: tuple[int, str] | None = None
    last_after = 0  # highest version_after seen for the owner so far
    last_store = 0  # version the last store write ended at

    def close_owner() -> None:
        if owner is not None and owner in states and states[owner] != last_store:
            faults.append(
                Fault(
                    "memory_state_version_mismatch",
                    f"user {owner[0]} agent {owner[1]}",
                    f"memory_state.version is {states[owner]} but the last store write "
                    f"ended at version {last_store}",
                )
            )

    result = await conn.stream(query)
    async for row in result:
        key = (row.user_id, row.agent_id)
        if key != owner:
            close_owner()
            owner, last_after, last_store = key, 0, 0
        where = f"user {row.user_id} agent {row.agent_id} changelog id {row.id}"
        after = row.version_after
        if after is not None:
            if after < last_after:
                faults.append(
                    Fault(
                        "changelog_version_backwards",
                        where,
                        f"version_after {after} after a row that reached {last_after}",
                    )
                )
            last_after = max(last_after, after)
        if row.scope in STORE_SCOPES:
            if row.version_before != last_store or after != (row.version_before or 0) + 1:
                faults.append(
                    Fault(
                        "changelog_version_gap",
                        where,
                        f"{row.scope} write {row.version_before} -> {after}; expected "
                        f"{last_store} -> {last_store + 1}",
                    )
                )
            if after is not None:
                last_store = after
    close_owner()
    return faults


async def _snapshots(conn: AsyncConnection) -> list[Fault]:
    query = (
        sa.select(
            snapshot_table.c.session_id,
            snapshot_table.c.version,
            sa.func.coalesce(state_table.c.version, 0),
        )
        .select_from(
            snapshot_table.outerjoin(
                state_table,
                sa.and_(
                    state_table.c.user_id == snapshot_table.c.user_id,
                    state_table.c.agent_id == snapshot_table.c.agent_id,
                ),
            )
        )
        .where(snapshot_table.c.version > sa.func.coalesce(state_table.c.version, 0))
        .order_by(snapshot_table.c.session_id)
    )
    return [
        Fault(
            "snapshot_ahead",
            f"session {sid}",
            f"snapshot version {version} is newer than the stored version {current}",
        )
        for sid, version, current in (await conn.execute(query)).all()
    ]
