"""Reads and writes of the ordered context window (`context_items`).

Ordering design: ordinals are sparse and never renumbered. An append takes max+1 (one
index seek); a compaction deletes a contiguous run and inserts its summary at the run's
first ordinal, so the order of everything else is untouched and no write ever costs more
than the items it replaces. Reads walk the primary key (conversation_id, ordinal)
backwards in pages, so the assembler touches only the window it returns.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from memory.contract.types import Message
from memory.storage.history import StoredMessage, build_message, messages, parts
from plugins.lcm.models import context_items, summaries, summary_messages


@dataclass(frozen=True)
class Item:
    """One context item with what ordering and budgeting need to know about it."""

    ordinal: int
    message_id: int | None
    summary_id: str | None
    token_count: int
    role: str | None = None  # messages
    kind: str | None = None  # summaries
    depth: int | None = None  # summaries

    @property
    def key(self) -> tuple[str, int | str]:
        """("m", message id) or ("s", summary id): identity independent of position."""
        if self.message_id is not None:
            return ("m", self.message_id)
        assert self.summary_id is not None
        return ("s", self.summary_id)

    @property
    def is_message(self) -> bool:
        return self.message_id is not None


_COLUMNS = (
    context_items.c.ordinal,
    context_items.c.message_id,
    context_items.c.summary_id,
    context_items.c.token_count,
    messages.c.role,
    summaries.c.kind,
    summaries.c.depth,
)


def _select() -> sa.Select[*tuple[Any, ...]]:
    return (
        sa.select(*_COLUMNS)
        .select_from(context_items)
        .outerjoin(messages, messages.c.id == context_items.c.message_id)
        .outerjoin(summaries, summaries.c.id == context_items.c.summary_id)
    )


def _items(rows: Sequence[sa.Row[*tuple[Any, ...]]]) -> list[Item]:
    return [Item(*row) for row in rows]


# Statements of every turn, built once (building one costs more than running it).
_APPEND = sa.insert(context_items).from_select(
    ["conversation_id", "ordinal", "message_id", "summary_id", "token_count"],
    sa.select(
        messages.c.conversation_id,
        sa.select(sa.func.coalesce(sa.func.max(context_items.c.ordinal), 0))
        .where(context_items.c.conversation_id == sa.bindparam("conv"))
        .scalar_subquery()
        + messages.c.seq
        - sa.bindparam("first", type_=sa.BigInteger)
        + 1,
        messages.c.id,
        sa.null(),
        messages.c.token_count,
    ).where(
        messages.c.conversation_id == sa.bindparam("conv"),
        messages.c.seq >= sa.bindparam("first"),
        messages.c.seq <= sa.bindparam("last"),
    ),
)


def _with_messages(page: sa.Subquery) -> sa.Select[*tuple[Any, ...]]:
    """A page of items with each message item's message and parts, in one statement:
    item columns first (as `Item`), then the message, then one row per part."""
    return (
        sa.select(
            page.c.ordinal,
            page.c.message_id,
            page.c.summary_id,
            page.c.token_count,
            messages.c.role,
            summaries.c.kind,
            summaries.c.depth,
            messages.c.seq,
            messages.c.content,
            messages.c.token_count.label("message_tokens"),
            messages.c.created_at,
            parts.c.kind.label("part_kind"),
            parts.c.tool_call_id,
            parts.c.tool_name,
            parts.c.content.label("part_content"),
        )
        .select_from(
            page.outerjoin(messages, messages.c.id == page.c.message_id)
            .outerjoin(summaries, summaries.c.id == page.c.summary_id)
            .outerjoin(parts, parts.c.message_id == page.c.message_id)
        )
        .order_by(page.c.ordinal.desc(), parts.c.ordinal)
    )


_PAGE_ITEMS = (
    sa.select(context_items)
    .where(context_items.c.conversation_id == sa.bindparam("conv"))
    .order_by(context_items.c.ordinal.desc())
    .limit(sa.bindparam("limit", type_=sa.Integer))
)
_LAST_PAGE_MESSAGES = _with_messages(_PAGE_ITEMS.subquery("page"))
_PAGE_BEFORE_MESSAGES = _with_messages(
    _PAGE_ITEMS.where(context_items.c.ordinal < sa.bindparam("before")).subquery("page")
)
_TOTAL = sa.select(sa.func.coalesce(sa.func.sum(context_items.c.token_count), 0)).where(
    context_items.c.conversation_id == sa.bindparam("conv")
)
# The total and the last message seq in one statement: one snapshot on both databases.
_SIZE = sa.select(
    _TOTAL.scalar_subquery(),
    sa.select(sa.func.coalesce(sa.func.max(messages.c.seq), 0))
    .where(messages.c.conversation_id == sa.bindparam("conv"))
    .scalar_subquery(),
)


async def append_items(
    conn: AsyncConnection, conv_id: int, stored: Sequence[StoredMessage]
) -> None:
    """Context items for freshly inserted messages (consecutive seqs, as
    `HistoryStore.insert_messages` stores them), after the current last item.

    One statement: the items are selected from those message rows, numbered from the
    current last ordinal (a subquery of the same statement). Both databases evaluate the
    SELECT before inserting its rows, so every row sees the same last ordinal.
    """
    if not stored:
        return
    await conn.execute(_APPEND, {"conv": conv_id, "first": stored[0].seq, "last": stored[-1].seq})


async def adopt_uncovered(conn: AsyncConnection, conv_id: int) -> int:
    """Give context items to messages no item or summary covers yet; returns how many.

    Such messages exist when another provider (simple) appended to this conversation
    while lcm was not configured. They all come after the newest message lcm covers
    (lcm saw none of them), so appending their items in seq order keeps the context
    chronological. Cost: one pass over the conversation's items and leaf links, paid once
    per session per process (the provider remembers which sessions it checked).
    """
    direct = (
        sa.select(sa.func.max(messages.c.seq))
        .select_from(context_items.join(messages, messages.c.id == context_items.c.message_id))
        .where(context_items.c.conversation_id == conv_id)
    )
    summarised = (
        sa.select(sa.func.max(messages.c.seq))
        .select_from(
            summaries.join(summary_messages, summary_messages.c.summary_id == summaries.c.id).join(
                messages, messages.c.id == summary_messages.c.message_id
            )
        )
        .where(summaries.c.conversation_id == conv_id)
    )
    covered = max((await conn.scalar(direct)) or 0, (await conn.scalar(summarised)) or 0)
    rows = (
        await conn.execute(
            sa.select(messages.c.id, messages.c.seq, messages.c.token_count, messages.c.created_at)
            .where(messages.c.conversation_id == conv_id, messages.c.seq > covered)
            .order_by(messages.c.seq)
        )
    ).all()
    await append_items(conn, conv_id, [StoredMessage(*row) for row in rows])
    return len(rows)


async def page_with_messages(
    conn: AsyncConnection, conv_id: int, before: int | None, limit: int
) -> list[tuple[Item, Message | None]]:
    """Up to `limit` items with ordinal < `before` (None: from the end), newest first,
    each message item with its message (summary items: None)."""
    params: dict[str, int] = {"conv": conv_id, "limit": limit}
    if before is not None:
        params["before"] = before
    query = _LAST_PAGE_MESSAGES if before is None else _PAGE_BEFORE_MESSAGES
    out: list[tuple[Item, Message | None]] = []
    current: sa.Row[*tuple[Any, ...]] | None = None
    part_rows: list[dict[str, Any]] = []

    def flush() -> None:
        if current is None:
            return
        item = Item(*current[:7])
        msg = None
        if item.message_id is not None:
            row = {
                "id": item.message_id,
                "seq": current.seq,
                "role": current.role,
                "content": current.content,
                "token_count": current.message_tokens,
                "created_at": current.created_at,
            }
            msg = build_message(row, part_rows)[1]
        out.append((item, msg))

    for r in (await conn.execute(query, params)).all():
        if current is None or r.ordinal != current.ordinal:
            flush()
            current, part_rows = r, []
        if r.part_kind is not None:
            part_rows.append(
                {
                    "kind": r.part_kind,
                    "tool_call_id": r.tool_call_id,
                    "tool_name": r.tool_name,
                    "content": r.part_content,
                }
            )
    flush()
    return out


async def items_between(conn: AsyncConnection, conv_id: int, lo: int, hi: int) -> list[Item]:
    """Items with lo <= ordinal <= hi, oldest first."""
    query = (
        _select()
        .where(
            context_items.c.conversation_id == conv_id,
            context_items.c.ordinal >= lo,
            context_items.c.ordinal <= hi,
        )
        .order_by(context_items.c.ordinal)
    )
    return _items((await conn.execute(query)).all())


async def items_up_to(conn: AsyncConnection, conv_id: int, hi: int | None) -> list[Item]:
    """Items with ordinal <= `hi` (None: all), oldest first."""
    query = _select().where(context_items.c.conversation_id == conv_id)
    if hi is not None:
        query = query.where(context_items.c.ordinal <= hi)
    return _items((await conn.execute(query.order_by(context_items.c.ordinal))).all())


async def nth_newest_message_ordinal(conn: AsyncConnection, conv_id: int, n: int) -> int | None:
    """Ordinal of the `n`-th newest message item (1 = the last), or of the oldest message
    item when there are fewer; None when there is no message item or n < 1."""
    if n < 1:
        return None
    rows = (
        (
            await conn.execute(
                sa.select(context_items.c.ordinal)
                .where(
                    context_items.c.conversation_id == conv_id,
                    context_items.c.message_id.is_not(None),
                )
                .order_by(context_items.c.ordinal.desc())
                .limit(n)
            )
        )
        .scalars()
        .all()
    )
    return rows[-1] if rows else None


async def context_size(conn: AsyncConnection, conv_id: int) -> tuple[int, int]:
    """(context tokens, last message seq), read together."""
    tokens, last_seq = (await conn.execute(_SIZE, {"conv": conv_id})).one()
    return int(tokens or 0), int(last_seq or 0)


async def context_tokens(conn: AsyncConnection, conv_id: int) -> int:
    total = await conn.scalar(_TOTAL, {"conv": conv_id})
    return int(total or 0)


async def message_tokens_before(conn: AsyncConnection, conv_id: int, ordinal: int | None) -> int:
    """Tokens of the message items before `ordinal` (all of them when None)."""
    cond = (context_items.c.conversation_id == conv_id) & context_items.c.message_id.is_not(None)
    if ordinal is not None:
        cond = cond & (context_items.c.ordinal < ordinal)
    total = await conn.scalar(
        sa.select(sa.func.coalesce(sa.func.sum(context_items.c.token_count), 0)).where(cond)
    )
    return int(total or 0)
