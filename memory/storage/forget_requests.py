"""Pending `/memory forget` requests, in the database (table `forget_requests`, core
revision `0008_forget_requests`), so any replica confirms what any replica previewed.

A preview keeps a request under a random code, which its confirmation must name (the
typed `/memory forget confirm <code>` and the preview's buttons alike): a confirmation
acts only on its own preview. Per conversation (base session) only the newest request is
live; a newer preview supersedes the older one. A request is live for CONFIRM_WITHIN_S.

A request ends (confirmed, cancelled, superseded or expired) by a conditional UPDATE
from `pending` to `done` whose row count says who won: two replicas confirming one
request at once see one 1 and one 0, so a request is acted on at most once. The end
clears what the request held (message ids and the words forgotten by), in the same
statement; the row stays, `done`, only so the channel can take the buttons off the
message that showed it (`where` / `settle`), then it is deleted. The confirmation ends
the request before it forgets: a crash between the two forgets nothing (ask again).
"""

from __future__ import annotations

import json
import re
import secrets
from dataclasses import dataclass
from datetime import timedelta

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from memory.contract.types import utcnow
from memory.storage import forgetting as fg
from memory.storage.db import write_transaction
from memory.storage.forgetting import Owner

CONFIRM_WITHIN_S = 600.0
# `done` rows whose message nobody settled (a channel without buttons, a crash) go then.
DONE_KEPT = timedelta(days=1)
PENDING, DONE = "pending", "done"
CODE_BYTES = 4  # 8 hex digits: short to type, and one request is live per conversation
CODE = re.compile(r"[0-9a-f]{8}")  # what secrets.token_hex(CODE_BYTES) gives

_metadata = sa.MetaData()
forget_requests = sa.Table(
    "forget_requests",
    _metadata,
    sa.Column("code", sa.String(16), primary_key=True),
    sa.Column("base_session_id", sa.String(255), nullable=False),
    sa.Column("user_id", sa.BigInteger, nullable=False),
    sa.Column("agent_id", sa.String(128), nullable=False),
    sa.Column("everything", sa.Boolean, nullable=False),
    sa.Column("message_ids", sa.Text),
    sa.Column("needles", sa.Text),
    sa.Column("state", sa.String(16), nullable=False),
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("chat_id", sa.BigInteger),
    sa.Column("shown_message_id", sa.BigInteger),
)
t = forget_requests.c


@dataclass(frozen=True)
class Request:
    """A live request: what its confirmation forgets (`everything`, or `ids`)."""

    code: str
    owner: Owner
    everything: bool
    ids: tuple[int, ...] = ()
    needles: tuple[str, ...] = ()


@dataclass(frozen=True)
class Shown:
    """Where a request's preview was shown (a chat's message with its buttons)."""

    code: str
    chat_id: int
    message_id: int


def _cutoff() -> sa.ColumnElement[bool]:
    return t.created_at >= utcnow() - timedelta(seconds=CONFIRM_WITHIN_S)


def _ended() -> dict[str, object]:
    """The values of a request that ended: nothing left of what it would forget."""
    return {"state": DONE, "message_ids": None, "needles": None}


def _of(owner: Owner) -> tuple[sa.ColumnElement[bool], ...]:
    return t.user_id == owner.user_id, t.agent_id == owner.agent_id


async def keep(
    engine: AsyncEngine,
    base_session_id: str,
    owner: Owner,
    *,
    ids: tuple[int, ...] = (),
    needles: tuple[str, ...] = (),
    everything: bool = False,
) -> str:
    """Keep a new request for the conversation `base_session_id`, superseding its older
    one (and ending every expired one); returns its code."""
    code = secrets.token_hex(CODE_BYTES)
    async with write_transaction(engine) as conn:
        await conn.execute(
            forget_requests.update()
            .where(
                t.state == PENDING,
                sa.or_(t.base_session_id == base_session_id, sa.not_(_cutoff())),
            )
            .values(**_ended())
        )
        await conn.execute(
            forget_requests.delete().where(t.state == DONE, t.created_at < utcnow() - DONE_KEPT)
        )
        await conn.execute(
            forget_requests.insert().values(
                code=code,
                base_session_id=base_session_id,
                user_id=owner.user_id,
                agent_id=owner.agent_id,
                everything=everything,
                message_ids=None if everything else json.dumps(list(ids)),
                needles=None if everything else json.dumps(list(needles)),
                state=PENDING,
                created_at=utcnow(),
            )
        )
    return code


