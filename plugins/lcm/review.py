"""What the reflect job reads about a session (`Reviewer.build_review_context`).

The messages after `since` (the newest ones when there are more than REVIEW_TOKENS),
preceded by the summaries currently in the session's context as background: they are
what the conversation established before, in compact form. Nothing new -> "". Each
message carries its id (`(message 12)`), which the facts reflect records cite.
"""

from __future__ import annotations

from datetime import UTC, datetime

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from memory.contract.types import Message
from memory.storage.history import HistoryStore, messages
from memory.text.transcript import render_reviewed
from plugins.lcm.dag import load_summaries
from plugins.lcm.models import context_items
from plugins.lcm.render import summary_xml

REVIEW_TOKENS = 24_000
BACKGROUND_TOKENS = 4_000
_PAGE = 200


async def build_review_context(
    conn: AsyncConnection, history: HistoryStore, conv_id: int, since: datetime | None
) -> str:
    recent, omitted = await _recent_messages(conn, history, conv_id, since)
    if not recent:
        return ""
    parts = []
    background = await _background(conn, conv_id)
    if background:
        parts.append("<background>\n" + "\n".join(background) + "\n</background>")
    head = f"({omitted} earlier new messages omitted)\n\n" if omitted else ""
    parts.append("<conversation>\n" + head + render_reviewed(recent) + "\n</conversation>")
    return "\n\n".join(parts)


async def _recent_messages(
    conn: AsyncConnection, history: HistoryStore, conv_id: int, since: datetime | None
) -> tuple[list[tuple[int, Message]], int]:
    where = messages.c.conversation_id == conv_id
    if since is not None:
        if since.tzinfo is None:
            since = since.replace(tzinfo=UTC)
        where = sa.and_(where, messages.c.created_at > since.astimezone(UTC))
    newest_first: list[tuple[int, Message]] = []
    used = 0
    cursor: int | None = None
    while True:
        page_where = where if cursor is None else sa.and_(where, messages.c.seq < cursor)
        page = await history.load_messages(conn, page_where, limit=_PAGE, newest_first=True)
        for stored, msg in page:
            if used + stored.token_count > REVIEW_TOKENS and newest_first:
                total = await conn.scalar(sa.select(sa.func.count()).where(where))
                return list(reversed(newest_first)), int(total or 0) - len(newest_first)
            used += stored.token_count
            newest_first.append((stored.id, msg))
        if len(page) < _PAGE:
            return list(reversed(newest_first)), 0
        cursor = page[-1][0].seq


async def _background(conn: AsyncConnection, conv_id: int) -> list[str]:
    ids = list(
        (
            await conn.execute(
                sa.select(context_items.c.summary_id)
                .where(
                    context_items.c.conversation_id == conv_id,
                    context_items.c.summary_id.is_not(None),
                )
                .order_by(context_items.c.ordinal.desc())
                .limit(64)
            )
        ).scalars()
    )
    records = await load_summaries(conn, ids, with_edges=True)
    out: list[str] = []  # newest first while within budget, then chronological
    used = 0
    for sid in ids:
        record = records[sid]
        if used + record.token_count > BACKGROUND_TOKENS and out:
            break
        used += record.token_count
        out.append(summary_xml(record))
    return list(reversed(out))
