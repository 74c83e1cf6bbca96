"""What operators' tools may read of the shared tables: the one door through which
`mnemo memory ...` (bot/ops) and the web console (bot/web/reads.py) see the history,
the stores' versions, the changelog and the usage ledger. Everything here is read-only
and typed; the tools never build SQL over these tables themselves, so a change of the
tables is made here and in the stores, not in every page and command."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from memory.contract.capabilities import Provider
from memory.contract.errors import NotFound
from memory.contract.tracing import unwrap
from memory.contract.types import ChangeEntry, ListOptions, Message, Session, as_utc
from memory.storage.history import (
    HistoryStore,
    SessionCounter,
    SessionCounts,
    conversations,
    messages,
)
from memory.storage.stores import changelog_entry, changelog_table, snapshot_table, state_table
from memory.storage.usage import TokenUsage, usage_records


async def session_counts(
    provider: Provider, engine: AsyncEngine, opts: ListOptions
) -> list[SessionCounts]:
    """The session listing with each session's counts: in bulk when the provider can
    count (SessionCounter), else the shared history's listing and the provider's
    `stats`, one session at a time."""
    inner = unwrap(provider)
    if isinstance(inner, SessionCounter):
        return await inner.list_counts(opts)  # a fixed number of queries
    rows = await HistoryStore(engine).list_counts(opts)
    out = []
    for row in rows:
        i = row.info
        stats = await provider.stats(Session(i.id, i.agent_id, i.user_id, i.channel))
        out.append(replace(row, summary_count=stats.summary_count))
    return out


async def snapshot_version(engine: AsyncEngine, session_id: str) -> int | None:
    """The memory version the session's snapshot pins; None when it has none yet."""
    async with engine.connect() as conn:
        version = await conn.scalar(
            sa.select(snapshot_table.c.version).where(snapshot_table.c.session_id == session_id)
        )
    return None if version is None else int(version)


async def memory_version(engine: AsyncEngine, user_id: int, agent_id: str) -> int | None:
    """The current version of (user, agent)'s profile, soul and constraints; None when
    nothing was ever written."""
    async with engine.connect() as conn:
        version = await conn.scalar(
            sa.select(state_table.c.version).where(
                state_table.c.user_id == user_id, state_table.c.agent_id == agent_id
            )
        )
    return None if version is None else int(version)


@dataclass
class HistoryPage:
    rows: list[tuple[int, int, int, Message]]  # (message id, seq, tokens, message)
    page: int
    pages: int


