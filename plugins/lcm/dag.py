"""The summary DAG: summary rows and their edges (leaf -> messages, condensed -> children)."""

from __future__ import annotations

import secrets
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from memory.contract.types import utcnow
from memory.storage.history import StoredMessage
from memory.text.tokens import estimate_tokens
from plugins.lcm.models import summaries, summary_messages, summary_parents

LEAF = "leaf"
CONDENSED = "condensed"


def new_summary_id() -> str:
    return f"sum_{secrets.token_hex(8)}"


def _utc(value: datetime | None) -> datetime | None:
    # SQLite hands back naive datetimes for timezone-aware columns in some paths.
    if value is not None and value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    return value


@dataclass
class SummaryRecord:
    id: str
    conversation_id: int
    kind: str
    depth: int
    content: str
    token_count: int
    earliest_at: datetime | None
    latest_at: datetime | None
    descendant_count: int
    descendant_token_count: int
    created_at: datetime | None = None
    # Filled by the loaders that need them (assembler, describe).
    parent_ids: list[str] = field(default_factory=list)
    child_ids: list[str] = field(default_factory=list)

    @classmethod
    def new_leaf(
        cls, conv_id: int, content: str, sources: Sequence[StoredMessage]
    ) -> SummaryRecord:
        """A new leaf summary `content` of the messages `sources` (compaction and the
        rebuild after a forget make them the same way)."""
        return cls(
            id=new_summary_id(),
            conversation_id=conv_id,
            kind=LEAF,
            depth=0,
            content=content,
            token_count=estimate_tokens(content),
            earliest_at=min(s.created_at for s in sources),
            latest_at=max(s.created_at for s in sources),
            descendant_count=len(sources),
            descendant_token_count=sum(s.token_count for s in sources),
            created_at=utcnow(),
        )

    @classmethod
    def new_condensed(
        cls, conv_id: int, depth: int, content: str, kids: Sequence[SummaryRecord]
    ) -> SummaryRecord:
        """A new condensed summary `content` at `depth` of the summaries `kids`."""
        lows = [k.earliest_at for k in kids if k.earliest_at is not None]
        highs = [k.latest_at for k in kids if k.latest_at is not None]
        return cls(
            id=new_summary_id(),
            conversation_id=conv_id,
            kind=CONDENSED,
            depth=depth,
            content=content,
            token_count=estimate_tokens(content),
            earliest_at=min(lows) if lows else None,
            latest_at=max(highs) if highs else None,
            descendant_count=sum(k.descendant_count for k in kids),
            descendant_token_count=sum(k.descendant_token_count for k in kids),
            created_at=utcnow(),
        )

    @classmethod
    def from_row(cls, row: sa.RowMapping) -> SummaryRecord:
        return cls(
            id=row["id"],
            conversation_id=row["conversation_id"],
            kind=row["kind"],
            depth=row["depth"],
            content=row["content"],
            token_count=row["token_count"],
            earliest_at=_utc(row["earliest_at"]),
            latest_at=_utc(row["latest_at"]),
            descendant_count=row["descendant_count"],
            descendant_token_count=row["descendant_token_count"],
            created_at=_utc(row["created_at"]),
        )

    def row(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "conversation_id": self.conversation_id,
            "kind": self.kind,
            "depth": self.depth,
            "content": self.content,
            "token_count": self.token_count,
            "earliest_at": self.earliest_at,
            "latest_at": self.latest_at,
            "descendant_count": self.descendant_count,
            "descendant_token_count": self.descendant_token_count,
            "created_at": self.created_at,
        }


async def load_summaries(
    conn: AsyncConnection, ids: Iterable[str], *, with_edges: bool = False
) -> dict[str, SummaryRecord]:
    id_list = list(dict.fromkeys(ids))
    if not id_list:
        return {}
    rows = (await conn.execute(sa.select(summaries).where(summaries.c.id.in_(id_list)))).mappings()
    out = {r["id"]: SummaryRecord.from_row(r) for r in rows}
    if with_edges and out:
        found = list(out)
        for parent, child in (
            await conn.execute(
                sa.select(summary_parents.c.summary_id, summary_parents.c.child_id)
                .where(summary_parents.c.child_id.in_(found))
                .order_by(summary_parents.c.summary_id)
            )
        ).all():
            out[child].parent_ids.append(parent)
        for parent, child in (
            await conn.execute(
                sa.select(summary_parents.c.summary_id, summary_parents.c.child_id)
                .where(summary_parents.c.summary_id.in_(found))
                .order_by(summary_parents.c.summary_id, summary_parents.c.ordinal)
            )
        ).all():
            out[parent].child_ids.append(child)
    return out


async def source_message_ids(conn: AsyncConnection, summary_id: str) -> list[int]:
    """A leaf's source messages, in order."""
    return list(
        (
            await conn.execute(
                sa.select(summary_messages.c.message_id)
                .where(summary_messages.c.summary_id == summary_id)
                .order_by(summary_messages.c.ordinal)
            )
        ).scalars()
    )


async def insert_summaries(
    conn: AsyncConnection, records: Sequence[SummaryRecord], sources: dict[str, list[Any]]
) -> None:
    """Insert summary rows and their edges: `sources[id]` is a leaf's message ids or a
    condensed summary's child ids, in order."""
    if not records:
        return
    await conn.execute(sa.insert(summaries), [r.row() for r in records])
    leaf_rows = [
        {"summary_id": r.id, "ordinal": i, "message_id": mid}
        for r in records
        if r.kind == LEAF
        for i, mid in enumerate(sources[r.id])
    ]
    parent_rows = [
        {"summary_id": r.id, "ordinal": i, "child_id": cid}
        for r in records
        if r.kind == CONDENSED
        for i, cid in enumerate(sources[r.id])
    ]
    if leaf_rows:
        await conn.execute(sa.insert(summary_messages), leaf_rows)
    if parent_rows:
        await conn.execute(sa.insert(summary_parents), parent_rows)
