"""Follow-ups in the database (core revision `0014_followups`): made, listed, changed by
their owner, claimed for delivery, forgotten with their sources.

Why core, not a bot table: a follow-up quotes the user's messages and is part of their
memory, so forgetting its source messages (`drop_sources`, called by
memory/storage/forgetting.py inside the forget's transaction), erasing the owner
(`erase_owner`, an erasure hook) and export/import (`export_owner` / `import_rows`)
reach it in the same database and transaction as the messages.

Every change bumps `version`; a button carries the version it was shown with, so it acts
only on the follow-up as it was shown (a stale press is refused). Delivery claims a row
by a conditional UPDATE (pending/snoozed -> sending) whose row count says who won: two
replicas, or a restart racing the old process, send it once. A claim left by a process
that died mid-send is taken again after CLAIM_TIMEOUT (the one window where a follow-up
could be sent twice: docs/RELIABILITY.md "Follow-ups").
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from memory.contract.errors import InvalidArgument, NotFound
from memory.contract.types import Owner, as_utc, utcnow
from memory.storage import forgetting as fg
from memory.storage.db import conflict_insert, write_transaction
from memory.storage.history import conversations, messages, origins

log = logging.getLogger(__name__)

PENDING, SNOOZED, SENDING, SENT = "pending", "snoozed", "sending", "sent"
DISMISSED, DROPPED = "dismissed", "dropped"
WAITING = (PENDING, SNOOZED)  # not yet delivered, not ended
CLAIM_TIMEOUT = timedelta(minutes=10)
MAX_TEXT = 500
MAX_PENDING = 200  # per owner: a runaway model cannot fill the table

_meta = sa.MetaData()
followups = sa.Table(
    "followups",
    _meta,
    sa.Column("id", sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True),
    sa.Column("user_id", sa.BigInteger, nullable=False),
    sa.Column("agent_id", sa.String(128), nullable=False),
    sa.Column("session_id", sa.String(255), nullable=False),
    sa.Column("channel", sa.String(32), nullable=False),
    sa.Column("chat_id", sa.BigInteger),
    sa.Column("thread_id", sa.BigInteger),
    sa.Column("quote_message_id", sa.BigInteger),
    sa.Column("due_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("timezone", sa.String(64), nullable=False),
    sa.Column("text", sa.Text, nullable=False),
    sa.Column("state", sa.String(16), nullable=False),
    sa.Column("created_by", sa.String(16), nullable=False),
    sa.Column("proactive", sa.Boolean, nullable=False),
    sa.Column("version", sa.Integer, nullable=False),
    sa.Column("confirmed", sa.Boolean, nullable=False),
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("claimed_at", sa.DateTime(timezone=True)),
    sa.Column("sent_at", sa.DateTime(timezone=True)),
)
sources = sa.Table(
    "followup_sources",
    _meta,
    sa.Column("followup_id", sa.BigInteger, sa.ForeignKey("followups.id", ondelete="CASCADE")),
    sa.Column("message_id", sa.BigInteger),
)
prefs = sa.Table(
    "followup_prefs",
    _meta,
    sa.Column("user_id", sa.BigInteger, primary_key=True),
    sa.Column("agent_id", sa.String(128), primary_key=True),
    sa.Column("timezone", sa.String(64)),
    sa.Column("quiet", sa.String(11)),
    sa.Column("proactive", sa.Boolean, nullable=False),
    sa.Column("paused", sa.Boolean, nullable=False),
)
f = followups.c

# Observers of what happens to follow-ups ("created", "sent", "dismissed", "dropped"):
# the bot counts them for /metrics (bot/runtime/metrics.py); memory imports no bot.
_observers: list[Callable[[str], None]] = []


def observe(callback: Callable[[str], None]) -> None:
    if callback not in _observers:
        _observers.append(callback)


def _tell(event: str) -> None:
    for callback in _observers:
        try:
            callback(event)
        except Exception:  # a counter never fails a follow-up
            log.exception("follow-up observer failed")


@dataclass(frozen=True)
class Followup:
    id: int
    user_id: int
    agent_id: str
    session_id: str
    channel: str
    chat_id: int | None
    thread_id: int | None
    quote_message_id: int | None
    due_at: datetime
    timezone: str
    text: str
    state: str
    created_by: str
    proactive: bool
    version: int
    confirmed: bool
    created_at: datetime
    sent_at: datetime | None = None

    @property
    def owner(self) -> Owner:
        return Owner(self.user_id, self.agent_id)


def _row(r: Any) -> Followup:
    return Followup(
        id=int(r.id),
        user_id=int(r.user_id),
        agent_id=r.agent_id,
        session_id=r.session_id,
        channel=r.channel,
        chat_id=r.chat_id,
        thread_id=r.thread_id,
        quote_message_id=r.quote_message_id,
        due_at=as_utc(r.due_at),
        timezone=r.timezone,
        text=r.text,
        state=r.state,
        created_by=r.created_by,
        proactive=bool(r.proactive),
        version=int(r.version),
        confirmed=bool(r.confirmed),
        created_at=as_utc(r.created_at),
        sent_at=as_utc(r.sent_at),
    )


@dataclass(frozen=True)
class Prefs:
    timezone: str | None = None
    quiet: str | None = None  # None: the configured default
    proactive: bool = True
    paused: bool = False


def _owned(owner: Owner) -> list[sa.ColumnElement[bool]]:
    return [f.user_id == owner.user_id, f.agent_id == owner.agent_id]


# -- preferences -------------------------------------------------------------------------


async def get_prefs(engine: AsyncEngine, owner: Owner) -> Prefs:
    async with engine.connect() as conn:
        return await _prefs(conn, owner)


async def _prefs(conn: AsyncConnection, owner: Owner) -> Prefs:
    row = (
        await conn.execute(
            sa.select(prefs).where(
                prefs.c.user_id == owner.user_id, prefs.c.agent_id == owner.agent_id
            )
        )
    ).first()
    if row is None:
        return Prefs()
    return Prefs(row.timezone, row.quiet, bool(row.proactive), bool(row.paused))


async def set_prefs(engine: AsyncEngine, owner: Owner, **values: Any) -> Prefs:
    """Set some of `owner`'s preferences (timezone, quiet, proactive, paused)."""
    async with write_transaction(engine) as conn:
        return await _set_prefs(conn, owner, **values)


