"""A small, correct reference provider: messages in Python dicts, shared stores in SQL.

It proves the conformance kit before the real providers exist and gives the bot a
provider to test against. It is not for production: history lives in RAM and dies with
the process. Capabilities: the core contract, Searcher (naive substring / keyword
match), SessionManager, Reviewer and the shared stores (SharedStores, so profile, soul,
constraints, versions, changelog and snapshots are the real thing); with the config
flags `compactor` (default on: Compactor + Explorer, one leaf summary per compaction)
and `notes` (default on: an in-memory NoteStore).

Assembly (also the behaviour the bot relies on): the fresh tail always, then older items
newest-first while they fit the budget, stopping at the first that does not (the window
stays contiguous), returned chronologically. An assistant message with tool calls and
the tool results answering it are one unit, never split by the tail, the budget or a
compaction: a tool result without its call is rejected by OpenAI-compatible APIs.
"""

from __future__ import annotations

import asyncio
import copy
import itertools
import re
from dataclasses import dataclass, field
from datetime import datetime
from functools import cache
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine

from memory.compaction.summarizer import leaf_target, truncate_to_tokens
from memory.contract.capabilities import ProviderContext, Summarizer
from memory.contract.context import change_source_from_context
from memory.contract.errors import Conflict, InvalidArgument, NotFound, SessionArchived
from memory.contract.options import AppendOptions
from memory.contract.types import (
    ChangeEntry,
    CompactionMode,
    CompactionResult,
    DescribeResult,
    ExpandMessage,
    ExpandResult,
    ListOptions,
    Message,
    NoteEntry,
    NoteHit,
    NoteKind,
    Role,
    Scope,
    SearchMode,
    SearchQuery,
    SearchResult,
    SearchScope,
    Session,
    SessionInfo,
    SessionStats,
    SummarizeOptions,
    as_utc,
    utcnow,
)
from memory.search import window
from memory.search.text import ranked_terms, snippet
from memory.storage.db import write_transaction
from memory.storage.stores import SharedStores
from memory.text.sanitize import storable, storable_message
from memory.text.tokens import estimate_tokens, message_tokens
from memory.text.transcript import safe_start

TITLE_CHARS = 80
_WORD = re.compile(r"\w+")


@dataclass
class _Summary:
    id: str
    session_id: str
    user_id: int
    agent_id: str
    content: str
    message_indexes: list[int]
    created_at: datetime = field(default_factory=utcnow)


@dataclass
class _Conversation:
    session: Session
    info: SessionInfo
    messages: list[Message] = field(default_factory=list)
    # The context: an int is an index into `messages`, a str a summary id.
    items: list[int | str] = field(default_factory=list)
    compaction_lock: asyncio.Lock = field(default_factory=asyncio.Lock)


def _units(msgs: list[Message]) -> list[tuple[int, int]]:
    """[start, end) ranges of `msgs` that must stay together: a message plus the tool
    results that follow it."""
    bounds: list[tuple[int, int]] = []
    for i, msg in enumerate(msgs):
        if msg.role == Role.TOOL and bounds:
            bounds[-1] = (bounds[-1][0], i + 1)
        else:
            bounds.append((i, i + 1))
    return bounds


def _tail_start(msgs: list[Message], n: int) -> int:
    """Index where the newest `n` messages start, moved back to a unit boundary."""
    return safe_start(msgs, len(msgs) - max(n, 0))


def _searched(conv: _Conversation, session: Session, query: SearchQuery) -> int:
    """How many of `conv`'s messages `query` searches: a search made while answering
    leaves the turn in progress out (the session's last user message and what follows)."""
    users = [i for i, m in enumerate(conv.messages) if m.role == "user"]
    if query.in_turn and conv.session.id == session.id and users:
        return users[-1]
    return len(conv.messages)


