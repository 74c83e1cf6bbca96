"""Updates parked in the database, so that Telegram can be told about them early.

Telegram confirms updates only by offset: everything below it. The polling loop sends as
offset the oldest update not durable yet (`bot.channels.telegram.delivery.polling`), and a getUpdates sees
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

Several processes may share the database: the old one draining while the new one starts
(a rolling restart), or webhook replicas on PostgreSQL. So each row names its `owner`
(the instance id of the process that parked or took it) and a `lease_until`: the owner
renews it every `SETTLE_EVERY_S` (5 s) while it holds rows, and a process takes only rows
whose lease has lapsed, in one UPDATE whose WHERE re-checks the lapse (`claim`), so two
processes never take the same row (PostgreSQL re-evaluates the WHERE on a row another
transaction just changed; SQLite has one writer at a time). A start takes what has lapsed;
a running process looks again at every renewal, which picks up the rows of a process that
crashed once their lease lapses (handled then, perhaps after newer messages of their
chat), and those a process that stopped released.

`LEASE` is 60 s: twelve renewals may fail (a database hiccup, a stalled event loop)
before another process takes a live process's rows, and clocks of replicas may differ by
seconds without harm (the lease is written with the writer's clock). The price is that a
crashed process's rows wait up to a minute. A clean stop releases its rows (lease NULL)
once its handlers drained, so the next start takes them at once. A lease lost anyway
costs at most a double handling, which the `telegram_updates` record makes harmless for
text (stored and answered once); a command may run twice.

A row whose JSON no longer reads as an Update is marked `unreadable` (logged once with
its update id and size, never its text): kept for an operator to look at
(`mnemo memory doctor` counts them), never taken again.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import socket
from collections.abc import Sequence
from datetime import datetime, timedelta

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlmodel import Field, SQLModel
from telegram import Update

from memory.contract.types import utcnow
from memory.storage.db import conflict_insert, write_transaction

log = logging.getLogger(__name__)

# Parking costs two small transactions per update, so it waits for a real backlog: a
# user sending two messages at once is not one. Well below Telegram's window of 100.
PARK_AT = 20
LEASE = timedelta(seconds=60)  # see the module docstring


def instance_id() -> str:
    """This process, as an owner of parked rows: readable for an operator, unique."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"


class TelegramInboxRow(SQLModel, table=True):
    __tablename__ = "telegram_inbox"

    bot_id: int = Field(sa_column=sa.Column(sa.BigInteger, primary_key=True, autoincrement=False))
    update_id: int = Field(
        sa_column=sa.Column(sa.BigInteger, primary_key=True, autoincrement=False)
    )
    payload: str = Field(sa_column=sa.Column(sa.Text, nullable=False))
    parked_at: datetime = Field(
        default_factory=utcnow, sa_column=sa.Column(sa.DateTime(timezone=True), nullable=False)
    )
    owner: str | None = Field(default=None, sa_column=sa.Column(sa.Text, nullable=True))
    lease_until: datetime | None = Field(
        default=None, sa_column=sa.Column(sa.DateTime(timezone=True), nullable=True)
    )
    unreadable: bool = Field(
        default=False, sa_column=sa.Column(sa.Boolean, nullable=False, server_default=sa.false())
    )


telegram_inbox: sa.Table = TelegramInboxRow.__table__  # type: ignore[attr-defined]


class Inbox:
    """The parked updates of one bot, as seen by the process `owner`."""

    def __init__(self, engine: AsyncEngine, bot_id: int, owner: str) -> None:
        self.engine = engine
        self.bot_id = bot_id
        self.owner = owner

    def _rows(self) -> sa.ColumnElement[bool]:
        return telegram_inbox.c.bot_id == self.bot_id

    async def park(self, updates: Sequence[Update]) -> None:
        if not updates:
            return
        now = utcnow()
        rows = [
            {
                "bot_id": self.bot_id,
                "update_id": u.update_id,
                "parked_at": now,
                "owner": self.owner,
                "lease_until": now + LEASE,
                "payload": json.dumps(u.to_dict(), ensure_ascii=False),
            }
            for u in updates
        ]
        async with write_transaction(self.engine) as conn:
            await conn.execute(conflict_insert(conn, telegram_inbox).on_conflict_do_nothing(), rows)

    async def remove(self, update_id: int) -> None:
        async with write_transaction(self.engine) as conn:
            await conn.execute(
                sa.delete(telegram_inbox).where(
                    self._rows(), telegram_inbox.c.update_id == update_id
                )
            )

    async def claim(self) -> list[tuple[int, str]]:
        """Take the rows whose lease lapsed (their owner is gone, or released them):
        (update id, Telegram's JSON text), oldest first. Atomic: a row is taken by one
        process only."""
        now = utcnow()
        lapsed = sa.and_(
            self._rows(),
            telegram_inbox.c.unreadable == sa.false(),
            sa.or_(telegram_inbox.c.lease_until.is_(None), telegram_inbox.c.lease_until < now),
        )
        # Asked every few seconds and nearly always empty: a read first, so that an idle
        # bot takes no write lock (SQLite has one for the whole file).
        async with self.engine.connect() as conn:
            if (
                await conn.scalar(sa.select(telegram_inbox.c.update_id).where(lapsed).limit(1))
                is None
            ):
                return []
        async with write_transaction(self.engine) as conn:
            rows = await conn.execute(
                sa.update(telegram_inbox)
                .where(lapsed)
                .values(owner=self.owner, lease_until=now + LEASE)
                .returning(telegram_inbox.c.update_id, telegram_inbox.c.payload)
            )
            return sorted((r.update_id, r.payload) for r in rows)

    async def renew(self) -> None:
        """This process still holds its rows: push their lease on."""
        async with write_transaction(self.engine) as conn:
            await conn.execute(
                sa.update(telegram_inbox)
                .where(self._rows(), telegram_inbox.c.owner == self.owner)
                .values(lease_until=utcnow() + LEASE)
            )

    async def release(self) -> None:
        """At a clean stop: what is left is free for the next start at once."""
        async with write_transaction(self.engine) as conn:
            await conn.execute(
                sa.update(telegram_inbox)
                .where(self._rows(), telegram_inbox.c.owner == self.owner)
                .values(lease_until=None)
            )

    async def set_unreadable(self, update_id: int) -> None:
        async with write_transaction(self.engine) as conn:
            await conn.execute(
                sa.update(telegram_inbox)
                .where(self._rows(), telegram_inbox.c.update_id == update_id)
                .values(unreadable=True, lease_until=None)
            )