async def _set_prefs(conn: AsyncConnection, owner: Owner, **values: Any) -> Prefs:
    now = await _prefs(conn, owner)
    merged = {
        "timezone": now.timezone,
        "quiet": now.quiet,
        "proactive": now.proactive,
        "paused": now.paused,
        **values,
    }
    await conn.execute(
        conflict_insert(conn, prefs)
        .values(user_id=owner.user_id, agent_id=owner.agent_id, **merged)
        .on_conflict_do_update(index_elements=[prefs.c.user_id, prefs.c.agent_id], set_=merged)
    )
    return Prefs(**merged)


# -- making and reading ------------------------------------------------------------------


async def _owned_sources(
    conn: AsyncConnection, owner: Owner, session_id: str, ids: Sequence[int]
) -> list[tuple[int, str, int | None, int | None, int | None]]:
    """(message id, channel, chat, thread, channel message id) of `ids` in `owner`'s
    memory; without ids, the newest user message of `session_id` (the turn's request)."""
    q = (
        sa.select(
            messages.c.id,
            conversations.c.channel,
            origins.c.channel,
            origins.c.chat_id,
            origins.c.thread_id,
            origins.c.channel_message_id,
        )
        .join(conversations, conversations.c.id == messages.c.conversation_id)
        .outerjoin(origins, origins.c.message_id == messages.c.id)
        .where(conversations.c.user_id == owner.user_id, conversations.c.agent_id == owner.agent_id)
    )
    if ids:
        q = q.where(messages.c.id.in_(list(ids)[:20])).order_by(messages.c.id)
    else:
        q = (
            q.where(conversations.c.session_id == session_id, messages.c.role == "user")
            .order_by(messages.c.id.desc())
            .limit(1)
        )
    rows = (await conn.execute(q)).all()
    return [(int(r[0]), r[2] or r[1] or "", r[3], r[4], r[5]) for r in rows]