class ReferenceProvider(SharedStores):
    """Core contract + Searcher + SessionManager + Reviewer + shared stores."""

    name = "reference"

    def __init__(
        self,
        engine: AsyncEngine,
        summarizer: Summarizer | None = None,
        *,
        agent_id: str = "default",
        keep_tail: int = 20,
    ) -> None:
        self.engine = engine
        self.summarizer = summarizer
        self.agent_id = agent_id
        self.keep_tail = keep_tail
        self._conversations: dict[str, _Conversation] = {}
        self._summaries: dict[str, _Summary] = {}
        self._infos: dict[str, SessionInfo] = {}
        # (agent_id, user_id) -> notes book; used only by NotesReference.
        self._notes: dict[tuple[str, int], dict[str, Any]] = {}
        self.closed = False

    # -- core -------------------------------------------------------------------

    def _conversation(self, session: Session) -> _Conversation:
        if not isinstance(session, Session) or not session.id:
            raise InvalidArgument("a session with a non-empty id is required")
        conv = self._conversations.get(session.id)
        if conv is None:
            now = utcnow()
            info = self._infos.get(session.id) or SessionInfo(
                id=session.id,
                agent_id=session.agent_id,
                user_id=session.user_id,
                channel=session.channel,
                created_at=now,
                last_active=now,
            )
            self._infos[session.id] = info
            conv = self._conversations[session.id] = _Conversation(session=session, info=info)
        return conv

    def _resolve(self, item: int | str, conv: _Conversation) -> Message:
        if isinstance(item, int):
            return copy.deepcopy(conv.messages[item])
        summary = self._summaries[item]
        return Message(
            role=Role.USER,
            content=f'<summary id="{summary.id}">\n{summary.content}\n</summary>',
            created_at=summary.created_at,
        )

    def _context(self, conv: _Conversation) -> list[Message]:
        return [self._resolve(item, conv) for item in conv.items]

    async def bootstrap(self, session: Session) -> None:
        self._conversation(session)

    async def append(
        self, session: Session, *msgs: Message, options: AppendOptions | None = None
    ) -> None:
        for msg in msgs:
            if not isinstance(msg, Message):
                raise InvalidArgument(f"append takes Message objects, got {type(msg).__name__}")
        options = options or AppendOptions()
        info = self._infos.get(session.id)
        if options.live_only and info is not None and info.archived:
            raise SessionArchived(f"session {session.id!r} is archived: nothing appended")
        if options.hook is not None and msgs:
            # History lives in RAM: the hook gets a transaction of its own, and the
            # messages land only once it committed.
            async with write_transaction(self.engine) as conn:
                await options.hook.run(conn)
        conv = self._conversation(session)
        # No await below: the whole call lands at once, in order.
        for msg in msgs:
            conv.items.append(len(conv.messages))
            # Cleaned as the SQL providers store it, so the kit holds them all alike.
            conv.messages.append(storable_message(copy.deepcopy(msg)))
            if not conv.info.title and msg.role == Role.USER and msg.content.strip():
                conv.info.title = " ".join(msg.content.split())[:TITLE_CHARS]
        if msgs:
            conv.info.last_active = utcnow()

    async def assemble(self, session: Session, budget: int, fresh_tail: int) -> list[Message]:
        conv = self._conversations.get(session.id)
        if conv is None:
            return []
        context = self._context(conv)
        # Summaries sit before every message, so counting the tail over all items only
        # reaches them when the tail covers the whole history.
        start = _tail_start(context, max(0, fresh_tail))
        room = budget - sum(message_tokens(m) for m in context[start:])
        for lo, hi in reversed([u for u in _units(context) if u[1] <= start]):
            cost = sum(message_tokens(m) for m in context[lo:hi])
            if cost > room:
                break
            room -= cost
            start = lo
        return context[start:]

    async def stats(self, session: Session) -> SessionStats:
        conv = self._conversations.get(session.id)
        if conv is None or not conv.messages:
            return SessionStats()
        return SessionStats(
            message_count=len(conv.messages),
            token_count=sum(message_tokens(m) for m in conv.messages),
            summary_count=sum(1 for s in self._summaries.values() if s.session_id == session.id),
            context_tokens=sum(message_tokens(m) for m in self._context(conv)),
            oldest_at=min(m.created_at for m in conv.messages),
            newest_at=max(m.created_at for m in conv.messages),
        )

    async def close(self) -> None:
        self.closed = True

    # -- Searcher ---------------------------------------------------------------

    def _visible(self, session: Session) -> list[_Conversation]:
        """The conversations a session may search: its user's, with its agent (the memory
        scope is the user, or the group)."""
        return [
            c
            for c in self._conversations.values()
            if c.session.user_id == session.user_id and c.session.agent_id == session.agent_id
        ]

    async def search(self, session: Session, query: SearchQuery) -> list[SearchResult]:
        if not isinstance(query.text, str):
            raise InvalidArgument("search text must be a string")
        limit = query.limit if query.limit > 0 else 20
        candidates: list[tuple[str, str, str, datetime]] = []
        for conv in self._visible(session):
            if query.scope != SearchScope.SUMMARIES:
                for i, m in enumerate(conv.messages[: _searched(conv, session, query)]):
                    if m.role != "tool":  # tool results are not searched
                        candidates.append(
                            ("message", f"{conv.session.id}:{i}", m.text(), m.created_at)
                        )
        if query.scope != SearchScope.MESSAGES:
            for s in self._summaries.values():
                if s.user_id == session.user_id and s.agent_id == session.agent_id:
                    candidates.append(("summary", s.id, s.content, s.created_at))

        dates = window.of(query)
        candidates = [c for c in candidates if dates.holds(c[3])]
        hits: list[SearchResult] = []
        # Ranked modes look for any non-stop word; with none, the text literally.
        text = storable(query.text)  # as the history it searches was stored
        terms = set() if query.mode == SearchMode.SUBSTRING else set(ranked_terms(text))
        if not terms:
            needle = text.casefold()
            if not needle.strip():
                return []
            for kind, sid, text, at in candidates:
                if needle in text.casefold():
                    hits.append(SearchResult(kind, sid, snippet(text, [needle]), 1.0, at))
        else:
            for kind, sid, text, at in candidates:
                words = _WORD.findall(text.casefold())
                matched = terms.intersection(words)
                if matched:
                    # Distinct terms first, then how often they occur.
                    score = len(matched) + sum(w in terms for w in words) / (len(words) + 1)
                    hits.append(SearchResult(kind, sid, snippet(text, sorted(matched)), score, at))
        hits.sort(key=lambda h: (h.score, as_utc(h.timestamp or utcnow())), reverse=True)
        return [self._placed(h) for h in hits[:limit]]

    def _placed(self, hit: SearchResult) -> SearchResult:
        """`hit` with the conversation it came from."""
        if hit.source_type == "message":
            hit.session_id = hit.source_id.rsplit(":", 1)[0]
        elif hit.source_id in self._summaries:
            hit.session_id = self._summaries[hit.source_id].session_id
        return hit

    # -- SessionManager ---------------------------------------------------------

    async def save_info(self, info: SessionInfo) -> None:
        if not info.id:
            raise InvalidArgument("session info needs an id")
        saved = copy.deepcopy(info)
        self._infos[info.id] = saved
        conv = self._conversations.get(info.id)
        if conv is not None:
            conv.info = saved

    async def load_info(self, session_id: str) -> SessionInfo:
        info = self._infos.get(session_id)
        if info is None:
            raise NotFound(f"no session {session_id!r}")
        return copy.deepcopy(info)

    async def list_info(self, opts: ListOptions) -> list[SessionInfo]:
        infos = [
            i
            for i in self._infos.values()
            if (not opts.agent_id or i.agent_id == opts.agent_id)
            and (opts.user_id is None or i.user_id == opts.user_id)
            and (opts.include_archived or not i.archived)
        ]
        infos.sort(key=lambda i: as_utc(i.last_active or i.created_at or utcnow()), reverse=True)
        infos = infos[max(0, opts.offset) :]
        if opts.limit > 0:
            infos = infos[: opts.limit]
        return copy.deepcopy(infos)

    async def load_history(self, session_id: str) -> list[Message]:
        conv = self._conversations.get(session_id)
        return copy.deepcopy(conv.messages) if conv else []

    # -- Reviewer ---------------------------------------------------------------

    async def build_review_context(self, session: Session, since: datetime | None) -> str:
        conv = self._conversations.get(session.id)
        if conv is None:
            return ""
        cutoff = as_utc(since) if since is not None else None
        recent = [m for m in conv.messages if cutoff is None or as_utc(m.created_at) > cutoff]
        if not recent:
            return ""
        parts: list[str] = []
        summaries = [s for s in self._summaries.values() if s.session_id == session.id]
        if summaries:
            parts.append("## Background (earlier summaries)")
            parts.extend(s.content for s in summaries)
            parts.append("")
        parts.append("## Conversation")
        parts.extend(f"[{m.role}] {m.text()}" for m in recent)
        return "\n".join(parts)


