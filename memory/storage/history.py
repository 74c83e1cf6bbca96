"""The lossless message history every SQL provider shares (lcm, simple).

`HistoryStore` appends messages (one transaction per call, serialised per session:
SQLite by its single writer, PostgreSQL by a transaction-level advisory lock keyed on
the session, which also holds across replicas), loads them back exactly, and answers
session metadata. `SessionHistory` is the `SessionManager` mixin built on it.

Providers that add their own rows in the same transaction (lcm's context items, say)
use `HistoryStore.session_transaction` and `insert_messages` instead of `append`.

Appends write to archived conversations too (imports, compaction, tools keep working on
them); a caller that means the live session only (the pool, for a user's message) passes
`AppendOptions(live_only=True)`, and an archived one then raises `SessionArchived`.
"""

from __future__ import annotations

import enum
from collections import OrderedDict
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypedDict

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from memory.contract.capabilities import SessionCounter as SessionCounter
from memory.contract.errors import NotFound, SessionArchived
from memory.contract.options import AppendOptions
from memory.contract.types import AnsweredTurn as AnsweredTurn
from memory.contract.types import FoundMessage as FoundMessage
from memory.contract.types import (
    ListOptions,
    Message,
    Origin,
    Role,
    Session,
    SessionInfo,
    ToolCall,
    as_utc,
    utcnow,
)
from memory.contract.types import SessionCounts as SessionCounts
from memory.search.text import like_pattern
from memory.storage.db import conflict_insert, lock_for_transaction, write_transaction
from memory.storage.history_models import Conversation, MessageOriginRow, MessagePart, MessageRow
from memory.text.sanitize import storable, storable_message
from memory.text.tokens import message_tokens

conversations: sa.Table = Conversation.__table__  # type: ignore[attr-defined]
messages: sa.Table = MessageRow.__table__  # type: ignore[attr-defined]
parts: sa.Table = MessagePart.__table__  # type: ignore[attr-defined]
origins: sa.Table = MessageOriginRow.__table__  # type: ignore[attr-defined]

TITLE_CHARS = 80
# The roles of the messages said (embedded when they have text; tool rows are not).
SAID_ROLES = ("user", "assistant")


def said(m: Any) -> sa.ColumnElement[bool]:
    """Whether a row of `m` (messages or an alias) is a user or assistant message with text."""
    return sa.and_(m.c.role.in_(SAID_ROLES), m.c.content != "")


def said_before(m: Any) -> sa.ScalarSelect[Any]:
    """The id of the said message (`said`) just before `m`'s row in its conversation,
    correlated to `m`: a walk back of (conversation_id, seq), one step per row."""
    prev = messages.alias("said_before")
    return (
        sa.select(prev.c.id)
        .where(prev.c.conversation_id == m.c.conversation_id, prev.c.seq < m.c.seq, said(prev))
        .order_by(prev.c.seq.desc())
        .limit(1)
        .correlate(m)
        .scalar_subquery()
    )


# Sessions whose conversation id a store remembers (most recently used kept); a
# forgotten one costs a read by its unique session id on its next use.
CONV_ID_CACHE_SIZE = 10_000
# Message ids per query when reading their parts: a long backlog (simple compacting 70k
# messages at once) must not exceed PostgreSQL's 65535 bound parameters.
PARTS_CHUNK = 10_000


class PartKind(enum.StrEnum):
    REASONING = "reasoning"
    TOOL_CALL = "tool_call"
    TOOL_RESULT = "tool_result"


RECENT_TURN_MESSAGES = 200  # where `answered_turn` looks first for the message answered


def origin_values(message_id: int, origin: Origin) -> dict[str, Any]:
    """The `message_origins` row saying message `message_id` came from `origin`."""
    return {
        "message_id": message_id,
        "channel": origin.channel,
        "chat_id": origin.chat_id,
        "channel_message_id": origin.message_id,
        "thread_id": origin.thread_id,
        "sender_id": origin.sender_id,
    }


@dataclass(frozen=True)
class StoredMessage:
    id: int
    seq: int
    token_count: int
    created_at: datetime


class _MessageValues(TypedDict):
    """A message's own columns, as `insert_messages` writes them."""

    role: str
    content: str
    token_count: int
    created_at: datetime


