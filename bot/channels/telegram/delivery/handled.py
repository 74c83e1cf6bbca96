"""The Telegram updates already handled, per bot: a redelivered update (the bot died
after storing its message but before Telegram heard so) is recognised and skipped.

Table `telegram_updates` (revisions `bot_0001`, `bot_0002`, `bot_0004`, `bot_0006`): (bot_id, update_id) ->
handled_at. A text update's row is written in the same transaction as the user's message
(see `memory.contract.append_hook`); a command's right after the command ran. Rows older than
`KEEP` go: Telegram keeps an unconfirmed update for 24 hours, so none older can return.

A text update's row also names where its answer is due (`PendingReply`: session, chat,
topic, message) with `resume` true, until the answer was sent or an apology was sent
instead. An apology clears the mark at once; sent answers are cleared in batches
(`answered`, `flush_answered`, every `SETTLE_EVERY_S`) rather than with a write per turn,
so after a crash the last few seconds' answered rows are still marked: harmless, as
`bot.channels.telegram.delivery.resume` answers only a conversation that still ends with a user message.

An answer stored but not taken by Telegram (flood control, or Telegram unreachable past
the delivery retries) is marked `undelivered` at once, with its text
(`HandledUpdates.undelivered`), not in the batch. A crash between storing an answer and
sending it marks nothing: a row still marked whose stored answer has no origin
(`memory.actions.origins.answer_shown`; the origin is recorded once Telegram took it) is sent
by the restart too, while one whose answer has an origin was shown and is cleared.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine
from sqlmodel import Field, SQLModel

from memory.contract.types import utcnow
from memory.storage.db import conflict_insert, write_transaction

log = logging.getLogger(__name__)

KEEP = timedelta(days=2)
SETTLE_EVERY_S = 5.0


class TelegramUpdate(SQLModel, table=True):
    __tablename__ = "telegram_updates"

    bot_id: int = Field(sa_column=sa.Column(sa.BigInteger, primary_key=True, autoincrement=False))
    update_id: int = Field(
        sa_column=sa.Column(sa.BigInteger, primary_key=True, autoincrement=False)
    )
    handled_at: datetime = Field(
        default_factory=utcnow, sa_column=sa.Column(sa.DateTime(timezone=True), nullable=False)
    )
    # Where the answer to a text update's message is due (None for commands).
    session_id: str | None = Field(default=None, sa_column=sa.Column(sa.Text, nullable=True))
    user_id: int | None = Field(default=None, sa_column=sa.Column(sa.BigInteger, nullable=True))
    chat_id: int | None = Field(default=None, sa_column=sa.Column(sa.BigInteger, nullable=True))
    thread_id: int | None = Field(default=None, sa_column=sa.Column(sa.BigInteger, nullable=True))
    message_id: int | None = Field(default=None, sa_column=sa.Column(sa.BigInteger, nullable=True))
    resume: bool = Field(
        default=False, sa_column=sa.Column(sa.Boolean, nullable=False, server_default=sa.false())
    )
    # The answer was stored but sending it failed for good (revision bot_0004).
    undelivered: bool = Field(
        default=False, sa_column=sa.Column(sa.Boolean, nullable=False, server_default=sa.false())
    )
    # Its text, while owed (revision bot_0006); None on rows marked before it.
    answer: str | None = Field(default=None, sa_column=sa.Column(sa.Text, nullable=True))


telegram_updates: sa.Table = TelegramUpdate.__table__  # type: ignore[attr-defined]


@dataclass(frozen=True)
class PendingReply:
    """A stored text message and where its answer goes."""

    update_id: int
    session_id: str
    user_id: int
    chat_id: int
    thread_id: int | None
    message_id: int
    handled_at: datetime
    undelivered: bool = False  # its answer is stored, and was never sent
    answer: str | None = None  # that answer's text (None: read it from the history)


@dataclass(frozen=True)
class ReplyTo:
    """What a text update's handler knows before the turn: where to answer."""

    chat_id: int
    thread_id: int | None
    message_id: int


def owed_since(since: datetime) -> sa.ColumnElement[bool]:
    """Rows of text messages handled since `since` still marked as owed an answer."""
    t = telegram_updates.c
    return sa.and_(t.resume.is_(True), t.handled_at >= since, t.session_id.is_not(None))