class CompactingReference(ReferenceProvider):
    """Compactor + Explorer: the messages outside the kept tail (after the last
    summary) become one leaf summary; the history itself is never touched."""

    _ids = itertools.count(1)

    async def needs_compaction(self, session: Session, threshold: int) -> bool:
        if threshold < 0:  # -1 disables automatic compaction
            return False
        return (await self.stats(session)).context_tokens > threshold

    async def compact(self, session: Session, mode: CompactionMode) -> CompactionResult:
        # `mode` makes no difference: one pass already compacts everything compactable.
        conv = self._conversations.get(session.id)
        if conv is None:
            return CompactionResult()
        async with conv.compaction_lock:
            context = self._context(conv)
            before = sum(message_tokens(m) for m in context)
            first = next((i for i, it in enumerate(conv.items) if isinstance(it, int)), None)
            end = _tail_start(context, self.keep_tail)
            if first is None or end - first < 2:
                return CompactionResult(tokens_before=before, tokens_after=before)
            if self.summarizer is None:
                raise InvalidArgument("this provider was created without a summarizer")
            run = list(conv.items[first:end])
            source = "\n".join(f"[{m.role}] {m.text()}" for m in context[first:end])
            target = leaf_target(estimate_tokens(source))
            text = await self.summarizer.summarize(source, SummarizeOptions(target_tokens=target))
            if estimate_tokens(text) > target * 3 // 2:
                text = truncate_to_tokens(text, target)
            summary = _Summary(
                id=f"sum_{next(self._ids):06d}",
                session_id=session.id,
                user_id=session.user_id,
                agent_id=session.agent_id,
                content=text,
                message_indexes=[i for i in run if isinstance(i, int)],
            )
            # Appends only add at the end, so the run is still where it was.
            self._summaries[summary.id] = summary
            conv.items[first:end] = [summary.id]
            after = sum(message_tokens(m) for m in self._context(conv))
        await self.write_changelog(
            ChangeEntry(
                user_id=session.user_id,
                agent_id=session.agent_id,
                scope=Scope.COMPACTION,
                action="compact",
                source=change_source_from_context(),
                session_id=session.id,
                after_text=f"{len(run)} messages -> {summary.id}",
            )
        )
        # The prompt's start was rewritten: the session's view of memory catches up.
        await self.advance_snapshot(session.id, session.user_id, session.agent_id)
        return CompactionResult(
            leaf_summaries_created=1,
            messages_compacted=len(run),
            tokens_before=before,
            tokens_after=after,
            summary=text,
        )

    def _owned_summary(self, summary_id: str, session: Session | None) -> _Summary:
        summary = self._summaries.get(summary_id)
        if summary is None or (
            session is not None
            and (summary.user_id, summary.agent_id) != (session.user_id, session.agent_id)
        ):
            raise NotFound(f"no summary {summary_id!r}")
        return summary

    def _summary_messages(self, summary: _Summary) -> list[Message]:
        conv = self._conversations[summary.session_id]
        return [conv.messages[i] for i in summary.message_indexes]

    async def describe(self, summary_id: str, session: Session | None) -> DescribeResult:
        summary = self._owned_summary(summary_id, session)
        msgs = self._summary_messages(summary)
        return DescribeResult(
            summary_id=summary.id,
            kind="leaf",
            depth=0,
            content=summary.content,
            earliest_at=min(m.created_at for m in msgs),
            latest_at=max(m.created_at for m in msgs),
            descendant_count=0,
            token_count=estimate_tokens(summary.content),
        )

    async def expand(
        self, summary_id: str, token_cap: int, session: Session | None
    ) -> ExpandResult:
        """The leaf's source messages in order, up to `token_cap` (<= 0: no cap)."""
        summary = self._owned_summary(summary_id, session)
        result = ExpandResult(summary_id=summary.id)
        used = 0
        for index, msg in zip(
            summary.message_indexes, self._summary_messages(summary), strict=True
        ):
            tokens = message_tokens(msg)
            if token_cap > 0 and used + tokens > token_cap:
                result.truncated = True
                break
            used += tokens
            result.messages.append(
                ExpandMessage(
                    message_id=f"{summary.session_id}:{index}",
                    seq=index,
                    role=msg.role,
                    content=msg.text(),
                    token_count=tokens,
                    created_at=msg.created_at,
                )
            )
        return result