# A row read by column name: a plain dict or SQLAlchemy's RowMapping (whose keys are
# typed str | Column, so it is no Mapping[str, Any] to a type checker).
RowLike = Mapping[str, Any] | sa.RowMapping


def _parts_of(msg: Message) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    if msg.reasoning is not None:
        out.append({"kind": PartKind.REASONING, "content": msg.reasoning})
    for call in msg.tool_calls:
        out.append(
            {
                "kind": PartKind.TOOL_CALL,
                "tool_call_id": call.id,
                "tool_name": call.name,
                "content": call.arguments,
            }
        )
    if msg.tool_call_id is not None or msg.role == "tool":
        out.append(
            {
                "kind": PartKind.TOOL_RESULT,
                "tool_call_id": msg.tool_call_id,
                "tool_name": msg.name,
                "content": "",
            }
        )
    return out


def _bind(name: str, column: sa.Column[Any]) -> sa.BindParameter[Any]:
    return sa.bindparam(name, type_=column.type)


# The statements of every append and every assemble, built once: building a SQLAlchemy
# statement costs more CPU than SQLite takes to run one of these.
_MESSAGE_VALUES = ("role", "content", "token_count", "created_at")
# One message at the conversation's next seq, returning (id, seq).
_INSERT_NEXT = (
    sa.insert(messages)
    .from_select(
        ["conversation_id", "seq", *_MESSAGE_VALUES],
        sa.select(
            _bind("m_conv", messages.c.conversation_id),
            sa.func.coalesce(sa.func.max(messages.c.seq), 0) + 1,
            *(_bind(f"m_{key}", messages.c[key]) for key in _MESSAGE_VALUES),
        ).where(messages.c.conversation_id == sa.bindparam("m_conv")),
    )
    .returning(messages.c.id, messages.c.seq)
)
_INSERT_MANY = sa.insert(messages).returning(messages.c.id, messages.c.seq)
# (returning `archived` for `AppendOptions.live_only`: checked at no extra round trip)
_TOUCH = (
    sa.update(conversations)
    .where(conversations.c.id == sa.bindparam("c_id"))
    .values(updated_at=_bind("c_now", conversations.c.updated_at))
    .returning(conversations.c.archived)
)
# ... and the first user message names the conversation; later ones keep its title.
_TOUCH_TITLE = _TOUCH.values(
    title=sa.case(
        (conversations.c.title == "", _bind("c_title", conversations.c.title)),
        else_=conversations.c.title,
    )
)
_BY_IDS = (
    sa.select(messages)
    .where(messages.c.id.in_(sa.bindparam("ids", expanding=True)))
    .order_by(messages.c.conversation_id, messages.c.seq)
)
_PARTS_OF = (
    sa.select(parts)
    .where(parts.c.message_id.in_(sa.bindparam("ids", expanding=True)))
    .order_by(parts.c.message_id, parts.c.ordinal)
)


def build_message(row: RowLike, part_rows: Iterable[RowLike]) -> tuple[StoredMessage, Message]:
    """A stored message back from its row (id, seq, role, content, token_count,
    created_at) and its parts' rows (kind, tool_call_id, tool_name, content; in order)."""
    created = as_utc(row["created_at"])
    msg = Message(role=row["role"], content=row["content"], created_at=created)
    for p in part_rows:
        if p["kind"] == PartKind.REASONING:
            msg.reasoning = p["content"]
        elif p["kind"] == PartKind.TOOL_CALL:
            msg.tool_calls.append(
                ToolCall(p["tool_call_id"] or "", p["tool_name"] or "", p["content"])
            )
        elif p["kind"] == PartKind.TOOL_RESULT:
            msg.tool_call_id = p["tool_call_id"]
            msg.name = p["tool_name"]
    return StoredMessage(row["id"], row["seq"], row["token_count"], created), msg


