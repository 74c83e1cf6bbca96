"""What model calls cost: one row per call in `usage_records` (core revision `0006_usage`).

Every model call (a chat round, a summary, a reflect round, an embedding request for a
search or for stored items, a transcription) is recorded through a `UsageRecorder` with
the tokens the server reported, or the estimate (`estimated`) when it reported none, the
kind, the model, the (user, agent, session) from the context (`memory.contract.context`) and the
time.

A row is written in the transaction of what the call produced, where there is one: a
`Ledger` collects the rows of one piece of work (a turn, a compaction, a reflect review,
an embedding batch), and the code that commits the work's result writes them in its own
transaction (`write_pending`): the answer's append, the compaction's changelog row, the
reflect watermark, the stored vectors. Rows whose work was not stored (a failed turn or
compaction: the tokens were spent all the same) are written on their own when the
ledger closes. Rows are keyed by a random id, so a row written again after a rolled-back
or uncertain transaction is not counted twice.

Times are UTC: "today" starts at 00:00 UTC, "this month" on the 1st.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Literal

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from memory.contract.context import (
    agent_id_from_context,
    session_id_from_context,
    user_id_from_context,
)
from memory.contract.types import utcnow
from memory.storage.db import conflict_insert, write_transaction

log = logging.getLogger(__name__)

# What a call was for. Background kinds are the ones the spend guard holds back.
KINDS = ("chat", "summary", "reflect", "recall", "search", "embedding", "transcription")
BACKGROUND_KINDS = ("summary", "reflect", "embedding")

_metadata = sa.MetaData()
usage_records = sa.Table(
    "usage_records",
    _metadata,
    sa.Column("id", sa.String(32), primary_key=True),
    sa.Column("at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("user_id", sa.BigInteger, nullable=False),
    sa.Column("agent_id", sa.String(128), nullable=False),
    sa.Column("session_id", sa.String(255), nullable=False),
    sa.Column("kind", sa.String(32), nullable=False),
    sa.Column("model", sa.String(255), nullable=False),
    sa.Column("prompt_tokens", sa.BigInteger, nullable=False),
    sa.Column("cached_tokens", sa.BigInteger, nullable=False),
    sa.Column("completion_tokens", sa.BigInteger, nullable=False),
    sa.Column("estimated", sa.Boolean, nullable=False),
)


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


@dataclass(frozen=True)
class TokenUsage:
    """Tokens of one or more requests: `cached_prompt` is the part of `prompt` the server
    served from its prompt cache; `estimated` when any part was estimated by us (the
    server reported nothing)."""

    prompt: int = 0
    cached_prompt: int = 0
    completion: int = 0
    estimated: bool = False

    @classmethod
    def from_report(cls, usage: dict[str, Any] | None) -> TokenUsage:
        """OpenAI's `usage` object (prompt_tokens, completion_tokens,
        prompt_tokens_details.cached_tokens); anything not a count is read as 0."""
        usage = usage or {}
        details = usage.get("prompt_tokens_details")
        cached = details.get("cached_tokens") if isinstance(details, dict) else None
        prompt = _count(usage.get("prompt_tokens"))
        return cls(prompt, min(prompt, _count(cached)), _count(usage.get("completion_tokens")))

    @property
    def total(self) -> int:
        return self.prompt + self.completion

    def __add__(self, other: TokenUsage) -> TokenUsage:
        return TokenUsage(
            self.prompt + other.prompt,
            self.cached_prompt + other.cached_prompt,
            self.completion + other.completion,
            self.estimated or other.estimated,
        )


@dataclass(frozen=True)
class UsageRow:
    """One model call, as stored."""

    kind: str
    model: str
    tokens: TokenUsage
    user_id: int = 0
    agent_id: str = ""
    session_id: str = ""
    at: datetime = field(default_factory=utcnow)
    id: str = field(default_factory=lambda: secrets.token_hex(16))

    def values(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "at": self.at,
            "user_id": self.user_id,
            "agent_id": self.agent_id,
            "session_id": self.session_id,
            "kind": self.kind,
            "model": self.model[:255],
            "prompt_tokens": self.tokens.prompt,
            "cached_tokens": self.tokens.cached_prompt,
            "completion_tokens": self.tokens.completion,
            "estimated": self.tokens.estimated,
        }


async def insert_rows(conn: AsyncConnection, rows: Sequence[UsageRow]) -> None:
    """Insert `rows` in the caller's transaction; a row already stored stays as it is."""
    if rows:
        stmt = conflict_insert(conn, usage_records).on_conflict_do_nothing(index_elements=["id"])
        await conn.execute(stmt, [r.values() for r in rows])