async def add(
    engine: AsyncEngine,
    owner: Owner,
    session_id: str,
    *,
    due_at: datetime,
    timezone: str,
    text: str,
    source_ids: Sequence[int] = (),
    created_by: str,
    proactive: bool = False,
    channel: str = "",
) -> Followup:
    """A new pending follow-up of `owner`, delivered where its first source was said.
    InvalidArgument for a source outside the owner's memory or too many pending."""
    text = text.strip()[:MAX_TEXT]
    if not text:
        raise InvalidArgument("a follow-up needs its text")
    async with write_transaction(engine) as conn:
        found = await _owned_sources(conn, owner, session_id, source_ids)
        if source_ids and len(found) != len(set(source_ids)):
            missing = sorted(set(source_ids) - {m for m, *_ in found})
            raise InvalidArgument(f"no message {missing[0]} in this memory")
        waiting = await conn.scalar(
            sa.select(sa.func.count()).where(*_owned(owner), f.state.in_(WAITING))
        )
        if int(waiting or 0) >= MAX_PENDING:
            raise InvalidArgument(f"{MAX_PENDING} follow-ups are pending already")
        first = found[0] if found else None
        now = utcnow()
        new_id = (
            await conn.execute(
                followups.insert()
                .values(
                    user_id=owner.user_id,
                    agent_id=owner.agent_id,
                    session_id=session_id,
                    channel=(first[1] if first else "") or channel,
                    chat_id=first[2] if first else None,
                    thread_id=first[3] if first else None,
                    quote_message_id=first[4] if first else None,
                    due_at=due_at,
                    timezone=timezone,
                    text=text,
                    state=PENDING,
                    created_by=created_by,
                    proactive=proactive,
                    version=1,
                    confirmed=False,
                    created_at=now,
                )
                .returning(f.id)
            )
        ).scalar_one()
        for message_id, *_ in found:
            await conn.execute(sources.insert().values(followup_id=new_id, message_id=message_id))
        made = await _get(conn, int(new_id))
    _tell("created")
    assert made is not None
    return made


async def _get(conn: AsyncConnection, followup_id: int) -> Followup | None:
    row = (await conn.execute(sa.select(followups).where(f.id == followup_id))).first()
    return None if row is None else _row(row)


async def get(engine: AsyncEngine, followup_id: int) -> Followup | None:
    async with engine.connect() as conn:
        return await _get(conn, followup_id)


async def source_ids(engine: AsyncEngine, followup_id: int) -> list[int]:
    async with engine.connect() as conn:
        rows = await conn.execute(
            sa.select(sources.c.message_id)
            .where(sources.c.followup_id == followup_id)
            .order_by(sources.c.message_id)
        )
        return [int(m) for m in rows.scalars()]


async def listed(
    engine: AsyncEngine, owner: Owner | None = None, states: Iterable[str] = WAITING
) -> list[Followup]:
    """`owner`'s follow-ups in `states` (everyone's when owner is None), soonest first."""
    q = sa.select(followups).where(f.state.in_(list(states)))
    if owner is not None:
        q = q.where(*_owned(owner))
    async with engine.connect() as conn:
        rows = await conn.execute(q.order_by(f.due_at, f.id).limit(1000))
        return [_row(r) for r in rows]


async def unconfirmed(engine: AsyncEngine, owner: Owner) -> list[Followup]:
    """`owner`'s new follow-ups whose one-line confirmation is not sent yet."""
    async with engine.connect() as conn:
        rows = await conn.execute(
            sa.select(followups)
            .where(*_owned(owner), f.confirmed.is_(False), f.state.in_(WAITING))
            .order_by(f.id)
        )
        return [_row(r) for r in rows]


async def confirmed(engine: AsyncEngine, followup_id: int) -> bool:
    """Mark the confirmation sent; False if another process had marked it (it sends none)."""
    async with write_transaction(engine) as conn:
        done = await conn.execute(
            followups.update()
            .where(f.id == followup_id, f.confirmed.is_(False))
            .values(confirmed=True)
        )
        return bool(done.rowcount)


# -- what the owner does -----------------------------------------------------------------

DISMISS, UNDO = "dismiss", "undo"


async def act(
    engine: AsyncEngine,
    owner: Owner,
    followup_id: int,
    what: str,
    *,
    version: int | None = None,
    due_at: datetime | None = None,
) -> Followup:
    """Dismiss, undo (delete) or snooze (`due_at`) follow-up `followup_id` of `owner`,
    if it is still waiting and, with `version`, unchanged since it was shown. NotFound
    otherwise (someone else's, gone, delivered, or changed since)."""
    async with write_transaction(engine) as conn:
        conds = [f.id == followup_id, *_owned(owner), f.state.in_(WAITING)]
        if version is not None:
            conds.append(f.version == version)
        found = (await conn.execute(sa.select(followups).where(*conds))).first()
        if found is None:
            raise NotFound(f"follow-up {followup_id}")
        if what == UNDO:
            await conn.execute(sources.delete().where(sources.c.followup_id == followup_id))
            await conn.execute(followups.delete().where(f.id == followup_id))
            return _row(found)
        values: dict[str, Any] = {"version": f.version + 1}
        if what == DISMISS:
            values["state"] = DISMISSED
        elif due_at is not None:
            values.update(state=SNOOZED, due_at=due_at)
        else:
            raise InvalidArgument(f"unknown follow-up action {what!r}")
        await conn.execute(followups.update().where(*conds).values(**values))
        changed = await _get(conn, followup_id)
    if what == DISMISS:
        _tell("dismissed")
    assert changed is not None
    return changed