class NotesReference(ReferenceProvider):
    """An in-memory NoteStore per (agent, user): names and aliases compared
    case-insensitively, search by shared words (not BM25: a reference, not a ranker)."""

    def _book(self, session: Session) -> dict[str, Any]:
        return self._notes.setdefault(
            (session.agent_id, session.user_id), {"entries": {}, "names": {}, "next": 1}
        )

    @staticmethod
    def _key(name: str) -> str:
        if not isinstance(name, str) or not name.strip():
            raise InvalidArgument("a note name must not be empty")
        return " ".join(name.split()).casefold()

    def _find(self, book: dict[str, Any], name: str) -> NoteEntry:
        entry_id = book["names"].get(self._key(name))
        if entry_id is None:
            raise NotFound(f"no note named {name!r}")
        entry: NoteEntry = book["entries"][entry_id]
        return entry

    @staticmethod
    def _free(book: dict[str, Any], key: str, owner: int | None = None) -> None:
        bound = book["names"].get(key)
        if bound is not None and bound != owner:
            raise Conflict(f"the name {key!r} is already used")

    async def note_add(
        self, session: Session, name: str, content: str, kind: NoteKind = NoteKind.NOTE
    ) -> NoteEntry:
        book = self._book(session)
        key = self._key(name)
        self._free(book, key)
        if not isinstance(content, str) or not content.strip():
            raise InvalidArgument("note content must not be empty")
        entry = NoteEntry(
            id=book["next"], name=" ".join(name.split()), content=storable(content),
            kind=NoteKind(kind), created_at=utcnow(),
        )  # fmt: skip
        book["next"] += 1
        book["entries"][entry.id] = entry
        book["names"][key] = entry.id
        return copy.deepcopy(entry)

    async def note_rename(self, session: Session, name: str, new_name: str) -> NoteEntry:
        book = self._book(session)
        entry = self._find(book, name)
        new_key = self._key(new_name)
        self._free(book, new_key, owner=entry.id)
        del book["names"][self._key(entry.name)]
        entry.aliases = [a for a in entry.aliases if self._key(a) != new_key]
        entry.name = " ".join(new_name.split())
        book["names"][new_key] = entry.id
        return copy.deepcopy(entry)

    async def note_alias(self, session: Session, name: str, alias: str) -> NoteEntry:
        book = self._book(session)
        entry = self._find(book, name)
        key = self._key(alias)
        self._free(book, key)
        entry.aliases.append(" ".join(alias.split()))
        book["names"][key] = entry.id
        return copy.deepcopy(entry)

    async def note_write(self, session: Session, name: str, content: str) -> NoteEntry:
        book = self._book(session)
        entry = self._find(book, name)
        if not isinstance(content, str) or not content.strip():
            raise InvalidArgument("note content must not be empty")
        entry.content = storable(content)
        return copy.deepcopy(entry)

    async def note_remove(self, session: Session, name: str) -> None:
        book = self._book(session)
        entry = self._find(book, name)
        for label in (entry.name, *entry.aliases):
            del book["names"][self._key(label)]
        del book["entries"][entry.id]

    async def note_get(self, session: Session, name: str) -> NoteEntry:
        return copy.deepcopy(self._find(self._book(session), name))

    async def note_list(self, session: Session) -> list[NoteEntry]:
        return copy.deepcopy(sorted(self._book(session)["entries"].values(), key=lambda e: e.id))

    async def note_search(self, session: Session, text: str, limit: int = 10) -> list[NoteHit]:
        terms = set(_WORD.findall(text.casefold())) if isinstance(text, str) else set()
        hits = []
        for entry in self._book(session)["entries"].values():
            words = _WORD.findall(f"{entry.name} {entry.content}".casefold())
            score = float(sum(w in terms for w in words))
            if score:
                hits.append(NoteHit(entry=copy.deepcopy(entry), score=score))
        hits.sort(key=lambda h: (-h.score, h.entry.id))
        return hits[: max(0, limit)]


@cache
def provider_class(compactor: bool, notes: bool) -> type[ReferenceProvider]:
    """The reference provider with the chosen optional capabilities (capabilities are
    discovered by method presence, so each combination is its own class)."""
    bases: list[type[ReferenceProvider]] = []
    if compactor:
        bases.append(CompactingReference)
    if notes:
        bases.append(NotesReference)
    if len(bases) == 1:
        return bases[0]
    if not bases:
        return ReferenceProvider
    return type("FullReference", tuple(bases), {})


def create(ctx: ProviderContext) -> ReferenceProvider:
    """Provider factory. Config keys: `keep_tail` (default 20), `compactor` and `notes`
    (booleans, default true)."""
    cls = provider_class(
        bool(ctx.config.get("compactor", True)), bool(ctx.config.get("notes", True))
    )
    return cls(
        ctx.engine,
        ctx.summarizer,
        agent_id=ctx.agent_id,
        keep_tail=int(ctx.config.get("keep_tail", 20)),
    )