# --- the rows of one piece of work --------------------------------------------------


class Ledger:
    """The usage rows of one piece of work, until they are stored with its result."""

    def __init__(self) -> None:
        self.rows: list[UsageRow] = []
        self._committed: set[str] = set()
        self._in_flight: list[str] = []

    def add(self, row: UsageRow) -> None:
        self.rows.append(row)

    def unsettled(self) -> list[UsageRow]:
        return [r for r in self.rows if r.id not in self._committed]

    async def write(self, conn: AsyncConnection) -> None:
        """Every row not known stored, in the caller's transaction."""
        rows = self.unsettled()
        await insert_rows(conn, rows)
        self._in_flight = [r.id for r in rows]

    def committed(self) -> None:
        """The transaction of the last `write` committed."""
        self._committed.update(self._in_flight)
        self._in_flight = []


_ledger: ContextVar[Ledger | None] = ContextVar("mnemo_usage_ledger", default=None)
_kind: ContextVar[str] = ContextVar("mnemo_usage_kind", default="chat")


async def write_pending(conn: AsyncConnection) -> None:
    """Store the usage of the work in progress (the context's ledger, if any) in the
    caller's transaction: called where that work's result is committed."""
    ledger = _ledger.get()
    if ledger is not None:
        await ledger.write(conn)


def current_ledger() -> Ledger | None:
    return _ledger.get()


def kind_from_context(default: str = "chat") -> str:
    return _kind.get() or default


@contextmanager
def call_kind(kind: str) -> Iterator[None]:
    """Model calls in this block are of `kind` (reflect's rounds go through the chat
    tool loop)."""
    token = _kind.set(kind)
    try:
        yield
    finally:
        _kind.reset(token)


# --- reading ------------------------------------------------------------------------


def day_start(now: datetime) -> datetime:
    return now.replace(hour=0, minute=0, second=0, microsecond=0)


def month_start(now: datetime) -> datetime:
    return day_start(now).replace(day=1)


def next_day(now: datetime) -> datetime:
    return day_start(now) + timedelta(days=1)


def next_month(now: datetime) -> datetime:
    start = month_start(now)
    return (start + timedelta(days=32)).replace(day=1)


@dataclass(frozen=True)
class Period:
    """A user's usage today and this month, per model (for prices)."""

    today: dict[str, TokenUsage]
    month: dict[str, TokenUsage]

    @staticmethod
    def total(by_model: dict[str, TokenUsage]) -> TokenUsage:
        out = TokenUsage()
        for usage in by_model.values():
            out += usage
        return out


Grouping = Literal["user", "kind", "day", "model"]


@dataclass(frozen=True)
class ReportRow:
    key: str
    model: str
    calls: int
    tokens: TokenUsage


def _sums() -> list[sa.ColumnElement[Any]]:
    t = usage_records.c
    return [
        sa.func.count().label("calls"),
        sa.func.coalesce(sa.func.sum(t.prompt_tokens), 0).label("prompt"),
        sa.func.coalesce(sa.func.sum(t.cached_tokens), 0).label("cached"),
        sa.func.coalesce(sa.func.sum(t.completion_tokens), 0).label("completion"),
        # max() of a boolean: PostgreSQL has bool_or instead; an integer sum works on both.
        sa.func.coalesce(sa.func.sum(sa.cast(t.estimated, sa.Integer)), 0).label("estimated"),
    ]


