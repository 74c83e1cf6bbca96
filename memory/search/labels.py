"""What a message hit says about why it was found, when its own words do not show it.

A message is indexed with the end of the message before it (its `context`, core
revision 0004), so a bare "noted" is found by the question it followed. Shown alone it
would read as a miss; so a hit that holds none of the query's words itself shows what
it came after: `noted (after: which puppy did we adopt?)`. "After", not "replying to":
the two messages are neighbours, which says nothing of a reply; a real reply says so in
its own text (a Telegram reply, live or imported, is stored as `[Ann, replying to Bob:
"…"]`, memory/text/replies.py), and is shown as stored.

Whether a hit holds a query word is decided by the index's own tokens (memory/search/
stems.py), so "adopted" holds "adopt" and "puppy" holds "puppies", as the index found them.
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from memory.contract.types import SearchResult
from memory.search import stems
from memory.search.text import snippet

MESSAGE = "message"
WORDS = "words"  # the signal of a hit found by its words (memory/search/recall.py)
OWN_CHARS, AFTER_CHARS = 200, 280

_PREVIOUS = sa.text(
    "SELECT m.id AS id, (SELECT p.content FROM messages p "
    "WHERE p.conversation_id = m.conversation_id AND p.seq < m.seq "
    "AND p.role <> 'tool' AND p.content <> '' ORDER BY p.seq DESC LIMIT 1) AS prev "
    "FROM messages m WHERE m.id IN :ids"
).bindparams(sa.bindparam("ids", expanding=True))


def after(own: str, previous: str, terms: list[str]) -> str:
    """The text of a hit found through the message before it (module doc)."""
    return f"{snippet(own, terms, OWN_CHARS)} (after: {snippet(previous, terms, AFTER_CHARS)})"


async def label_context_hits(
    conn: AsyncConnection, results: list[SearchResult], terms: list[str]
) -> None:
    """Each message hit of `results` holding none of `terms` itself shows the message it
    came after (module doc). One query for all of `results` (the few shown, after
    ranking)."""
    wanted = {tok for term in terms for tok in stems.query_tokens(term)}
    bare = {
        r.source_id: r
        for r in results
        if r.source_type == MESSAGE
        and WORDS in r.signals  # a hit by meaning alone shares no word by design
        and r.source_id.isdigit()
        and wanted.isdisjoint(stems.tokens(r.content))
    }
    if not bare:
        return
    rows = await conn.execute(_PREVIOUS, {"ids": [int(i) for i in bare]})
    for row in rows:
        result = bare.get(str(row.id))
        if result is not None and row.prev:
            result.content = after(result.content, row.prev, terms)