class HistoryStore:
    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine
        # session_id -> conversation id (immutable), most recently used last; holds only
        # ids whose creating transaction committed
        self._conv_ids: OrderedDict[str, int] = OrderedDict()

    # -- conversations -------------------------------------------------------------

    def _cached_id(self, session_id: str) -> int | None:
        conv_id = self._conv_ids.get(session_id)
        if conv_id is not None:
            self._conv_ids.move_to_end(session_id)
        return conv_id

    def _remember_id(self, session_id: str, conv_id: int) -> None:
        """Only once the transaction that may have created the row committed."""
        self._conv_ids[session_id] = conv_id
        self._conv_ids.move_to_end(session_id)
        while len(self._conv_ids) > CONV_ID_CACHE_SIZE:
            self._conv_ids.popitem(last=False)

    def forget_cached(self, session_id: str) -> None:
        """The conversation of `session_id` was deleted (an erasure): its id is stale."""
        self._conv_ids.pop(session_id, None)

    async def _ensure_conversation(self, conn: AsyncConnection, session: Session) -> int:
        cached = self._cached_id(session.id)
        if cached is not None:
            return cached
        now = utcnow()
        await conn.execute(
            conflict_insert(conn, conversations)
            .on_conflict_do_nothing()
            .values(
                session_id=session.id,
                agent_id=session.agent_id,
                user_id=session.user_id,
                channel=session.channel,
                title="",
                archived=False,
                created_at=now,
                updated_at=now,
            )
        )
        conv_id = await conn.scalar(
            sa.select(conversations.c.id).where(conversations.c.session_id == session.id)
        )
        assert conv_id is not None
        # Not cached here: the row may still roll back with the caller's transaction.
        return int(conv_id)

    async def bootstrap(self, session: Session) -> int:
        """Create the conversation record if needed; returns its id."""
        cached = self._cached_id(session.id)
        if cached is not None:
            return cached
        async with write_transaction(self.engine) as conn:
            conv_id = await self._ensure_conversation(conn, session)
        self._remember_id(session.id, conv_id)  # committed: safe to remember
        return conv_id

    async def conversation_id(
        self, session_id: str, conn: AsyncConnection | None = None
    ) -> int | None:
        cached = self._cached_id(session_id)
        if cached is not None:
            return cached
        query = sa.select(conversations.c.id).where(conversations.c.session_id == session_id)
        if conn is not None:
            return await conn.scalar(query)
        async with self.engine.connect() as c:
            return await c.scalar(query)

    @asynccontextmanager
    async def session_transaction(
        self, session: Session
    ) -> AsyncIterator[tuple[AsyncConnection, int]]:
        """A write transaction holding the session's lock; yields (conn, conversation id)."""
        try:
            async with write_transaction(self.engine) as conn:
                await lock_for_transaction(conn, f"session:{session.id}")
                conv_id = await self._ensure_conversation(conn, session)
                yield conn, conv_id
        except BaseException:
            # The remembered id may be of a conversation another process erased
            # (memory/storage/forgetting.py): read it afresh next time rather than fail forever.
            self._conv_ids.pop(session.id, None)
            raise
        # Reached only when the transaction committed (an exception skips this line).
        self._remember_id(session.id, conv_id)

    # -- messages ------------------------------------------------------------------

    async def insert_messages(
        self,
        conn: AsyncConnection,
        conv_id: int,
        msgs: Sequence[Message],
        options: AppendOptions | None = None,
    ) -> list[StoredMessage]:
        """Insert `msgs` after the conversation's last seq, inside the caller's
        session transaction. Returns what was stored, in order.

        Every turn appends twice, so statements are few: the first message's insert
        reads the next seq itself (INSERT ... SELECT max(seq) + 1), any others go in one
        multi-row insert, their parts in one more, and one update of the conversation,
        which also tells whether it is archived. `options` as for `Provider.append`:
        `live_only` is checked under the session's lock, so a `/new` that archived it
        (on any replica) either committed before (refused) or waits; the hook runs
        last, on `conn`.
        """
        if not msgs:
            return []
        cleaned = [storable_message(raw) for raw in msgs]
        rows: list[_MessageValues] = [
            {
                "role": msg.role,
                "content": msg.content,
                "token_count": message_tokens(msg),
                "created_at": msg.created_at or utcnow(),
            }
            for msg in cleaned
        ]
        first = {"m_conv": conv_id, **{f"m_{k}": v for k, v in rows[0].items()}}
        first_id, first_seq = (await conn.execute(_INSERT_NEXT, first)).one()
        ids = [first_id]
        if len(rows) > 1:
            rest = [
                {"conversation_id": conv_id, "seq": first_seq + i, **row}
                for i, row in enumerate(rows[1:], 1)
            ]
            result = await conn.execute(_INSERT_MANY, rest)
            by_seq = {seq: msg_id for msg_id, seq in result}
            ids += [by_seq[first_seq + i] for i in range(1, len(rows))]
        # Every row carries every key: executemany takes its columns from the first.
        part_rows = [
            {"message_id": msg_id, "ordinal": i, "tool_call_id": None, "tool_name": None, **p}
            for msg_id, msg in zip(ids, cleaned, strict=True)
            for i, p in enumerate(_parts_of(msg))
        ]
        if part_rows:
            await conn.execute(sa.insert(parts), part_rows)
        origin_rows = [
            origin_values(msg_id, o)
            for msg_id, raw in zip(ids, msgs, strict=True)
            if (o := raw.origin) is not None
        ]
        if origin_rows:
            await conn.execute(sa.insert(origins), origin_rows)
        title = next((m.content for m in cleaned if m.role == "user" and m.content.strip()), None)
        if title:
            title = " ".join(title.split())[:TITLE_CHARS]
            touched = await conn.execute(
                _TOUCH_TITLE, {"c_id": conv_id, "c_now": utcnow(), "c_title": title}
            )
        else:
            touched = await conn.execute(_TOUCH, {"c_id": conv_id, "c_now": utcnow()})
        # The session's lock is held since before the conversation was read, and this
        # update waits for any other writer of the row: an archiving that committed
        # first is seen here. Raising rolls back the rows inserted above.
        options = options or AppendOptions()
        if touched.scalar_one() and options.live_only:
            raise SessionArchived(f"conversation {conv_id} is archived: nothing appended")
        if options.hook is not None:
            await options.hook.run(conn)  # a channel's delivery record, same transaction
        return [
            StoredMessage(msg_id, first_seq + i, row["token_count"], row["created_at"])
            for i, (msg_id, row) in enumerate(zip(ids, rows, strict=True))
        ]

    async def append(
        self, session: Session, *msgs: Message, options: AppendOptions | None = None
    ) -> list[StoredMessage]:
        async with self.session_transaction(session) as (conn, conv_id):
            return await self.insert_messages(conn, conv_id, msgs, options)

    async def load_messages(
        self,
        conn: AsyncConnection,
        where: sa.ColumnElement[bool] | None = None,
        *,
        ids: Iterable[int] | None = None,
        limit: int | None = None,
        newest_first: bool = False,
    ) -> list[tuple[StoredMessage, Message]]:
        """Messages matching `where` (or with `ids`), ordered by (conversation, seq)."""
        if ids is not None and where is None and limit is None and not newest_first:
            id_list = list(ids)
            if not id_list:
                return []
            rows = (await conn.execute(_BY_IDS, {"ids": id_list})).mappings().all()
            return await self._with_parts(conn, rows)
        query = sa.select(messages)
        if ids is not None:
            id_list = list(ids)
            if not id_list:
                return []
            query = query.where(messages.c.id.in_(id_list))
        if where is not None:
            query = query.where(where)
        order = (messages.c.conversation_id, messages.c.seq)
        query = query.order_by(*(o.desc() for o in order) if newest_first else order)
        if limit is not None:
            query = query.limit(limit)
        rows = (await conn.execute(query)).mappings().all()
        return await self._with_parts(conn, rows)

    async def _with_parts(
        self, conn: AsyncConnection, rows: Sequence[sa.RowMapping]
    ) -> list[tuple[StoredMessage, Message]]:
        if not rows:
            return []
        ids = [r["id"] for r in rows]
        part_rows: list[sa.RowMapping] = []
        for start in range(0, len(ids), PARTS_CHUNK):  # PostgreSQL binds at most 65535
            chunk = ids[start : start + PARTS_CHUNK]
            part_rows += (await conn.execute(_PARTS_OF, {"ids": chunk})).mappings().all()
        by_msg: dict[int, list[sa.RowMapping]] = {}
        for p in part_rows:
            by_msg.setdefault(p["message_id"], []).append(p)
        return [build_message(r, by_msg.get(r["id"], ())) for r in rows]

    async def load_history(self, session_id: str) -> list[Message]:
        async with self.engine.connect() as conn:
            conv_id = await self.conversation_id(session_id, conn)
            if conv_id is None:
                return []
            rows = await self.load_messages(conn, messages.c.conversation_id == conv_id)
        return [m for _, m in rows]

    async def load_recent(self, session_id: str, limit: int) -> list[Message]:
        """The session's newest `limit` messages, oldest first."""
        async with self.engine.connect() as conn:
            conv_id = await self.conversation_id(session_id, conn)
            if conv_id is None:
                return []
            rows = await self.load_messages(
                conn, messages.c.conversation_id == conv_id, limit=limit, newest_first=True
            )
        return [m for _, m in reversed(rows)]

    async def message_stats(
        self, session: Session
    ) -> tuple[int, int, datetime | None, datetime | None]:
        """(count, tokens, oldest, newest) of a session's stored messages; zeros if unknown."""
        async with self.engine.connect() as conn:
            conv_id = await self.conversation_id(session.id, conn)
            if conv_id is None:
                return 0, 0, None, None
            row = (
                await conn.execute(
                    sa.select(
                        sa.func.count(),
                        sa.func.coalesce(sa.func.sum(messages.c.token_count), 0),
                        sa.func.min(messages.c.created_at),
                        sa.func.max(messages.c.created_at),
                    ).where(messages.c.conversation_id == conv_id)
                )
            ).one()
        return int(row[0]), int(row[1]), as_utc(row[2]), as_utc(row[3])

    async def spans(
        self, session_ids: Sequence[str]
    ) -> dict[str, tuple[datetime | None, datetime | None]]:
        """Each session's first and last message times, by seq (what was said first and
        last; imported messages carry their own dates), in one query: two index lookups
        per conversation (`uq_messages_conv_seq`), whatever its length."""
        if not session_ids:
            return {}
        c, m = conversations.c, messages.c

        def edge(newest: bool) -> sa.ScalarSelect[Any]:
            order = m.seq.desc() if newest else m.seq.asc()
            return (
                sa.select(m.created_at)
                .where(m.conversation_id == c.id)
                .order_by(order)
                .limit(1)
                .scalar_subquery()
            )

        query = sa.select(c.session_id, edge(False), edge(True)).where(
            c.session_id.in_(list(session_ids))
        )
        async with self.engine.connect() as conn:
            rows = (await conn.execute(query)).all()
        return {r[0]: (as_utc(r[1]), as_utc(r[2])) for r in rows}

    # -- session info --------------------------------------------------------------

    async def save_info(self, info: SessionInfo) -> None:
        session = Session(info.id, info.agent_id, info.user_id, info.channel)
        async with self.session_transaction(session) as (conn, conv_id):
            values: dict[str, Any] = {
                "archived": info.archived,
                "updated_at": info.last_active or utcnow(),
            }
            if info.title:
                values["title"] = storable(info.title)[:200]
            await conn.execute(
                sa.update(conversations).where(conversations.c.id == conv_id).values(**values)
            )

    @staticmethod
    def _info(row: sa.RowMapping) -> SessionInfo:
        return SessionInfo(
            id=row["session_id"],
            agent_id=row["agent_id"],
            user_id=row["user_id"],
            channel=row["channel"],
            title=row["title"],
            created_at=as_utc(row["created_at"]),
            last_active=as_utc(row["updated_at"]),
            archived=bool(row["archived"]),
        )

    async def load_info(self, session_id: str) -> SessionInfo:
        async with self.engine.connect() as conn:
            row = (
                (
                    await conn.execute(
                        sa.select(conversations).where(conversations.c.session_id == session_id)
                    )
                )
                .mappings()
                .first()
            )
        if row is None:
            raise NotFound(f"session {session_id!r} not found")
        return self._info(row)

    @staticmethod
    def _listing(query: sa.Select[Any], opts: ListOptions) -> sa.Select[Any]:
        """`query` over conversations, filtered, ordered and paged as `opts` says."""
        query = HistoryStore._filtered(query.order_by(*_order(conversations.c, opts.order)), opts)
        if opts.limit:
            query = query.limit(opts.limit)
        if opts.offset:
            query = query.offset(opts.offset)
        return query

    @staticmethod
    def _filtered(query: sa.Select[Any], opts: ListOptions) -> sa.Select[Any]:
        if opts.agent_id:
            query = query.where(conversations.c.agent_id == opts.agent_id)
        if opts.user_id is not None:
            query = query.where(conversations.c.user_id == opts.user_id)
        if opts.text:
            pattern = like_pattern(opts.text)
            query = query.where(
                sa.or_(
                    conversations.c.session_id.ilike(pattern, escape="\\"),
                    conversations.c.title.ilike(pattern, escape="\\"),
                )
            )
        if not opts.include_archived:
            query = query.where(conversations.c.archived.is_(False))
        return query

    async def count_sessions(self, opts: ListOptions) -> int:
        """How many sessions the listing holds over all its pages."""
        query = self._filtered(sa.select(sa.func.count()).select_from(conversations), opts)
        async with self.engine.connect() as conn:
            return int((await conn.execute(query)).scalar_one())

    async def list_info(self, opts: ListOptions) -> list[SessionInfo]:
        query = self._listing(sa.select(conversations), opts)
        async with self.engine.connect() as conn:
            rows = (await conn.execute(query)).mappings().all()
        return [self._info(r) for r in rows]

    async def list_counts(
        self, opts: ListOptions, summaries: sa.Table | None = None
    ) -> list[SessionCounts]:
        """`list_info` with each session's message count and tokens and the count of its
        rows in `summaries` (a provider's table with a `conversation_id` column; 0 when
        None), in one query whatever the number of sessions: a listing of thousands of
        sessions must not cost a query per session. The page of conversations is chosen
        first, so only its sessions' rows are counted (correlated, by index)."""
        page = self._listing(sa.select(conversations), opts).subquery()
        msg_of = messages.c.conversation_id == page.c.id
        query = sa.select(
            page,
            sa.select(sa.func.count()).where(msg_of).scalar_subquery().label("message_count"),
            sa.select(sa.func.coalesce(sa.func.sum(messages.c.token_count), 0))
            .where(msg_of)
            .scalar_subquery()
            .label("token_count"),
        )
        if summaries is not None:
            query = query.add_columns(
                sa.select(sa.func.count())
                .where(summaries.c.conversation_id == page.c.id)
                .scalar_subquery()
                .label("summary_count")
            )
        query = query.order_by(*_order(page.c, opts.order))
        async with self.engine.connect() as conn:
            rows = (await conn.execute(query)).mappings().all()
        return [
            SessionCounts(
                self._info(r),
                int(r["message_count"]),
                int(r.get("summary_count", 0)),
                int(r["token_count"]),
            )
            for r in rows
        ]

    async def read_message(self, session: Session, message_id: str) -> FoundMessage:
        """Message `message_id` (a search hit's id) if it belongs to one of the
        conversations of `session`'s user and agent; else `NotFound`, the same for an
        id that does not exist as for another user's."""
        if not message_id.isdigit() or len(message_id) > 18:
            raise NotFound(f"message {message_id!r} not found")
        async with self.engine.connect() as conn:
            row = (
                (
                    await conn.execute(
                        sa.select(conversations, messages.c.seq)
                        .join(messages, messages.c.conversation_id == conversations.c.id)
                        .where(
                            messages.c.id == int(message_id),
                            conversations.c.user_id == session.user_id,
                            conversations.c.agent_id == session.agent_id,
                        )
                    )
                )
                .mappings()
                .first()
            )
            if row is None:
                raise NotFound(f"message {message_id!r} not found")
            [(_stored, msg)] = await self.load_messages(conn, ids=[int(message_id)])
            where = (
                (
                    await conn.execute(
                        sa.select(origins).where(origins.c.message_id == int(message_id))
                    )
                )
                .mappings()
                .first()
            )
        origin = None
        if where is not None:
            origin = Origin(
                where["channel"],
                where["chat_id"],
                where["channel_message_id"],
                where["thread_id"],
                where["sender_id"],
            )
        return FoundMessage(self._info(row), row["seq"], msg, origin)

    async def answered_turn(self, session: Session, asked: Origin) -> AnsweredTurn | None:
        """The stored turn that answered the message received from `asked` in
        `session`'s conversation (the newest such message): its messages from that user
        message on, up to the next user message, and its final answer's id. None when
        the message is not there (forgotten, another session's) or has no stored answer."""
        async with self.engine.connect() as conn:
            conv_id = await self.conversation_id(session.id, conn)
            if conv_id is None:
                return None
            in_conv = messages.c.conversation_id == conv_id
            asked_here = sa.select(messages.c.seq).join(
                origins, origins.c.message_id == messages.c.id
            )
            asked_here = asked_here.where(
                in_conv,
                messages.c.role == Role.USER.value,
                origins.c.channel == asked.channel,
                origins.c.chat_id == asked.chat_id,
                origins.c.channel_message_id == asked.message_id,
            )
            # Nearly always among the newest messages (the answer was just sent): those
            # are looked at first, the whole conversation only when it is not there.
            newest = await conn.scalar(sa.select(sa.func.max(messages.c.seq)).where(in_conv))
            recent = asked_here.where(messages.c.seq > (newest or 0) - RECENT_TURN_MESSAGES)
            seq = await conn.scalar(recent.order_by(messages.c.seq.desc()).limit(1))
            if seq is None:
                seq = await conn.scalar(asked_here.order_by(messages.c.seq.desc()).limit(1))
            if seq is None:
                return None
            after = await conn.scalar(
                sa.select(sa.func.min(messages.c.seq)).where(
                    in_conv, messages.c.seq > seq, messages.c.role == Role.USER.value
                )
            )
            span = sa.and_(in_conv, messages.c.seq >= seq)
            if after is not None:
                span = sa.and_(span, messages.c.seq < after)
            rows = await self.load_messages(conn, span)
        if not rows:
            return None
        last, final = rows[-1]
        if final.role != Role.ASSISTANT or final.tool_calls:
            return None  # the model failed: nothing of the turn's answer was stored
        return AnsweredTurn(str(last.id), [m for _, m in rows])

    async def add_origin(self, session: Session, message_id: str, origin: Origin) -> bool:
        """Record where message `message_id` of `session`'s conversation went out (a
        channel's sent answer) unless it has an origin already; False when nothing was
        written (not the session's message, or one already there)."""
        if not message_id.isdigit() or len(message_id) > 18:
            return False
        async with write_transaction(self.engine) as conn:
            owned = await conn.scalar(
                sa.select(messages.c.id)
                .join(conversations, conversations.c.id == messages.c.conversation_id)
                .where(messages.c.id == int(message_id), conversations.c.session_id == session.id)
            )
            if owned is None:
                return False
            written = await conn.scalar(
                conflict_insert(conn, origins)
                .values(origin_values(owned, origin))
                .on_conflict_do_nothing()
                .returning(origins.c.message_id)
            )
        return written is not None