def _usage(row: Any) -> TokenUsage:
    return TokenUsage(
        int(row.prompt), int(row.cached), int(row.completion), estimated=bool(row.estimated)
    )


class UsageStore:
    """Reads and writes `usage_records` on one engine."""

    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine

    async def write(self, rows: Sequence[UsageRow]) -> None:
        """`rows` in a transaction of their own (rows already stored are left alone)."""
        if rows:
            async with write_transaction(self.engine) as conn:
                await insert_rows(conn, rows)

    async def period(self, user_id: int, now: datetime | None = None) -> Period:
        """`user_id`'s usage today and this month (UTC), every agent and kind."""
        now = now or utcnow()
        t = usage_records.c
        today = (t.at >= day_start(now)).label("today")
        query = (
            sa.select(t.model, today, *_sums())
            .where(t.user_id == user_id, t.at >= month_start(now))
            .group_by(t.model, today)
        )
        async with self.engine.connect() as conn:
            rows = (await conn.execute(query)).all()
        day: dict[str, TokenUsage] = {}
        month: dict[str, TokenUsage] = {}
        for row in rows:
            usage = _usage(row)
            month[row.model] = month.get(row.model, TokenUsage()) + usage
            if row.today:
                day[row.model] = day.get(row.model, TokenUsage()) + usage
        return Period(day, month)

    async def window(
        self, since: datetime, kinds: Iterable[str], user_id: int | None = None
    ) -> tuple[int, int]:
        """Calls and tokens (prompt + completion) of `kinds` since `since`, of one user
        or of everyone."""
        t = usage_records.c
        query = sa.select(
            sa.func.count(),
            sa.func.coalesce(sa.func.sum(t.prompt_tokens + t.completion_tokens), 0),
        ).where(t.at >= since, t.kind.in_(list(kinds)))
        if user_id is not None:
            query = query.where(t.user_id == user_id)
        async with self.engine.connect() as conn:
            calls, tokens = (await conn.execute(query)).one()
        return int(calls), int(tokens)

    async def report(
        self, by: Grouping, since: datetime, until: datetime | None = None
    ) -> list[ReportRow]:
        """Calls and tokens since `since` (until `until`), grouped by `by` and model."""
        t = usage_records.c
        key: sa.ColumnElement[Any]
        if by == "day":
            key = _day(self.engine)
        elif by == "user":
            key = sa.cast(t.user_id, sa.String)
        elif by == "kind":
            key = t.kind
        else:
            key = t.model
        query = sa.select(key.label("key"), t.model, *_sums()).where(t.at >= since)
        if until is not None:
            query = query.where(t.at < until)
        query = query.group_by(key, t.model).order_by(key, t.model)
        async with self.engine.connect() as conn:
            rows = (await conn.execute(query)).all()
        return [ReportRow(str(r.key), r.model, int(r.calls), _usage(r)) for r in rows]


def _day(engine: AsyncEngine) -> sa.ColumnElement[Any]:
    at = usage_records.c.at
    if engine.dialect.name == "postgresql":
        return sa.cast(sa.func.timezone("UTC", at), sa.Date)
    return sa.func.date(at)  # SQLite keeps the UTC time as ISO text


# --- recording ----------------------------------------------------------------------


