"""Search hits grouped by the conversation they came from, for the model and for people.

A search covers every conversation of the user (each `/new` starts one, each imported
chat is one), so the same conversation used to be named on every hit it gave. Hits are
now listed under their conversation, once, with its real span: the dates of its first
and last messages (`SessionSpans`, else `Provider.stats`), not when it was created, which for an imported
chat is the day of the import. Groups come in the order of their best hit; hits keep
their order inside a group. Notes and archives belong to no conversation.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from datetime import datetime

from memory.actions.fitting import one_line
from memory.actions.spec import Call
from memory.contract.capabilities import SessionManager, SessionSpans
from memory.contract.errors import NotFound
from memory.contract.tracing import capability, unwrap
from memory.contract.types import SearchResult, minute_utc

TITLE_CHARS = 40
KEPT = {"note", "archive"}  # kept by the provider, outside every conversation


@dataclass
class Group:
    session_id: str  # "" for hits of no conversation (notes, archives)
    current: bool  # the conversation the search was made in
    title: str = ""
    first: datetime | None = None
    last: datetime | None = None
    hits: list[SearchResult] = field(default_factory=list)

    def span(self) -> str:
        """The dates of the conversation's first and last messages ("" when unknown)."""
        first, last = (minute_utc(t)[:10] if t else "" for t in (self.first, self.last))
        if not first:
            return ""
        return first if first == last or not last else f"{first} → {last}"

    def name(self) -> str:
        """The group's heading, without punctuation around it."""
        if not self.session_id:
            kept = all(h.source_type in KEPT for h in self.hits)
            return "notes and archives" if kept else "no known conversation"
        if self.current:
            return "this conversation"
        span = self.span()
        return f"conversation “{self.title or 'untitled'}”" + (f", {span}" if span else "")


async def by_conversation(c: Call, hits: list[SearchResult]) -> list[Group]:
    """`hits` grouped by conversation (module doc), each group described once."""
    groups: dict[str, Group] = {}
    for hit in hits:
        sid = hit.session_id
        if sid not in groups:
            groups[sid] = Group(sid, current=sid == c.session.id)
        groups[sid].hits.append(hit)
    named = [g for g in groups.values() if g.session_id and not g.current]
    sessions = capability(c.provider, SessionManager)
    # An optional protocol, outside the traced capabilities: asked of the provider itself.
    inner = unwrap(c.provider)
    dated = inner if isinstance(inner, SessionSpans) else None
    # One query for every group's dates: `stats` per group costs a pass over each
    # conversation's messages (20 of them: 170 ms at 100k messages).
    spans = await dated.spans([g.session_id for g in named]) if dated and named else {}
    for group in named:
        if sessions is not None:
            try:
                info = await sessions.load_info(group.session_id)
            except NotFound:
                pass
            else:
                group.title = one_line(info.title, TITLE_CHARS)
        if dated is not None:
            group.first, group.last = spans.get(group.session_id, (None, None))
            continue
        # The hit's conversation is the caller's own (a search's scope is its user's).
        stats = await c.provider.stats(dataclasses.replace(c.session, id=group.session_id))
        group.first, group.last = stats.oldest_at, stats.newest_at
    return list(groups.values())