# -- delivery ----------------------------------------------------------------------------


async def due(
    engine: AsyncEngine, now: datetime, channels: Iterable[str], limit: int = 500
) -> list[Followup]:
    """Follow-ups due by `now` on `channels` (those this process can send on) that nobody
    holds (waiting, or a claim left past CLAIM_TIMEOUT), of owners not paused; oldest
    first. One made where no channel delivers (the terminal) is never among them."""
    paused = sa.select(prefs.c.user_id).where(
        prefs.c.paused.is_(True), prefs.c.user_id == f.user_id, prefs.c.agent_id == f.agent_id
    )
    q = (
        sa.select(followups)
        .where(
            f.due_at <= now,
            f.channel.in_(list(channels)),
            f.chat_id.is_not(None),
            sa.or_(
                f.state.in_(WAITING),
                sa.and_(f.state == SENDING, f.claimed_at < now - CLAIM_TIMEOUT),
            ),
            ~sa.exists(paused),
        )
        .order_by(f.due_at, f.id)
        .limit(limit)
    )
    async with engine.connect() as conn:
        return [_row(r) for r in await conn.execute(q)]


async def claim(engine: AsyncEngine, item: Followup, now: datetime) -> bool:
    """Take `item` for sending; True for the one process that won it."""
    async with write_transaction(engine) as conn:
        done = await conn.execute(
            followups.update()
            .where(f.id == item.id, f.version == item.version, f.state == item.state)
            .values(state=SENDING, claimed_at=now, version=f.version + 1)
        )
        return bool(done.rowcount)


async def finish(engine: AsyncEngine, followup_id: int, state: str, now: datetime) -> None:
    """A claimed follow-up was sent (SENT) or dropped with a note (DROPPED)."""
    async with write_transaction(engine) as conn:
        await conn.execute(
            followups.update()
            .where(f.id == followup_id, f.state == SENDING)
            .values(state=state, sent_at=now, version=f.version + 1)
        )
    _tell("sent" if state == SENT else state)


async def release(engine: AsyncEngine, item: Followup, *, pause: bool) -> None:
    """A claimed follow-up was not sent: waiting again; `pause`: its owner's delivery
    stops (the channel refused: they blocked the bot) until they are back (`resume`)."""
    async with write_transaction(engine) as conn:
        await conn.execute(
            followups.update()
            .where(f.id == item.id, f.state == SENDING)
            .values(state=PENDING, claimed_at=None, version=f.version + 1)
        )
        if pause:
            await _set_prefs(conn, item.owner, paused=True)


async def resume(engine: AsyncEngine, owner: Owner) -> bool:
    """`owner` is back (wrote to the bot, listed or made a follow-up): delivery paused by
    `release` goes on, what came due meanwhile with it. The bot calls it on every turn,
    so the common case is one primary-key read; the write (and SQLite's write lock) only
    when paused. True if they were."""
    mine = [prefs.c.user_id == owner.user_id, prefs.c.agent_id == owner.agent_id]
    async with engine.connect() as conn:
        paused = await conn.scalar(sa.select(prefs.c.paused).where(*mine, prefs.c.paused.is_(True)))
    if not paused:
        return False
    async with write_transaction(engine) as conn:
        done = await conn.execute(
            prefs.update().where(*mine, prefs.c.paused.is_(True)).values(paused=False)
        )
    return bool(done.rowcount)


async def sent_since(engine: AsyncEngine, owner: Owner, since: datetime) -> int:
    """Proactive follow-ups sent to `owner` since `since` (followups.max_per_day)."""
    async with engine.connect() as conn:
        n = await conn.scalar(
            sa.select(sa.func.count()).where(
                *_owned(owner), f.proactive.is_(True), f.state == SENT, f.sent_at >= since
            )
        )
        return int(n or 0)


async def source_text(engine: AsyncEngine, item: Followup) -> tuple[str, datetime] | None:
    """The first source message's text and time (for "You mentioned on 3 May: ...")."""
    async with engine.connect() as conn:
        row = (
            await conn.execute(
                sa.select(messages.c.content, messages.c.created_at)
                .join(sources, sources.c.message_id == messages.c.id)
                .where(sources.c.followup_id == item.id)
                .order_by(messages.c.id)
                .limit(1)
            )
        ).first()
    return None if row is None else (row.content, as_utc(row.created_at))


