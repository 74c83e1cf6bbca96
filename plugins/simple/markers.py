"""Reading and writing compact markers (the `simple_compactions` table)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from memory.contract.types import as_utc
from memory.text.tokens import estimate_tokens
from plugins.simple.models import SimpleCompaction

markers: sa.Table = SimpleCompaction.__table__  # type: ignore[attr-defined]

# The handoff summary targets a third of what it replaces, within these bounds: short
# sources still get room for the seven headings, long ones stay readable.
MIN_SUMMARY_TOKENS = 256
MAX_SUMMARY_TOKENS = 4000


def handoff_target(source_tokens: int, previous: str) -> int:
    """Tokens a marker's summary of `source_tokens` of messages, carrying `previous`
    forward, is asked for."""
    return min(
        MAX_SUMMARY_TOKENS,
        max(MIN_SUMMARY_TOKENS, (source_tokens + estimate_tokens(previous)) // 3),
    )


@dataclass(frozen=True)
class Marker:
    id: int
    through_seq: int  # the last message seq the summary covers
    summary: str
    archive_name: str
    archived_at: datetime


async def latest(conn: AsyncConnection, conversation_id: int) -> Marker | None:
    row = (
        (
            await conn.execute(
                sa.select(markers)
                .where(markers.c.conversation_id == conversation_id)
                .order_by(markers.c.id.desc())
                .limit(1)
            )
        )
        .mappings()
        .first()
    )
    if row is None:
        return None
    return Marker(
        id=row["id"],
        through_seq=row["through_seq"],
        summary=row["summary"],
        archive_name=row["archive_name"],
        archived_at=as_utc(row["archived_at"]),
    )


async def count(conn: AsyncConnection, conversation_id: int) -> int:
    return int(
        await conn.scalar(
            sa.select(sa.func.count()).where(markers.c.conversation_id == conversation_id)
        )
        or 0
    )


async def insert(
    conn: AsyncConnection,
    conversation_id: int,
    *,
    through_seq: int,
    summary: str,
    archive_name: str,
    archived_at: datetime,
    messages_compacted: int,
    source_tokens: int,
) -> int:
    return int(
        await conn.scalar(
            sa.insert(markers)
            .values(
                conversation_id=conversation_id,
                through_seq=through_seq,
                summary=summary,
                archive_name=archive_name,
                archived_at=archived_at,
                messages_compacted=messages_compacted,
                source_tokens=source_tokens,
            )
            .returning(markers.c.id)
        )
    )
