"""describe / expand: drilling back into a summary (parents contain it, children are
what it was built from).

`parent_ids` are the condensed summaries that contain a summary; `child_ids` the
summaries a condensed one was built from (a leaf's sources are messages, reached with
`expand`). Expanding a condensed summary returns its children, a leaf its source
messages, in order, within `token_cap` tokens.

Security: with a session, the summary must belong to a conversation of that session's
(user, agent) — the same scope as search — else NotFound, exactly as for an
id that does not exist, so an id alone reveals nothing. `session=None` is the operator.
"""

from __future__ import annotations

import re
from typing import TypeVar

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from memory.compaction.summarizer import truncate_to_tokens
from memory.contract.errors import InvalidArgument, NotFound
from memory.contract.types import (
    DescribeResult,
    ExpandChild,
    ExpandMessage,
    ExpandResult,
    Session,
)
from memory.storage.history import HistoryStore, conversations
from memory.text.tokens import estimate_tokens
from plugins.lcm.dag import LEAF, SummaryRecord, load_summaries, source_message_ids
from plugins.lcm.models import summaries

_T = TypeVar("_T", ExpandMessage, ExpandChild)
_ID = re.compile(r"sum_[0-9a-f]{1,32}")


class Explorer:
    def __init__(self, engine: AsyncEngine, history: HistoryStore) -> None:
        self.engine = engine
        self.history = history

    async def _owned(
        self, conn: AsyncConnection, summary_id: str, session: Session | None
    ) -> SummaryRecord:
        if not isinstance(summary_id, str) or not _ID.fullmatch(summary_id):
            raise NotFound(f"summary {summary_id!r} not found")
        query = sa.select(summaries.c.id).where(summaries.c.id == summary_id)
        if session is not None:
            query = query.join(
                conversations, conversations.c.id == summaries.c.conversation_id
            ).where(
                conversations.c.user_id == session.user_id,
                conversations.c.agent_id == session.agent_id,
            )
        if await conn.scalar(query) is None:
            raise NotFound(f"summary {summary_id!r} not found")
        records = await load_summaries(conn, [summary_id], with_edges=True)
        return records[summary_id]

    async def describe(self, summary_id: str, session: Session | None) -> DescribeResult:
        async with self.engine.connect() as conn:
            s = await self._owned(conn, summary_id, session)
        return DescribeResult(
            summary_id=s.id,
            kind=s.kind,
            depth=s.depth,
            content=s.content,
            earliest_at=s.earliest_at,
            latest_at=s.latest_at,
            descendant_count=s.descendant_count,
            token_count=s.token_count,
            parent_ids=list(s.parent_ids),
            child_ids=list(s.child_ids),
        )

    async def expand(
        self, summary_id: str, token_cap: int, session: Session | None
    ) -> ExpandResult:
        if token_cap < 1:
            raise InvalidArgument("token_cap must be at least 1")
        async with self.engine.connect() as conn:
            s = await self._owned(conn, summary_id, session)
            result = ExpandResult(summary_id=s.id)
            if s.kind == LEAF:
                ids = await source_message_ids(conn, s.id)
                loaded = await self.history.load_messages(conn, ids=ids)
                order = {mid: i for i, mid in enumerate(ids)}
                loaded.sort(key=lambda pair: order[pair[0].id])
                entries = [
                    ExpandMessage(
                        message_id=str(stored.id),
                        seq=stored.seq,
                        role=str(msg.role),
                        content=msg.text(),
                        token_count=stored.token_count,
                        created_at=stored.created_at,
                    )
                    for stored, msg in loaded
                ]
                result.messages, result.truncated = _within(entries, token_cap)
            else:
                kids = await load_summaries(conn, s.child_ids)
                entries_c = [
                    ExpandChild(c.id, c.kind, c.depth, c.content, c.token_count)
                    for c in (kids[i] for i in s.child_ids)
                ]
                result.children, result.truncated = _within(entries_c, token_cap)
        return result


def _within(entries: list[_T], cap: int) -> tuple[list[_T], bool]:
    """The longest prefix of `entries` within `cap` tokens; when not even the first fits,
    the first alone with its content cut to the cap (something useful, still within it)."""
    out: list[_T] = []
    used = 0
    for entry in entries:
        if used + entry.token_count > cap:
            if not out:
                entry.content = truncate_to_tokens(entry.content, cap)
                entry.token_count = estimate_tokens(entry.content)
                out.append(entry)
            return out, True
        used += entry.token_count
        out.append(entry)
    return out, False