class HandledUpdates:
    """The handled update ids of one bot (`bot_id`: update ids are numbered per bot)."""

    def __init__(self, engine: AsyncEngine, bot_id: int) -> None:
        self.engine = engine
        self.bot_id = bot_id
        self._answered: list[int] = []

    def answered(self, update_id: int) -> None:
        """The answer to `update_id` was sent: cleared with the next `flush_answered`."""
        self._answered.append(update_id)

    async def flush_answered(self) -> None:
        ids, self._answered = self._answered, []
        try:
            await self.settle(ids)
        except Exception as exc:  # still marked: the next start looks at them (cheaply)
            log.warning("could not mark %d answered update(s): %s", len(ids), exc)

    async def seen(self, update_id: int) -> bool:
        async with self.engine.connect() as conn:
            found = await conn.scalar(
                sa.select(telegram_updates.c.update_id).where(
                    telegram_updates.c.bot_id == self.bot_id,
                    telegram_updates.c.update_id == update_id,
                )
            )
        return found is not None

    async def insert(
        self,
        conn: AsyncConnection,
        update_id: int,
        *,
        session_id: str | None = None,
        user_id: int | None = None,
        reply_to: ReplyTo | None = None,
    ) -> bool:
        """Record `update_id` inside the caller's transaction; False if it was already.
        With `session_id` and `reply_to` (a text message) the answer is marked due."""
        values: dict[str, object] = {
            "bot_id": self.bot_id,
            "update_id": update_id,
            "handled_at": utcnow(),
        }
        if session_id is not None and reply_to is not None:
            values.update(
                session_id=session_id,
                user_id=user_id,
                chat_id=reply_to.chat_id,
                thread_id=reply_to.thread_id,
                message_id=reply_to.message_id,
                resume=True,
            )
        inserted = await conn.scalar(
            conflict_insert(conn, telegram_updates)
            .values(values)
            .on_conflict_do_nothing()
            .returning(telegram_updates.c.update_id)
        )
        return inserted is not None

    async def record(self, update_id: int) -> bool:
        """Record `update_id` in a transaction of its own; False if it was already."""
        async with write_transaction(self.engine) as conn:
            return await self.insert(conn, update_id)

    async def pending(self, since: datetime, before: datetime | None = None) -> list[PendingReply]:
        """Text updates handled since `since` (and before `before`) whose answer may
        still be due, oldest first."""
        t = telegram_updates.c
        until = sa.true() if before is None else t.handled_at < before
        query = (
            sa.select(
                t.update_id,
                t.session_id,
                t.user_id,
                t.chat_id,
                t.thread_id,
                t.message_id,
                t.handled_at,
                t.undelivered,
                t.answer,
            )
            .where(t.bot_id == self.bot_id, owed_since(since), until)
            .order_by(t.update_id)
        )
        async with self.engine.connect() as conn:
            rows = (await conn.execute(query)).all()
        return [PendingReply(*row) for row in rows]

    async def undelivered(self, update_id: int, answer: str) -> None:
        """The stored `answer` to `update_id` was not taken by Telegram: owed until sent
        (by `bot.channels.telegram.delivery.outbox`, or else by the next start)."""
        async with write_transaction(self.engine) as conn:
            await conn.execute(
                sa.update(telegram_updates)
                .where(
                    telegram_updates.c.bot_id == self.bot_id,
                    telegram_updates.c.update_id == update_id,
                )
                .values(undelivered=True, answer=answer)
            )

    async def latest_turn(self, session_id: str) -> int | None:
        """The newest text update stored in `session_id` (its row is written with the
        user's message, so this is the session's last user message)."""
        t = telegram_updates.c
        async with self.engine.connect() as conn:
            return await conn.scalar(
                sa.select(sa.func.max(t.update_id)).where(
                    t.bot_id == self.bot_id, t.session_id == session_id
                )
            )

    async def settle(self, update_ids: Sequence[int]) -> None:
        """No answer is due for these any more (given, or an apology was sent instead)."""
        if not update_ids:
            return
        async with write_transaction(self.engine) as conn:
            await conn.execute(
                sa.update(telegram_updates)
                .where(
                    telegram_updates.c.bot_id == self.bot_id,
                    telegram_updates.c.update_id.in_(list(update_ids)),
                )
                .values(resume=False, undelivered=False, answer=None)
            )

    async def prune(self, keep: timedelta = KEEP) -> int:
        """Forget rows older than `keep`; returns how many went."""
        async with write_transaction(self.engine) as conn:
            result = await conn.execute(
                sa.delete(telegram_updates).where(
                    telegram_updates.c.bot_id == self.bot_id,
                    telegram_updates.c.handled_at < utcnow() - keep,
                )
            )
        return result.rowcount or 0
