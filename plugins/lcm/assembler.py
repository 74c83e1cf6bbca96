"""The context window for one LLM call (seed "Context Assembly").

1. The fresh tail: the newest `fresh_tail` message items (and any summary between them),
   always included, even over budget. Widened backwards past tool results so that it
   starts with the assistant message that called them.
2. Older items newest-first while they fit the budget; the first that does not fit ends
   the window, so it stays contiguous (no hole in the middle of the story). An assistant
   message with tool calls and the results answering it are one unit.
3. Summaries become the seed's XML user message; the output is chronological. A summary
   right before a user message makes two user messages in a row: the bot merges them
   into one user turn when it sends the request (bot/model/alternation.py), as strict chat
   templates demand, so the context stays what is stored here.

Cost: items are read from the end backwards in pages (primary key (conversation_id,
ordinal)) and resolved page by page, so the work is proportional to the window returned
plus at most one page, whatever the length of the history.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from sqlalchemy.ext.asyncio import AsyncConnection

from memory.contract.types import Message, Role, utcnow
from memory.storage.history import HistoryStore
from memory.text.tokens import message_tokens
from plugins.lcm import context_items as ci
from plugins.lcm.dag import load_summaries
from plugins.lcm.render import summary_xml

FIRST_PAGE = 32
MAX_PAGE = 512


@dataclass
class _Entry:
    item: ci.Item
    message: Message
    tokens: int


class _Backwards:
    """Context items newest-first, each resolved to the message the model will see."""

    def __init__(self, conn: AsyncConnection, history: HistoryStore, conv_id: int) -> None:
        self.conn = conn
        self.history = history
        self.conv_id = conv_id
        self._buffer: deque[_Entry] = deque()
        self._before: int | None = None
        self._page = FIRST_PAGE
        self._exhausted = False

    async def next(self) -> _Entry | None:
        if not self._buffer and not self._exhausted:
            await self._fetch()
        return self._buffer.popleft() if self._buffer else None

    async def _fetch(self) -> None:
        page = await ci.page_with_messages(self.conn, self.conv_id, self._before, self._page)
        if len(page) < self._page:
            self._exhausted = True
        if not page:
            return
        self._before = page[-1][0].ordinal
        self._page = min(self._page * 2, MAX_PAGE)
        records = await load_summaries(
            self.conn, [i.summary_id for i, _ in page if i.summary_id], with_edges=True
        )
        for item, loaded in page:
            if loaded is not None:
                msg = loaded
            else:
                record = records[item.summary_id or ""]
                msg = Message(
                    role=Role.USER,
                    content=summary_xml(record),
                    created_at=record.latest_at or record.created_at or utcnow(),
                )
            self._buffer.append(_Entry(item, msg, message_tokens(msg)))


def _is_result(entry: _Entry) -> bool:
    return entry.item.is_message and entry.message.role == Role.TOOL


async def assemble_window(
    conn: AsyncConnection, history: HistoryStore, conv_id: int, budget: int, fresh_tail: int
) -> list[Message]:
    reader = _Backwards(conn, history, conv_id)
    tail: list[_Entry] = []  # newest first
    if fresh_tail > 0:
        seen = 0
        while (entry := await reader.next()) is not None:
            tail.append(entry)
            if entry.item.is_message:
                seen += 1
            if seen >= fresh_tail and not _is_result(entry):
                break
    remaining = max(budget, 0) - sum(e.tokens for e in tail)
    older: list[_Entry] = []  # newest first
    group: list[_Entry] = []  # tool results waiting for the call that produced them
    while (entry := await reader.next()) is not None:
        group.append(entry)
        if _is_result(entry):
            continue
        cost = sum(e.tokens for e in group)
        if cost > remaining:
            break
        remaining -= cost
        older.extend(group)
        group = []
    window = [e.message for e in reversed(older)] + [e.message for e in reversed(tail)]
    return _without_orphans(window)


def _without_orphans(msgs: list[Message]) -> list[Message]:
    """Safety net: drop any tool result whose call is not in the window. Compaction and
    the cuts above never produce one, but a model API rejects the whole request if one
    slips through (e.g. a history written by something else)."""
    answered: set[str] = set()
    out = []
    for m in msgs:
        answered.update(c.id for c in m.tool_calls)
        if m.role == Role.TOOL and (m.tool_call_id or "") not in answered:
            continue
        out.append(m)
    return out
