"""Each review leaves a changelog row (scope `reflect`, action `review`), whether it
changed anything or not: which session it read, the messages (ids, count, dates) it was
given, and what it decided ("no change", or the writes it made), with the model's last
words. Without it an operator saw reflect's model calls in the usage and, when nothing
changed, nothing else (issue #29).

The row's versions are the memory's version when the review started and when it ended:
the changes reflect made in between are the rows of that session with source reflect
in that interval (what `/memory review` shows the user, bot/jobs/reflect/review.py).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import UTC, datetime

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from memory.contract.capabilities import ChangelogWriter, Provider, VersionedProfileStore
from memory.contract.tracing import capability
from memory.contract.types import ChangeEntry, ChangeSource, Session, minute_utc
from memory.storage.history import conversations, messages

log = logging.getLogger(__name__)

SCOPE, ACTION = "reflect", "review"
NO_CHANGE = "no change"


@dataclass
class Read:
    """The new messages a review was given (after the session's watermark)."""

    count: int = 0
    first_id: int | None = None
    last_id: int | None = None
    first_at: datetime | None = None
    last_at: datetime | None = None

    def text(self, session_id: str, since: datetime | None) -> str:
        where = f"session {session_id}"
        after = f" after {minute_utc(since)}" if since else ""
        if not self.count:
            return f"{where}: no new messages{after}"
        ids = (
            f"message {self.first_id}"
            if self.first_id == self.last_id
            else f"messages {self.first_id}–{self.last_id}"
        )
        return (
            f"{where}: {self.count} new message(s){after}, {ids}, "
            f"{minute_utc(self.first_at)} to {minute_utc(self.last_at)}"
        )


@dataclass
class Run:
    """One review in progress: what it read, the version it started at, what it wrote."""

    session: Session
    since: datetime | None
    read: Read = field(default_factory=Read)
    version_before: int | None = None
    written: list[str] = field(default_factory=list)


async def begin(provider: Provider, engine: AsyncEngine, run: Run) -> None:
    """Note what the review reads and the version it starts at (best effort: a failed
    read leaves the row less precise, never the review undone)."""
    try:
        run.read = await _read(engine, run.session.id, run.since)
        versions = capability(provider, VersionedProfileStore)
        if versions is not None:
            run.version_before = await versions.memory_version(
                run.session.user_id, run.session.agent_id
            )
    except Exception:
        log.warning("reflect: could not note what session %s's review reads", run.session.id)


async def _read(engine: AsyncEngine, session_id: str, since: datetime | None) -> Read:
    where = [conversations.c.session_id == session_id, messages.c.role != "tool"]
    if since is not None:
        where.append(messages.c.created_at > since.astimezone(UTC))
    query = (
        sa.select(
            sa.func.count(),
            sa.func.min(messages.c.id),
            sa.func.max(messages.c.id),
            sa.func.min(messages.c.created_at),
            sa.func.max(messages.c.created_at),
        )
        .select_from(messages.join(conversations, conversations.c.id == messages.c.conversation_id))
        .where(*where)
    )
    async with engine.connect() as conn:
        row = (await conn.execute(query)).one()
    return Read(int(row[0] or 0), row[1], row[2], _utc(row[3]), _utc(row[4]))


def _utc(value: datetime | str | None) -> datetime | None:
    if isinstance(value, str):  # SQLite's aggregate of a datetime column is its text
        value = datetime.fromisoformat(value)
    return None if value is None else value.replace(tzinfo=value.tzinfo or UTC)


def decision(run: Run, answer: str, failed: str = "") -> str:
    """What the review decided, as the row's after text."""
    said = " ".join(answer.split())[:300]
    if failed:
        head = f"failed: {failed[:200]}"
        if run.written:
            head += f" ({len(run.written)} write(s) kept: {', '.join(run.written)})"
    elif run.written:
        head = f"{len(run.written)} change(s): {', '.join(run.written)}"
    else:
        head = NO_CHANGE
    return f"{head}\nmodel: {said}" if said else head


async def record(provider: Provider, run: Run, answer: str, failed: str = "") -> None:
    """The review's changelog row. Never raises: the review's outcome stands."""
    writer = capability(provider, ChangelogWriter)
    if writer is None:
        return
    s = run.session
    try:
        await writer.write_changelog(
            ChangeEntry(
                user_id=s.user_id,
                agent_id=s.agent_id,
                scope=SCOPE,
                action=ACTION,
                source=ChangeSource.REFLECT.value,
                session_id=s.id,
                version_before=run.version_before,
                before_text=run.read.text(s.id, run.since),
                after_text=decision(run, answer, failed),
            )
        )
    except Exception:
        log.warning("reflect: could not record the review of session %s", s.id, exc_info=True)
