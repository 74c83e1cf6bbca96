"""What gets embedded: `EmbeddingSource`s, each listing its items that lack a vector.

A provider offers its sources through `embedding_sources()` (the optional capability
`memory.contract.capabilities.EmbeddingSources`): core's `MessagesSource` (user and assistant
messages with text; tool calls and results are not embedded) and `MessageNextSource` (each
such message with the next one, `embeddings.with_next`; why: memory/search/pairs.py),
both from `message_sources`; lcm's summaries, simple's notes and archives.

`pending(model, limit=, after=)` has two modes:
- `after=None`, what the background worker polls: items past the newest one embedded,
  less `LOOKBACK` positions (a PostgreSQL transaction may commit a lower id after a
  higher one: the look back catches it). Index-bound: a max() over
  `ix_embeddings_position`, then a range of the item table's primary key, each row
  probing the unique index of `embeddings`; never a scan of the whole history.
- `after=N`, a full scan (`mnemo memory embed`): every pending item with a position past
  N, continued from the returned batch's `next_after` (0 starts it).
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from memory.contract.embedding import Batch, EmbeddingSource, Item
from memory.search.pairs import MESSAGE, MESSAGE_NEXT
from memory.search.semantic.store import embeddings, last_position
from memory.storage.history import conversations, messages, said, said_before

LOOKBACK = 1000


def message_sources(engine: AsyncEngine, with_next: bool) -> list[EmbeddingSource]:
    """The history's sources every provider offers: the messages, and with `with_next`
    (`embeddings.with_next`) each message with the next."""
    return [MessagesSource(engine), *([MessageNextSource(engine)] if with_next else [])]


class TableSource:
    """A source whose items are rows of a table with an integer key (`_position`): the
    subclass gives the select of (position, key, text, user_id, agent_id) of eligible
    rows and the expression of an item's key."""

    name: str

    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine

    def _eligible(self) -> sa.Select[*tuple[Any, ...]]:
        raise NotImplementedError

    def _position(self) -> sa.ColumnElement[int]:
        raise NotImplementedError

    def _key(self) -> sa.ColumnElement[str]:
        raise NotImplementedError

    def _has_vector(self, model: str) -> sa.ColumnElement[bool]:
        return sa.exists().where(
            embeddings.c.source == self.name,
            embeddings.c.model == model,
            embeddings.c.item_key == self._key(),
        )

    async def pending(self, model: str, *, limit: int, after: int | None = None) -> Batch:
        async with self.engine.connect() as conn:
            start = after
            if start is None:
                start = max(0, (await last_position(conn, self.name, model) or 0) - LOOKBACK)
            rows = (
                await conn.execute(
                    self._eligible()
                    .where(self._position() > start, ~self._has_vector(model))
                    .order_by(self._position())
                    .limit(limit)
                )
            ).all()
        items = [
            Item(self.name, key, user_id, agent_id, text or "", pos)
            for pos, key, text, user_id, agent_id in rows
        ]
        return Batch(items, items[-1].item_id if len(items) == limit else None)

    async def counts(self, model: str) -> tuple[int, int]:
        eligible = self._eligible().subquery()
        async with self.engine.connect() as conn:
            total = await conn.scalar(sa.select(sa.func.count()).select_from(eligible))
            done = await conn.scalar(
                sa.select(sa.func.count()).select_from(
                    self._eligible().where(self._has_vector(model)).subquery()
                )
            )
        return int(total or 0), int(done or 0)


class MessagesSource(TableSource):
    """The shared history's user and assistant messages with text (source `message`,
    key the message id)."""

    name = MESSAGE

    def _eligible(self) -> sa.Select[*tuple[Any, ...]]:
        return (
            sa.select(
                messages.c.id,
                self._key(),
                messages.c.content,
                conversations.c.user_id,
                conversations.c.agent_id,
            )
            .join(conversations, conversations.c.id == messages.c.conversation_id)
            .where(said(messages))
        )

    def _position(self) -> sa.ColumnElement[int]:
        return messages.c.id

    def _key(self) -> sa.ColumnElement[str]:
        return sa.cast(messages.c.id, sa.String)


_first = messages.alias("first")


class MessageNextSource(TableSource):
    """Each user or assistant message with text followed by another in its conversation
    (tool rows and empty ones skipped), embedded with it: source `message_next`, key the
    first message's id, text the two contents on two lines. Its position is the NEXT
    message's id, so the worker finds the pair as soon as the reply is stored. The
    first message is found from the next by walking back its conversation's
    (conversation_id, seq) index, one step per pair: never a scan of the history.

    A pair whose next message is forgotten is deleted with it (memory/storage/forgetting.py);
    the message then pairs with its new next one, which the worker finds only when that
    one is among its look-back (`LOOKBACK` ids): an older one waits for `mnemo memory embed`."""

    name = MESSAGE_NEXT

    def _eligible(self) -> sa.Select[*tuple[Any, ...]]:
        return (
            sa.select(
                messages.c.id,
                self._key(),
                _first.c.content + "\n" + messages.c.content,
                conversations.c.user_id,
                conversations.c.agent_id,
            )
            .select_from(messages)
            .join(conversations, conversations.c.id == messages.c.conversation_id)
            .join(_first, _first.c.id == said_before(messages))
            .where(said(messages))
        )

    def _position(self) -> sa.ColumnElement[int]:
        return messages.c.id

    def _key(self) -> sa.ColumnElement[str]:
        return sa.cast(_first.c.id, sa.String)