async def live(engine: AsyncEngine, base_session_id: str, owner: Owner) -> list[Request]:
    """The conversation's live requests of `owner`, newest first (one, unless two
    replicas previewed at the same moment)."""
    async with engine.connect() as conn:
        rows = await conn.execute(
            sa.select(forget_requests)
            .where(t.base_session_id == base_session_id, t.state == PENDING, _cutoff(), *_of(owner))
            .order_by(t.created_at.desc())
        )
        return [_request(row) for row in rows]


async def take(
    engine: AsyncEngine, base_session_id: str, owner: Owner, code: str
) -> Request | None:
    """End request `code` of this conversation and owner, and return it, when it is live
    and nobody (no other replica) took it first; None otherwise."""
    code = code.lower()
    if not CODE.fullmatch(code):  # not one this module makes: no row has it
        return None
    match = (
        t.code == code,
        t.base_session_id == base_session_id,
        t.state == PENDING,
        *_of(owner),
    )
    async with write_transaction(engine) as conn:
        row = (await conn.execute(sa.select(forget_requests).where(*match, _cutoff()))).first()
        if row is None:
            return None
        ended = await conn.execute(forget_requests.update().where(*match).values(**_ended()))
        if ended.rowcount != 1:  # another replica took it between the two statements
            return None
    return _request(row)


async def cancel(engine: AsyncEngine, base_session_id: str, owner: Owner) -> int:
    """End the conversation's live requests; how many there were."""
    async with write_transaction(engine) as conn:
        ended = await conn.execute(
            forget_requests.update()
            .where(t.base_session_id == base_session_id, t.state == PENDING, _cutoff(), *_of(owner))
            .values(**_ended())
        )
    return int(ended.rowcount)


async def shown(engine: AsyncEngine, code: str, chat_id: int, message_id: int) -> None:
    """Record where request `code`'s preview (with its buttons) was shown."""
    async with write_transaction(engine) as conn:
        await conn.execute(
            forget_requests.update()
            .where(t.code == code)
            .values(chat_id=chat_id, shown_message_id=message_id)
        )


async def is_live(engine: AsyncEngine, code: str) -> bool:
    async with engine.connect() as conn:
        found = await conn.scalar(
            sa.select(t.code).where(t.code == code, t.state == PENDING, _cutoff())
        )
    return found is not None


async def unsettled(engine: AsyncEngine, chat_id: int) -> list[Shown]:
    """The previews in `chat_id` still showing buttons for requests that ended (expired
    ones included)."""
    async with engine.connect() as conn:
        rows = await conn.execute(
            sa.select(t.code, t.chat_id, t.shown_message_id).where(
                t.chat_id == chat_id,
                t.shown_message_id.is_not(None),
                sa.or_(t.state == DONE, sa.not_(_cutoff())),
            )
        )
        return [Shown(code, chat, message) for code, chat, message in rows]


async def settled(engine: AsyncEngine, codes: list[str]) -> None:
    """Forget the ended requests `codes`: their buttons are off their previews."""
    if not codes:
        return
    async with write_transaction(engine) as conn:
        await conn.execute(
            forget_requests.delete().where(
                t.code.in_(codes), sa.or_(t.state == DONE, sa.not_(_cutoff()))
            )
        )


def _request(row: sa.Row[tuple[object, ...]]) -> Request:
    m = row._mapping
    return Request(
        code=m["code"],
        owner=Owner(int(m["user_id"]), str(m["agent_id"])),
        everything=bool(m["everything"]),
        ids=tuple(json.loads(m["message_ids"] or "[]")),
        needles=tuple(json.loads(m["needles"] or "[]")),
    )


async def _erase_requests(conn: AsyncConnection, owner: Owner) -> dict[str, int]:
    """An erasure ends the owner's live requests too (they hold words forgotten by)."""
    ended = await conn.execute(
        forget_requests.update().where(t.state == PENDING, *_of(owner)).values(**_ended())
    )
    return {"pending forget request(s)": int(ended.rowcount)}


def register() -> None:
    """Have erasures end the owner's pending requests (bot.app.services registers it)."""
    fg.on_erase("forget_requests", _erase_requests)