# -- forgetting, erasure -----------------------------------------------------------------


async def drop_sources(conn: AsyncConnection, message_ids: Sequence[int]) -> int:
    """Forgotten messages are no follow-up's source any more; a follow-up left without
    a source goes with them (inside the forget's transaction). Returns how many went."""
    ids = sorted(set(message_ids))
    if not ids:
        return 0
    touched = {
        int(x)
        for x in (
            await conn.execute(
                sa.select(sources.c.followup_id).where(sources.c.message_id.in_(ids))
            )
        ).scalars()
    }
    if not touched:
        return 0
    await conn.execute(sources.delete().where(sources.c.message_id.in_(ids)))
    kept = {
        int(x)
        for x in (
            await conn.execute(
                sa.select(sources.c.followup_id).where(sources.c.followup_id.in_(touched))
            )
        ).scalars()
    }
    gone = sorted(touched - kept)
    if gone:
        await conn.execute(followups.delete().where(f.id.in_(gone)))
    return len(gone)


async def erase_owner(conn: AsyncConnection, owner: Owner) -> dict[str, int]:
    """An erasure's hook (memory/storage/forgetting.py `on_erase`)."""
    ids = sa.select(f.id).where(*_owned(owner)).scalar_subquery()
    await conn.execute(sources.delete().where(sources.c.followup_id.in_(ids)))
    done = await conn.execute(followups.delete().where(*_owned(owner)))
    await conn.execute(
        prefs.delete().where(prefs.c.user_id == owner.user_id, prefs.c.agent_id == owner.agent_id)
    )
    return {"follow-up(s)": int(done.rowcount or 0)}


def register_erasure() -> None:
    """Forget and erasure reach follow-ups (run at import; idempotent)."""
    fg.on_erase("followups", erase_owner)
    fg.on_forget_messages("followups", drop_sources)


# -- export and import (memory/transfer/session.py) ------------------------------------

_EXPORTED = (
    "timezone",
    "text",
    "created_by",
    "proactive",
    "channel",
    "chat_id",
    "thread_id",
    "quote_message_id",
)


async def export_session(
    conn: AsyncConnection, session_id: str, user_id: int, agent_id: str, seqs: dict[int, int]
) -> dict[str, Any] | None:
    """The follow-ups made in `session_id` (sources by seq: `seqs` maps message id ->
    seq) and its owner's preferences; None when there are none of either."""
    rows = (
        await conn.execute(sa.select(followups).where(f.session_id == session_id).order_by(f.id))
    ).all()
    items = []
    for r in rows:
        cited = (
            await conn.execute(sa.select(sources.c.message_id).where(sources.c.followup_id == r.id))
        ).scalars()
        item = _row(r)
        out: dict[str, Any] = {k: getattr(item, k) for k in _EXPORTED}
        out["state"] = PENDING if item.state == SENDING else item.state
        out["due_at"] = item.due_at.isoformat()
        out["source_seqs"] = sorted(seqs[int(m)] for m in cited if int(m) in seqs)
        items.append(out)
    p = await _prefs(conn, Owner(user_id, agent_id))
    saved = p != Prefs()
    if not items and not saved:
        return None
    return {
        "items": items,
        "prefs": {"timezone": p.timezone, "quiet": p.quiet, "proactive": p.proactive}
        if saved
        else None,
    }


async def import_session(
    conn: AsyncConnection,
    session_id: str,
    owner: Owner,
    section: Any,
    ids: dict[int, int],
) -> int:
    """Restore `export_session`'s section (validated: memory/transfer/schema.py) into
    `session_id`; `ids` maps seq -> the imported message id. The owner's preferences are
    written only when they have none (as the user memory is). Returns follow-ups made."""
    now = utcnow()
    for item in section.items:
        new_id = (
            await conn.execute(
                followups.insert()
                .values(
                    **{k: getattr(item, k) for k in _EXPORTED},
                    user_id=owner.user_id,
                    agent_id=owner.agent_id,
                    session_id=session_id,
                    state=item.state,
                    due_at=item.due_at,
                    version=1,
                    confirmed=True,
                    created_at=now,
                )
                .returning(f.id)
            )
        ).scalar_one()
        for seq in item.source_seqs:
            await conn.execute(sources.insert().values(followup_id=new_id, message_id=ids[seq]))
    p = section.prefs
    if p is not None and await _prefs(conn, owner) == Prefs():
        await _set_prefs(conn, owner, timezone=p.timezone, quiet=p.quiet, proactive=p.proactive)
    return len(section.items)


register_erasure()