async def history_page(
    engine: AsyncEngine,
    session_id: str,
    page: int | None,
    at_message: int | None,
    page_size: int,
) -> HistoryPage:
    """Page `page` (1-based; None = the last) of the stored messages, `page_size` a
    page, or the page holding message id `at_message`. NotFound: no such session."""
    history = HistoryStore(engine)
    async with engine.connect() as conn:
        conv_id = await history.conversation_id(session_id, conn)
        if conv_id is None:
            raise NotFound(f"session {session_id!r} not found")
        last = int(
            await conn.scalar(
                sa.select(sa.func.coalesce(sa.func.max(messages.c.seq), 0)).where(
                    messages.c.conversation_id == conv_id
                )
            )
            or 0
        )
        pages = max(1, -(-last // page_size))
        if at_message is not None:
            seq = await conn.scalar(
                sa.select(messages.c.seq).where(
                    messages.c.id == at_message, messages.c.conversation_id == conv_id
                )
            )
            if seq is not None:
                page = (int(seq) - 1) // page_size + 1
        page = pages if page is None else min(max(1, page), pages)
        low = (page - 1) * page_size + 1
        loaded = await history.load_messages(
            conn,
            sa.and_(
                messages.c.conversation_id == conv_id,
                messages.c.seq.between(low, low + page_size - 1),
            ),
        )
    return HistoryPage([(s.id, s.seq, s.token_count, m) for s, m in loaded], page=page, pages=pages)


async def changelog_page(
    engine: AsyncEngine,
    *,
    user_id: int | None,
    scope: str,
    source: str,
    page: int,
    page_size: int,
) -> tuple[list[ChangeEntry], bool]:
    """Changelog rows newest first, `page_size` from page `page` (1-based), filtered by
    whichever of user, scope and source is given; and whether an older page exists."""
    query = sa.select(changelog_table).order_by(changelog_table.c.id.desc())
    if user_id is not None:
        query = query.where(changelog_table.c.user_id == user_id)
    if scope:
        query = query.where(changelog_table.c.scope == scope)
    if source:
        query = query.where(changelog_table.c.source == source)
    query = query.limit(page_size + 1).offset((max(1, page) - 1) * page_size)
    async with engine.connect() as conn:
        rows = (await conn.execute(query)).all()
    return [changelog_entry(r) for r in rows[:page_size]], len(rows) > page_size


async def usage_recorded(engine: AsyncEngine) -> bool:
    """Whether the database has the usage ledger (one that predates it has not)."""
    async with engine.connect() as conn:
        return bool(await conn.run_sync(lambda c: sa.inspect(c).has_table(usage_records.name)))


async def spend_per_user(
    engine: AsyncEngine, since: datetime, kinds: Sequence[str]
) -> list[tuple[int, int, int]]:
    """(user id, calls, tokens) of every user with calls of `kinds` since `since`."""
    t = usage_records.c
    query = (
        sa.select(t.user_id, sa.func.count(), sa.func.sum(t.prompt_tokens + t.completion_tokens))
        .where(t.at >= since, t.kind.in_(kinds))
        .group_by(t.user_id)
    )
    async with engine.connect() as conn:
        rows = (await conn.execute(query)).all()
    return [(int(user_id), int(n), int(spent or 0)) for user_id, n, spent in rows]


async def turn_of(engine: AsyncEngine, session_id: str, message_id: int) -> list[Message]:
    """The turn answer `message_id` ends: the messages of its conversation from the user
    message before it up to it. NotFound: no such message in that session."""
    history = HistoryStore(engine)
    async with engine.connect() as conn:
        conv_id = await history.conversation_id(session_id, conn)
        seq = None
        if conv_id is not None:
            seq = await conn.scalar(
                sa.select(messages.c.seq).where(
                    messages.c.id == message_id, messages.c.conversation_id == conv_id
                )
            )
        if seq is None:
            raise NotFound(f"message {message_id} not found in {session_id!r}")
        start = await conn.scalar(
            sa.select(sa.func.max(messages.c.seq)).where(
                messages.c.conversation_id == conv_id,
                messages.c.seq <= seq,
                messages.c.role == "user",
            )
        )
        loaded = await history.load_messages(
            conn,
            sa.and_(
                messages.c.conversation_id == conv_id,
                messages.c.seq.between(int(start or seq), int(seq)),
            ),
        )
    return [m for _, m in loaded]


@dataclass(frozen=True)
class UsageLine:
    at: datetime
    kind: str
    model: str
    usage: TokenUsage


async def usage_between(
    engine: AsyncEngine, session_id: str, since: datetime, until: datetime
) -> list[UsageLine]:
    """The session's model calls recorded from `since` to `until` (a turn's: its rows are
    stored with its answer), oldest first."""
    t = usage_records.c
    query = (
        sa.select(t.at, t.kind, t.model, t.prompt_tokens, t.cached_tokens, t.completion_tokens)
        .add_columns(t.estimated)
        .where(t.session_id == session_id, t.at >= since, t.at <= until)
        .order_by(t.at, t.id)
    )
    async with engine.connect() as conn:
        rows = (await conn.execute(query)).all()
    return [
        UsageLine(
            as_utc(r.at),
            r.kind,
            r.model,
            TokenUsage(
                int(r.prompt_tokens),
                int(r.cached_tokens),
                int(r.completion_tokens),
                estimated=bool(r.estimated),
            ),
        )
        for r in rows
    ]


async def sessions_of_messages(
    engine: AsyncEngine, user_id: int, message_ids: Sequence[int]
) -> dict[int, str]:
    """The session each of `message_ids` is stored in, for those in `user_id`'s memory
    (an id of another user's message is left out, as unknown ones are)."""
    ids = sorted(set(message_ids))
    if not ids:
        return {}
    async with engine.connect() as conn:
        rows = await conn.execute(
            sa.select(messages.c.id, conversations.c.session_id)
            .join(conversations, conversations.c.id == messages.c.conversation_id)
            .where(messages.c.id.in_(ids), conversations.c.user_id == user_id)
        )
        return {int(r.id): str(r.session_id) for r in rows}
