"""The Telegram updates already handled, per bot: a redelivered update (the bot died
after storing its message but before Telegram heard so) is recognised and skipped.

Table `telegram_updates` (revision `bot_0001`): (bot_id, update_id) -> handled_at. A text
update's row is written in the same transaction as the user's message (see
`memory.append_hook`); a command's right after the command ran. Rows older than
`KEEP` go: Telegram keeps an unconfirmed update for 24 hours, so none older can return.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine
from sqlmodel import Field, SQLModel

from memory.db import conflict_insert, write_transaction
from memory.types import utcnow

log = logging.getLogger(__name__)

KEEP = timedelta(days=2)


class TelegramUpdate(SQLModel, table=True):
    __tablename__ = "telegram_updates"

    bot_id: int = Field(sa_column=sa.Column(sa.BigInteger, primary_key=True, autoincrement=False))
    update_id: int = Field(
        sa_column=sa.Column(sa.BigInteger, primary_key=True, autoincrement=False))
    handled_at: datetime = Field(
        default_factory=utcnow, sa_column=sa.Column(sa.DateTime(timezone=True), nullable=False))


telegram_updates: sa.Table = TelegramUpdate.__table__  # type: ignore[attr-defined]


class HandledUpdates:
    """The handled update ids of one bot (`bot_id`: update ids are numbered per bot)."""

    def __init__(self, engine: AsyncEngine, bot_id: int) -> None:
        self.engine = engine
        self.bot_id = bot_id

    async def seen(self, update_id: int) -> bool:
        async with self.engine.connect() as conn:
            found = await conn.scalar(sa.select(telegram_updates.c.update_id).where(
                telegram_updates.c.bot_id == self.bot_id,
                telegram_updates.c.update_id == update_id))
        return found is not None

    async def insert(self, conn: AsyncConnection, update_id: int) -> bool:
        """Record `update_id` inside the caller's transaction; False if it was already."""
        inserted = await conn.scalar(
            conflict_insert(conn, telegram_updates)
            .values(bot_id=self.bot_id, update_id=update_id, handled_at=utcnow())
            .on_conflict_do_nothing()
            .returning(telegram_updates.c.update_id))
        return inserted is not None

    async def record(self, update_id: int) -> bool:
        """Record `update_id` in a transaction of its own; False if it was already."""
        async with write_transaction(self.engine) as conn:
            return await self.insert(conn, update_id)

    async def prune(self, keep: timedelta = KEEP) -> int:
        """Forget rows older than `keep`; returns how many went."""
        async with write_transaction(self.engine) as conn:
            result = await conn.execute(sa.delete(telegram_updates).where(
                telegram_updates.c.bot_id == self.bot_id,
                telegram_updates.c.handled_at < utcnow() - keep))
        return result.rowcount or 0