class SessionHistory:
    """`SessionManager`, `MessageReader` and `AnswerOrigins` for providers that keep a
    `self.history: HistoryStore`."""

    history: HistoryStore

    async def read_message(self, session: Session, message_id: str) -> FoundMessage:
        return await self.history.read_message(session, message_id)

    async def save_info(self, info: SessionInfo) -> None:
        await self.history.save_info(info)

    async def load_info(self, session_id: str) -> SessionInfo:
        return await self.history.load_info(session_id)

    async def spans(
        self, session_ids: Sequence[str]
    ) -> dict[str, tuple[datetime | None, datetime | None]]:
        return await self.history.spans(session_ids)

    async def list_info(self, opts: ListOptions) -> list[SessionInfo]:
        return await self.history.list_info(opts)

    async def load_history(self, session_id: str) -> list[Message]:
        return await self.history.load_history(session_id)

    async def load_recent(self, session_id: str, limit: int) -> list[Message]:
        return await self.history.load_recent(session_id, limit)

    async def answered_turn(self, session: Session, asked: Origin) -> AnsweredTurn | None:
        return await self.history.answered_turn(session, asked)

    async def add_origin(self, session: Session, message_id: str, origin: Origin) -> bool:
        return await self.history.add_origin(session, message_id, origin)


LIST_ORDERS = ("recent", "oldest", "user", "session")


def _order(c: Any, order: str) -> tuple[sa.ColumnElement[Any], ...]:
    """The ORDER BY of a session listing (`ListOptions.order`), ties broken by id so a
    page never repeats or skips a row; an unknown order is the default."""
    recent = (c.updated_at.desc(), c.id.desc())
    if order == "oldest":
        return (c.updated_at.asc(), c.id.asc())
    if order == "user":
        return (c.user_id.asc(), *recent)
    if order == "session":
        return (c.session_id.asc(), c.id.asc())
    return recent
