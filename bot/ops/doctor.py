"""`mnemo memory doctor`: integrity faults of the shared tables and the provider's data,
and notes on what waits (Telegram's backlog, embeddings, the background spend guard)."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, TextIO

import sqlalchemy as sa

from bot.config.settings import Settings
from bot.ops.common import EXIT_FAULT, EXIT_OK, err, open_memory
from memory.contract.types import utcnow
from memory.text.display import terminal_safe

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncEngine


async def doctor(settings: Settings, out: TextIO | None = None) -> int:
    from memory.contract.maintenance import IntegrityChecker
    from memory.contract.tracing import unwrap
    from memory.transfer.integrity import check_shared

    out = out or sys.stdout  # read now: a default taken at import outlives a redirect

    async with open_memory(settings) as m:
        faults = await check_shared(m.engine)
        checked = ["shared tables"]
        inner = unwrap(m.provider)
        if isinstance(inner, IntegrityChecker):
            faults += await inner.check_integrity()
            checked.append(f"{m.provider.name} provider data")
        else:
            print(
                f"note: the {m.provider.name} provider offers no integrity checks of its own",
                file=sys.stderr,
            )
        waiting, unreadable = await telegram_backlog(m.engine)
        from bot.ops.embeddings import embeddings_report

        embedding_lines = await embeddings_report(settings, m)
        from bot.ops.usage import guard_report

        embedding_lines += await guard_report(settings, m.engine)
    for fault in faults:
        print(f"FAULT {terminal_safe(str(fault))}", file=out)
    code = EXIT_OK
    if faults:
        codes = sorted({f.code for f in faults})
        err(f"doctor found {len(faults)} fault(s) in {m.where}: {', '.join(codes)}")
        code = EXIT_FAULT
    else:
        print(f"ok: no faults in {m.where} ({', '.join(checked)} checked)", file=out)
    if waiting:
        print(f"note: {waiting}; the bot handles them when it (re)starts", file=out)
    if unreadable:
        print(
            f"note: {unreadable} parked Telegram update(s) could not be read and are not "
            "handled; kept in telegram_inbox (unreadable) for inspection "
            "(docs/RELIABILITY.md)",
            file=out,
        )
    for line in embedding_lines:
        print(line, file=out)
    return code


async def telegram_backlog(engine: AsyncEngine) -> tuple[str, int]:
    """What the Telegram channel left for its next start (not a fault: a stop or crash
    mid-turn leaves it, by design): parked updates and answers owed; and how many parked
    updates could not be read (never handled, kept for an operator to look at)."""
    from bot.channels.telegram.delivery.handled import owed_since, telegram_updates
    from bot.channels.telegram.delivery.inbox import telegram_inbox
    from bot.channels.telegram.delivery.resume import RESUME_WITHIN

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
    parts = []
    if parked:
        parts.append(f"{parked} Telegram update(s) parked")
    if owed:
        parts.append(f"{owed} message(s) possibly owed an answer")
    return " and ".join(parts), unreadable
