"""Updates parked in the database, so that Telegram can be told about them early.

Telegram confirms updates only by offset: everything below it. The polling loop sends as
offset the oldest update not durable yet (`bot.telegram.polling`), and a getUpdates sees
at most 100 updates from there. Updates waiting behind their chat's turn are not durable
until that turn comes: a chat that sends 100 messages faster than they are answered (a
busy group in `always` mode) would pin the offset, and with it every other chat's new
messages would stay out of sight until that backlog shrank.

So once `PARK_AT` updates wait behind their chat, the loop parks every update not yet
durable: their JSON goes into `telegram_inbox` (one transaction), which makes them
durable, and the offset moves past them. Webhook mode has the same problem in another
form (each POST is answered once its update is durable, and Telegram keeps only a few
connections open, so one chat's backlog would hold them all) and the same remedy: each
POST checks the backlog. Each is removed when its handling ends. At the
next start, what is still parked (a stop or crash came first) is handled again, oldest
first, before polling: a text message or command already handled is recognised by its
`telegram_updates` record and skipped.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlmodel import Field, SQLModel
from telegram import Update

from memory.db import conflict_insert, write_transaction
from memory.types import utcnow

log = logging.getLogger(__name__)

# Parking costs two small transactions per update, so it waits for a real backlog: a
# user sending two messages at once is not one. Well below Telegram's window of 100.
PARK_AT = 20


class TelegramInboxRow(SQLModel, table=True):
    __tablename__ = "telegram_inbox"

    bot_id: int = Field(sa_column=sa.Column(sa.BigInteger, primary_key=True, autoincrement=False))
    update_id: int = Field(
        sa_column=sa.Column(sa.BigInteger, primary_key=True, autoincrement=False))
    payload: str = Field(sa_column=sa.Column(sa.Text, nullable=False))
    parked_at: datetime = Field(
        default_factory=utcnow, sa_column=sa.Column(sa.DateTime(timezone=True), nullable=False))


telegram_inbox: sa.Table = TelegramInboxRow.__table__  # type: ignore[attr-defined]


class Inbox:
    """The parked updates of one bot."""

    def __init__(self, engine: AsyncEngine, bot_id: int) -> None:
        self.engine = engine
        self.bot_id = bot_id

    async def park(self, updates: Sequence[Update]) -> None:
        if not updates:
            return
        now = utcnow()
        rows = [{"bot_id": self.bot_id, "update_id": u.update_id, "parked_at": now,
                 "payload": json.dumps(u.to_dict(), ensure_ascii=False)} for u in updates]
        async with write_transaction(self.engine) as conn:
            await conn.execute(conflict_insert(conn, telegram_inbox).on_conflict_do_nothing(),
                               rows)

    async def remove(self, update_id: int) -> None:
        async with write_transaction(self.engine) as conn:
            await conn.execute(sa.delete(telegram_inbox).where(
                telegram_inbox.c.bot_id == self.bot_id,
                telegram_inbox.c.update_id == update_id))

    async def parked(self) -> list[str]:
        """What is parked, oldest first: each update as Telegram's JSON text."""
        async with self.engine.connect() as conn:
            rows = await conn.execute(
                sa.select(telegram_inbox.c.payload)
                .where(telegram_inbox.c.bot_id == self.bot_id)
                .order_by(telegram_inbox.c.update_id))
            return list(rows.scalars())
