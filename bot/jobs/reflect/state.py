"""What reflect persists: per-session watermarks and leases, and claimed cycle slots.

Running each cycle once across replicas
---------------------------------------
APScheduler's job stores do not stop two processes from running the same job, so the
job body guards itself. A scheduled cycle first claims its slot,
`slot = floor(now / interval)`, by inserting the row `(agent_id, slot)` into
`reflect_slots` with `INSERT ... ON CONFLICT DO NOTHING RETURNING`. The primary key lets
exactly one insert win: on PostgreSQL a concurrent insert of the same key waits for the
first transaction and then does nothing; SQLite has one writer anyway. The replica that
gets no row back skips the cycle. Unlike an advisory lock, the claim outlives the
transaction, so a replica whose timer fires a little later in the same slot cannot run
the cycle a second time, and the table doubles as a log of who ran which cycle.

Within a cycle every session is also leased (`lease_token`, `lease_until`) before it is
reviewed, so a manual `mnemo reflect --once` (which claims no slot) never reviews a
session that a scheduled cycle is reviewing, and a crashed reviewer's lease simply
expires. Watermarks and failures are written only by the lease holder.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import UTC, datetime

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from bot.jobs.reflect.models import ReflectSlot, ReflectWatermark
from memory.contract.types import Session, as_utc, utcnow
from memory.storage import forgetting
from memory.storage.db import conflict_insert, write_transaction
from memory.storage.forgetting import Owner
from memory.storage.usage import write_pending

watermarks: sa.Table = ReflectWatermark.__table__  # type: ignore[attr-defined]
slots: sa.Table = ReflectSlot.__table__  # type: ignore[attr-defined]

MAX_ERROR_CHARS = 500
# Slot rows kept per agent: enough to see recent history; older slots never recur.
KEEP_SLOTS = 1000


@dataclass(frozen=True)
class Candidate:
    """A session with activity after its watermark, as selected for a cycle."""

    session: Session
    activity_at: datetime
    watermark: datetime | None


@dataclass(frozen=True)
class WatermarkRow:
    watermark: datetime | None
    attempted_at: datetime | None
    lease_until: datetime | None
    failures: int = 0
    last_error: str = ""


@dataclass(frozen=True)
class Lease:
    """A session taken for review. `watermark` (review from) and `activity_at` (move the
    watermark to, on success) are read afresh under the lease, before the review."""

    session: Session
    token: str
    watermark: datetime | None
    activity_at: datetime


class ReflectState:
    def __init__(self, engine: AsyncEngine, agent_id: str, replica_id: str) -> None:
        self.engine = engine
        self.agent_id = agent_id
        self.replica_id = replica_id[:255]

    # -- slots ---------------------------------------------------------------------

    async def claim_slot(self, slot: int) -> bool:
        """True when this replica won `slot` (and must run that cycle)."""
        async with write_transaction(self.engine) as conn:
            won = await conn.scalar(
                conflict_insert(conn, slots)
                .values(
                    agent_id=self.agent_id,
                    slot=slot,
                    claimed_by=self.replica_id,
                    claimed_at=utcnow(),
                )
                .on_conflict_do_nothing(index_elements=["agent_id", "slot"])
                .returning(slots.c.slot)
            )
        return won is not None

    async def finish_slot(self, slot: int, reviewed: int, changes: int, failed: int) -> None:
        async with write_transaction(self.engine) as conn:
            await conn.execute(
                sa.update(slots)
                .where(slots.c.agent_id == self.agent_id, slots.c.slot == slot)
                .values(finished_at=utcnow(), reviewed=reviewed, changes=changes, failed=failed)
            )
            await conn.execute(
                sa.delete(slots).where(
                    slots.c.agent_id == self.agent_id, slots.c.slot <= slot - KEEP_SLOTS
                )
            )

    # -- watermarks -----------------------------------------------------------------

    async def watermark_rows(self) -> dict[str, WatermarkRow]:
        """Every watermark row of this agent, by session id."""
        w = watermarks
        query = sa.select(
            w.c.session_id,
            w.c.watermark,
            w.c.attempted_at,
            w.c.lease_until,
            w.c.failures,
            w.c.last_error,
        ).where(w.c.agent_id == self.agent_id)
        async with self.engine.connect() as conn:
            rows = (await conn.execute(query)).all()
        return {
            r.session_id: WatermarkRow(
                as_utc(r.watermark),
                as_utc(r.attempted_at),
                as_utc(r.lease_until),
                r.failures,
                r.last_error,
            )
            for r in rows
        }

    async def watermark(self, session_id: str) -> datetime | None:
        async with self.engine.connect() as conn:
            value = await conn.scalar(
                sa.select(watermarks.c.watermark).where(watermarks.c.session_id == session_id)
            )
        return as_utc(value)

    # -- leases and outcomes -------------------------------------------------------

    async def lease(
        self, cand: Candidate, activity_at: datetime, lease_s: float, now: datetime | None = None
    ) -> Lease | None:
        """Take the session for `lease_s` seconds, or None when someone else holds it or
        has meanwhile reviewed up to `activity_at` (the session's last activity, read
        just before)."""
        now = now or utcnow()
        token = secrets.token_hex(16)
        until = datetime.fromtimestamp(now.timestamp() + lease_s, UTC)
        w = watermarks
        async with write_transaction(self.engine) as conn:
            insert = conflict_insert(conn, w).values(
                session_id=cand.session.id,
                agent_id=cand.session.agent_id,
                user_id=cand.session.user_id,
                failures=0,
                last_error="",
                lease_token=token,
                lease_until=until,
            )
            stmt = insert.on_conflict_do_update(
                index_elements=["session_id"],
                set_={"lease_token": token, "lease_until": until},
                where=sa.or_(w.c.lease_until.is_(None), w.c.lease_until < now),
            ).returning(w.c.watermark)
            row = (await conn.execute(stmt)).first()
            if row is None:
                return None
            watermark = as_utc(row.watermark)
            if watermark is not None and watermark >= activity_at:
                # Another reviewer got there first: nothing left to review.
                await conn.execute(
                    sa.update(w)
                    .where(w.c.session_id == cand.session.id)
                    .values(lease_token="", lease_until=None)
                )
                return None
        return Lease(cand.session, token, watermark, activity_at)

    async def succeed(self, lease: Lease, now: datetime | None = None) -> bool:
        """Move the watermark to the activity the review covered; False if the lease was
        lost meanwhile (expired and taken), in which case nothing is written."""
        now = now or utcnow()
        return await self._finish(
            lease,
            {
                "watermark": lease.activity_at,
                "reviewed_at": now,
                "attempted_at": now,
                "failures": 0,
                "last_error": "",
            },
        )

    async def fail(self, lease: Lease, error: str, now: datetime | None = None) -> bool:
        """Record a failed review; the watermark stays, so the next cycle retries."""
        return await self._finish(
            lease,
            {
                "attempted_at": now or utcnow(),
                "failures": watermarks.c.failures + 1,
                "last_error": error[:MAX_ERROR_CHARS],
            },
        )

    async def _finish(self, lease: Lease, values: dict) -> bool:
        w = watermarks
        async with write_transaction(self.engine) as conn:
            result = await conn.execute(
                sa.update(w)
                .where(w.c.session_id == lease.session.id, w.c.lease_token == lease.token)
                .values(**values, lease_token="", lease_until=None)
            )
            await write_pending(conn)  # what the review cost, with its outcome
        return result.rowcount == 1


async def erase_watermarks(conn: AsyncConnection, owner: Owner) -> dict[str, int]:
    """An erasure's part of reflect: its review marks of the owner's sessions (their
    last errors may quote what a review read)."""
    result = await conn.execute(
        watermarks.delete().where(
            watermarks.c.user_id == owner.user_id, watermarks.c.agent_id == owner.agent_id
        )
    )
    return {"reflect watermark(s)": int(result.rowcount or 0)}


def register_erasure() -> None:
    forgetting.on_erase("reflect", erase_watermarks)
