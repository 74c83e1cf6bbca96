"""The `embeddings` table (core revision `0005_embeddings`): one vector per (source, item,
model), in the database so every replica sees every vector.

A vector is float32 bytes (`dim` * 4), on SQLite and on stock PostgreSQL alike (no
extension). `dim` 0 with an empty vector marks an item that has nothing to embed (blank
text, or text the server refused): it is done, never pending again, never searched.
`item_id` is the item's integer id where it has one (messages.id, summaries.pk): the
background worker looks for new items only past the largest one embedded, through the
index `ix_embeddings_position`, instead of comparing every item with every vector.

Writes are INSERT ... ON CONFLICT DO NOTHING on (source, item_key, model): two replicas
embedding the same items at once never fail and never duplicate. A message's vectors
are stored only if their messages are still there, checked in the storing transaction
under a key-share lock (`_forgotten`): a forget deletes the messages before their vectors
(memory/storage/forgetting.py), so it waits for that transaction and deletes what it
stored, or ran first and the vectors of what it forgot are not stored.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

import numpy as np
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine
from sqlmodel import Field, SQLModel

from memory.contract.embedding import Item
from memory.contract.types import utcnow
from memory.search.pairs import MESSAGE_NEXT, PARTNERS
from memory.storage.db import conflict_insert, write_transaction
from memory.storage.history import messages
from memory.storage.store_models import BigIntPK
from memory.storage.usage import write_pending


class EmbeddingRow(SQLModel, table=True):
    __tablename__ = "embeddings"
    __table_args__ = (
        sa.UniqueConstraint("source", "item_key", "model", name="uq_embeddings_item"),
        sa.Index("ix_embeddings_scope", "user_id", "agent_id", "model", "id", "dim"),
        sa.Index("ix_embeddings_position", "source", "model", "item_id"),
    )

    id: int | None = Field(default=None, sa_column=sa.Column(BigIntPK, primary_key=True))
    source: str = Field(sa_column=sa.Column(sa.String(32), nullable=False))
    item_key: str = Field(sa_column=sa.Column(sa.String(255), nullable=False))
    item_id: int | None = Field(default=None, sa_column=sa.Column(sa.BigInteger))
    user_id: int = Field(sa_column=sa.Column(sa.BigInteger, nullable=False))
    agent_id: str = Field(sa_column=sa.Column(sa.String(128), nullable=False))
    model: str = Field(sa_column=sa.Column(sa.String(255), nullable=False))
    dim: int = Field(sa_column=sa.Column(sa.Integer, nullable=False))
    vector: bytes = Field(sa_column=sa.Column(sa.LargeBinary, nullable=False))
    created_at: datetime = Field(
        default_factory=utcnow, sa_column=sa.Column(sa.DateTime(timezone=True), nullable=False)
    )


embeddings: sa.Table = EmbeddingRow.__table__  # type: ignore[attr-defined]


async def store_vectors(
    engine: AsyncEngine, model: str, items: Sequence[Item], vectors: np.ndarray
) -> int:
    """Store one row per item (an all-zero or zero-width row stores the `dim` 0 marker).
    Returns how many rows were new (the others existed: another replica got there)."""
    if not items:
        return 0
    now = utcnow()
    rows = []
    for item, vec in zip(items, vectors, strict=True):
        vec = np.asarray(vec, dtype=np.float32)
        empty = vec.size == 0 or not vec.any()
        rows.append(
            {
                "source": item.source,
                "item_key": item.key,
                "item_id": item.item_id,
                "user_id": item.user_id,
                "agent_id": item.agent_id,
                "model": model,
                "dim": 0 if empty else int(vec.size),
                "vector": b"" if empty else vec.tobytes(),
                "created_at": now,
            }
        )
    async with write_transaction(engine) as conn:
        gone = await _forgotten(conn, items)
        rows = [r for r in rows if (r["source"], r["item_key"]) not in gone]
        stmt = (
            conflict_insert(conn, embeddings)
            .on_conflict_do_nothing(index_elements=["source", "item_key", "model"])
            .returning(embeddings.c.id)
        )
        inserted = (await conn.execute(stmt, rows)).all() if rows else []
        await write_pending(conn)  # what embedding them cost, with them
    return len(inserted)


def _message_ids(item: Item) -> list[int]:
    """The messages a vector of `item` holds text of (none: not a message's vector)."""
    if item.source not in PARTNERS:
        return []
    pair = [item.item_id] if item.source == MESSAGE_NEXT and item.item_id is not None else []
    return [int(item.key), *pair]


async def _forgotten(conn: AsyncConnection, items: Sequence[Item]) -> set[tuple[str, str]]:
    """The (source, key) of `items` whose messages were forgotten since they were read;
    the others' messages stay locked against a delete until the transaction ends."""
    wanted = sorted({i for item in items for i in _message_ids(item)})
    if not wanted:
        return set()
    held = set(
        (
            await conn.execute(
                sa.select(messages.c.id)
                .where(messages.c.id.in_(wanted))
                .with_for_update(read=True, key_share=True)  # SQLite: its one writer is the lock
            )
        ).scalars()
    )
    return {
        (item.source, item.key) for item in items if any(i not in held for i in _message_ids(item))
    }


async def last_position(conn: AsyncConnection, source: str, model: str) -> int | None:
    """The largest `item_id` of `source` embedded for `model` (None: none yet)."""
    last: int | None = await conn.scalar(
        sa.select(sa.func.max(embeddings.c.item_id)).where(
            embeddings.c.source == source, embeddings.c.model == model
        )
    )
    return last


async def delete_keys(
    engine: AsyncEngine, source: str, user_id: int, agent_id: str, keep: Iterable[str]
) -> int:
    """Delete `source`'s vectors of (user, agent), every model, whose key is not in
    `keep` (items that no longer exist, such as a rewritten note's old text)."""
    kept = set(keep)
    async with write_transaction(engine) as conn:
        keys = (
            (
                await conn.execute(
                    sa.select(embeddings.c.item_key)
                    .distinct()
                    .where(
                        embeddings.c.source == source,
                        embeddings.c.user_id == user_id,
                        embeddings.c.agent_id == agent_id,
                    )
                )
            )
            .scalars()
            .all()
        )
        stale = [k for k in keys if k not in kept]
        if stale:
            await conn.execute(
                embeddings.delete().where(
                    embeddings.c.source == source,
                    embeddings.c.user_id == user_id,
                    embeddings.c.agent_id == agent_id,
                    embeddings.c.item_key.in_(stale),
                )
            )
    return len(stale)


@dataclass(frozen=True)
class ModelCounts:
    """What `mnemo memory doctor` reports of the stored vectors."""

    model: str
    vectors: dict[int, int]  # dim -> rows of `model` (0: nothing to embed)
    other_models: dict[str, int]  # model -> rows


async def model_counts(engine: AsyncEngine, model: str) -> ModelCounts:
    async with engine.connect() as conn:
        rows = (
            await conn.execute(
                sa.select(embeddings.c.model, embeddings.c.dim, sa.func.count()).group_by(
                    embeddings.c.model, embeddings.c.dim
                )
            )
        ).all()
    dims: dict[int, int] = {}
    others: dict[str, int] = {}
    for name, dim, n in rows:
        if name == model:
            dims[dim] = dims.get(dim, 0) + n
        else:
            others[name] = others.get(name, 0) + n
    return ModelCounts(model, dims, others)


async def delete_other_models(engine: AsyncEngine, model: str) -> int:
    """Delete every vector not of `model` (`mnemo memory embed --prune`)."""
    async with write_transaction(engine) as conn:
        result = await conn.execute(embeddings.delete().where(embeddings.c.model != model))
    return int(result.rowcount or 0)


async def delete_other_dims(engine: AsyncEngine, model: str, dim: int) -> int:
    """Delete `model`'s vectors of another dimension than `dim` (the server now gives
    vectors of another size under the same model name): their items are pending again."""
    async with write_transaction(engine) as conn:
        result = await conn.execute(
            embeddings.delete().where(
                embeddings.c.model == model, embeddings.c.dim != dim, embeddings.c.dim != 0
            )
        )
    return int(result.rowcount or 0)