class UsageRecorder:
    """Where model calls report their usage: into the context's ledger (written with
    the work's result), else straight into the store; every row also goes to
    `observers` (the bot's Prometheus counters). Without a store (a client used on its
    own, in a test or a tool) rows only reach the observers."""

    def __init__(
        self,
        store: UsageStore | None = None,
        observers: Sequence[Callable[[UsageRow], None]] = (),
    ) -> None:
        self.store = store
        self.observers = list(observers)

    def row(
        self,
        kind: str,
        model: str,
        tokens: TokenUsage,
        *,
        user_id: int | None = None,
        agent_id: str | None = None,
    ) -> UsageRow:
        """A row of the calling context's user, agent and session (or the ones given)."""
        return UsageRow(
            kind=kind,
            model=model,
            tokens=tokens,
            user_id=user_id_from_context() if user_id is None else user_id,
            agent_id=agent_id_from_context() if agent_id is None else agent_id,
            session_id=session_id_from_context() if user_id is None else "",
        )

    async def record(self, *rows: UsageRow) -> None:
        """Never raises: a failure to account for a call must not fail the call."""
        for row in rows:
            for observe in self.observers:
                try:
                    observe(row)
                except Exception:  # a broken metric must not lose the row
                    log.exception("usage observer failed")
        if self.store is None:
            return
        ledger = _ledger.get()
        if ledger is not None:
            for row in rows:
                ledger.add(row)
            return
        try:
            await self.store.write(rows)
        except Exception as exc:
            log.warning("could not store the usage of %d model call(s): %s", len(rows), exc)

    @asynccontextmanager
    async def collecting(
        self, *, committed_on_success: bool = False, join: bool = False
    ) -> AsyncIterator[Ledger]:
        """A ledger for the work in this block: rows recorded inside go to it, code that
        commits the work writes them (`write_pending`), and whatever was not stored is
        written when the block ends. `committed_on_success`: a block that ends without
        an exception committed every transaction that wrote its rows (a compaction, a
        reflect review); otherwise the code says so (`Ledger.committed`). `join`: inside
        another block (a channel's, around a transcription and the turn), use its ledger,
        which settles. Background work never joins: a task inherits its creator's context,
        and its rows must not go to a ledger that settled long ago."""
        outer = _ledger.get()
        if join and outer is not None:
            yield outer
            return
        ledger = Ledger()
        token = _ledger.set(ledger)
        ok = False
        try:
            yield ledger
            ok = True
        finally:
            _ledger.reset(token)
            if ok and committed_on_success:
                ledger.committed()
            await self.settle(ledger)

    async def settle(self, ledger: Ledger) -> None:
        rows = ledger.unsettled()
        if not rows or self.store is None:
            return
        try:
            await self.store.write(rows)
        except Exception as exc:
            log.warning("could not store the usage of %d model call(s): %s", len(rows), exc)


def split_by_scope(
    tokens: TokenUsage, weights: Sequence[tuple[int, str, int]]
) -> list[tuple[int, str, TokenUsage]]:
    """One request's usage shared between the (user, agent) scopes of its inputs in
    proportion to their weights (estimated tokens): an embedding batch holds several
    users' messages. Rounding leftovers go to the heaviest scope."""
    per_scope: dict[tuple[int, str], int] = {}
    for user_id, agent_id, weight in weights:
        per_scope[(user_id, agent_id)] = per_scope.get((user_id, agent_id), 0) + max(1, weight)
    total = sum(per_scope.values())
    if total == 0:
        return []
    out: list[tuple[int, str, TokenUsage]] = []
    given = TokenUsage(estimated=tokens.estimated)
    for (user_id, agent_id), weight in sorted(per_scope.items(), key=lambda kv: kv[1]):
        share = TokenUsage(
            tokens.prompt * weight // total,
            tokens.cached_prompt * weight // total,
            tokens.completion * weight // total,
            tokens.estimated,
        )
        out.append((user_id, agent_id, share))
        given += share
    user_id, agent_id, last = out[-1]
    out[-1] = (
        user_id,
        agent_id,
        TokenUsage(
            last.prompt + tokens.prompt - given.prompt,
            last.cached_prompt + tokens.cached_prompt - given.cached_prompt,
            last.completion + tokens.completion - given.completion,
            tokens.estimated,
        ),
    )
    return out
