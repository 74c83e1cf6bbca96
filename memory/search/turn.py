"""The turn in progress, which a search asked while answering it leaves out.

While the model answers, the user's message is already stored (it is appended before
the model is called), and the search the model makes finds it first: it shares every
word of the question. So a `SearchQuery` with `in_turn` leaves out the session's last
user message and everything stored after it in that conversation (nothing, usually:
the turn's tool calls and answer are stored when it ends). Each source is asked for that
many more hits, so leaving them out never shortens the list.

The message before the turn has a second vector made with the next message
(memory/search/pairs.py), which is the question itself: that one vector does not count
(`quoting`), or meaning would find the question again through it.
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from memory.contract.types import SearchResult, Session

# A message's SearchResult.source_type (memory/search/lexical.py) is its vector's source.
from memory.search.pairs import PARTNERS
from memory.storage.history import conversations, messages, said_before

_IN_PROGRESS = sa.text(
    "SELECT m.id FROM messages m JOIN conversations c ON c.id = m.conversation_id "
    "WHERE c.session_id = :sid AND m.seq >= ("
    # Walked back from the end through (conversation_id, seq): max() would read every row
    # of a long conversation for its role.
    "SELECT u.seq FROM messages u WHERE u.conversation_id = c.id AND u.role = 'user' "
    "ORDER BY u.seq DESC LIMIT 1)"
)


async def in_progress(conn: AsyncConnection, session: Session) -> frozenset[str]:
    """The public ids of the messages of `session`'s turn in progress (module doc)."""
    rows = await conn.execute(_IN_PROGRESS, {"sid": session.id})
    return frozenset(str(i) for i in rows.scalars())


async def quoting(conn: AsyncConnection, session: Session) -> frozenset[str]:
    """The public id of the message whose pair quotes `session`'s turn in progress: the
    message said just before the turn's user message (the first of the pair,
    memory/search/semantic/sources.py MessageNextSource); none when the turn opens its
    conversation."""
    turn_start = (
        sa.select(said_before(messages))
        .join(conversations, conversations.c.id == messages.c.conversation_id)
        .where(conversations.c.session_id == session.id, messages.c.role == "user")
        .order_by(messages.c.seq.desc())
        .limit(1)
    )
    found = await conn.scalar(turn_start)
    return frozenset() if found is None else frozenset({str(found)})


def held(source: str, key: str, turn: frozenset[str]) -> bool:
    """Whether the item `key` of `source` (a result's, or a vector's) is one of `turn`'s
    messages."""
    return source in PARTNERS and key in turn


def without(results: list[SearchResult], turn: frozenset[str]) -> list[SearchResult]:
    """`results` but the turn's messages."""
    if not turn:
        return results
    return [r for r in results if not held(r.source_type, r.source_id, turn)]
