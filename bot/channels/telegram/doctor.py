"""What `mnemo memory doctor` notes of the Telegram channel: what it left for its next
start (not a fault: a stop or crash mid-turn leaves it, by design) and parked updates it
could not read (never handled, kept for an operator to look at)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import sqlalchemy as sa

from bot.channels.telegram.delivery.handled import owed_since, telegram_updates
from bot.channels.telegram.delivery.inbox import telegram_inbox
from bot.channels.telegram.delivery.resume import RESUME_WITHIN
from memory.contract.types import utcnow

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncEngine


async def notes(engine: AsyncEngine) -> list[str]:
    async with engine.connect() as conn:
        counts: dict[bool, int] = dict(
            (
                await conn.execute(
                    sa.select(telegram_inbox.c.unreadable, sa.func.count()).group_by(
                        telegram_inbox.c.unreadable
                    )
                )
            ).all()
        )
        parked, unreadable = counts.get(False, 0), counts.get(True, 0)
        owed = await conn.scalar(
            sa.select(sa.func.count())
            .select_from(telegram_updates)
            .where(owed_since(utcnow() - RESUME_WITHIN))
        )
    waiting = []
    if parked:
        waiting.append(f"{parked} Telegram update(s) parked")
    if owed:
        waiting.append(f"{owed} message(s) possibly owed an answer")
    lines = []
    if waiting:
        lines.append(f"note: {' and '.join(waiting)}; the bot handles them when it (re)starts")
    if unreadable:
        lines.append(
            f"note: {unreadable} parked Telegram update(s) could not be read and are not "
            "handled; kept in telegram_inbox (unreadable) for inspection "
            "(docs/RELIABILITY.md)"
        )
    return lines
