"""The `simple` memory provider: handoff compaction over the shared SQL history, plus the
single-file notes/archives memory of each (agent, user).

History lives in the shared tables (`memory.storage.history`), never deleted. A compaction asks
the summarizer for the structured handoff summary of everything before the last
`keep_tail` messages (and after the previous marker, whose summary it carries forward),
stores it as an Archive entry in the user's notes file and appends a compact marker. An
automatic one stops at the oldest messages that bring the context to `target_tokens`, and
runs only when a gap's worth of them is waiting (memory/compaction/goal.py): the carried
summary does not shrink, so summarising a message or two would not shrink the context.
Assemble replays from the latest marker: the summary as a user message, an assistant
acknowledgement, then the messages after it.

Budget priority in assemble: the fresh tail always, then the summary pair, then older
messages after the marker, newest first. Dropping a middle message loses less than
dropping the summary, which stands for everything before it.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
import weakref
from collections.abc import AsyncIterator
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from memory.compaction.goal import parts_to_reach, worth_compacting
from memory.compaction.summarizer import SummarizerError
from memory.contract.capabilities import ProviderContext, Summarizer
from memory.contract.errors import Conflict, InvalidArgument
from memory.contract.options import AppendOptions
from memory.contract.types import (
    CompactionMode,
    CompactionResult,
    ListOptions,
    Message,
    NoteEntry,
    NoteHit,
    NoteKind,
    Role,
    SearchQuery,
    SearchResult,
    SearchScope,
    Session,
    SessionStats,
    SummarizeOptions,
    utcnow,
)
from memory.search.lexical import MESSAGES
from memory.search.recall import Recall
from memory.search.semantic import semantic_search
from memory.search.text import snippet
from memory.storage.history import (
    HistoryStore,
    SessionCounts,
    SessionHistory,
    StoredMessage,
    messages,
)
from memory.storage.stores import SharedStores
from memory.text.sanitize import storable
from memory.text.tokens import estimate_tokens
from memory.text.transcript import (
    render_reviewed,
    render_transcript,
    safe_start,
    without_leading_results,
)
from plugins.simple import markers

if TYPE_CHECKING:
    from memory.contract.embedding import VectorHit
from plugins.simple.embedding_source import note_key
from plugins.simple.forgetting import SimpleForgetting
from plugins.simple.graph import SimpleGraph
from plugins.simple.maintenance import SimpleMaintenance
from plugins.simple.markers import Marker
from plugins.simple.notes_file import Add, Alias, Remove, Rename, Write
from plugins.simple.notes_store import NotesStore
from plugins.simple.settings import DEFAULT_KEEP_TAIL, DEFAULT_STORE_DIR

log = logging.getLogger(__name__)

# One compaction summarises at most this much source: a backlog larger than a model's
# context is compacted oldest-first over several compactions.
DEFAULT_MAX_SOURCE_TOKENS = 60_000
# Reflect reads the review context in one LLM call: keep its newest part within this.
MAX_REVIEW_TOKENS = 24000
PAGE = 256

SUMMARY_INTRO = (
    "The earlier part of this conversation was compacted. Its handoff summary follows "
    "(the full text is kept in memory as the archive note {name!r}).\n\n{summary}"
)
ACKNOWLEDGEMENT = (
    "Understood. I have the summary of our earlier conversation and will continue from it."
)


def _session_slug(session_id: str) -> str:
    slug = re.sub(r"[^a-z0-9]+", "-", session_id.casefold()).strip("-")
    return slug[:48].rstrip("-") or "session"


class SimpleProvider(
    SimpleMaintenance, SharedStores, SessionHistory, SimpleForgetting, SimpleGraph
):
    """Provider, Compactor, Searcher, NoteStore, SessionManager, Reviewer, the shared
    stores (profile, soul, constraints, versions, changelog, snapshots) and the operator's
    Exporter/IntegrityChecker and SummaryGraphReader for the compact markers."""

    name = "simple"

    def __init__(
        self,
        ctx: ProviderContext,
        *,
        store_dir: Path | str = DEFAULT_STORE_DIR,
        keep_tail: int = DEFAULT_KEEP_TAIL,
        max_source_tokens: int = DEFAULT_MAX_SOURCE_TOKENS,
        target_tokens: int = 0,
    ) -> None:
        if isinstance(keep_tail, bool) or not isinstance(keep_tail, int) or keep_tail < 0:
            raise InvalidArgument(f"memory.simple keep_tail must be >= 0, got {keep_tail!r}")
        self.engine = ctx.engine
        self.max_facts = ctx.max_facts
        self.summarizer: Summarizer = ctx.summarizer
        self.agent_id = ctx.agent_id
        self.keep_tail = keep_tail
        # What an automatic compaction brings the context down to (memory/compaction/goal.py).
        self.target_tokens = max(0, int(target_tokens))
        self.max_source_tokens = max(1, int(max_source_tokens))
        self.history = HistoryStore(ctx.engine)
        self.notes = NotesStore(Path(store_dir))
        # Semantic search (None when embeddings are off), for the hybrid search.
        self.embedder = ctx.embedder
        self.semantic = semantic_search(ctx)
        self._recall = Recall(ctx.engine, [MESSAGES], extra=self, semantic=self.semantic)
        self._embedding_sources: list[Any] | None = None
        self._with_next = ctx.embeddings_with_next
        # One compaction per session at a time in this process (a second /compact waits
        # and then finds nothing new); appends never wait for it.
        self._compacting: weakref.WeakValueDictionary[str, asyncio.Lock] = (
            weakref.WeakValueDictionary()
        )
        self._closed = False

    # ---- EmbeddingSources ----------------------------------------------------------

    def embedding_sources(self) -> list[Any]:
        """Messages (each with the next too, unless `embeddings.with_next` is off), notes
        and archives (memory/search/semantic/sources.py)."""
        if self._embedding_sources is None:
            from memory.search.semantic.sources import message_sources
            from plugins.simple.embedding_source import NotesSource

            self._embedding_sources = [
                *message_sources(self.engine, self._with_next),
                NotesSource(self.engine, self.notes, NoteKind.NOTE),
                NotesSource(self.engine, self.notes, NoteKind.ARCHIVE),
            ]
        return self._embedding_sources

    # ---- Provider ------------------------------------------------------------------

    async def bootstrap(self, session: Session) -> None:
        await self.history.bootstrap(session)

    async def append(
        self, session: Session, *msgs: Message, options: AppendOptions | None = None
    ) -> None:
        await self.history.append(session, *msgs, options=options)

    async def assemble(self, session: Session, budget: int, fresh_tail: int) -> list[Message]:
        async with self.engine.connect() as conn:
            conv_id = await self.history.conversation_id(session.id, conn)
            if conv_id is None:
                return []
            marker = await markers.latest(conn, conv_id)
            after = marker.through_seq if marker else 0
            prefix = _summary_pair(marker) if marker else []
            prefix_tokens = sum(estimate_tokens(m.text()) for m in prefix)

            picked: list[Message] = []  # newest first
            used = 0
            tail_open = fresh_tail > 0
            with_prefix: bool | None = None if prefix else False
            async for stored, msg in self._newest_first(conn, conv_id, after):
                # The fresh tail, extended back over tool results to their call.
                if tail_open and (len(picked) < fresh_tail or picked[-1].role == Role.TOOL):
                    picked.append(msg)
                    used += stored.token_count
                    continue
                tail_open = False
                if with_prefix is None:
                    with_prefix = used + prefix_tokens <= budget
                    used += prefix_tokens if with_prefix else 0
                if used + stored.token_count > budget:
                    break
                picked.append(msg)
                used += stored.token_count
            if with_prefix is None:
                with_prefix = used + prefix_tokens <= budget
        picked.reverse()
        # Cut by the budget, a call's results may have lost their call.
        picked = without_leading_results(picked)
        return (prefix if with_prefix else []) + picked

    async def stats(self, session: Session) -> SessionStats:
        async with self.engine.connect() as conn:
            conv_id = await self.history.conversation_id(session.id, conn)
            if conv_id is None:
                return SessionStats()
            n_markers = await markers.count(conn, conv_id)
            context = await self._context_tokens(conn, conv_id)
        count, tokens, oldest, newest = await self.history.message_stats(session)
        return SessionStats(
            message_count=count,
            token_count=tokens,
            summary_count=n_markers,
            context_tokens=context,
            oldest_at=oldest,
            newest_at=newest,
        )

    async def list_counts(self, opts: ListOptions) -> list[SessionCounts]:
        """`stats`' message and marker counts of every listed session, in one query."""
        return await self.history.list_counts(opts, markers.markers)

    async def close(self) -> None:
        if not self._closed:
            self._closed = True
            self.notes.close()

    # ---- Compactor -----------------------------------------------------------------

    async def needs_compaction(self, session: Session, threshold: int) -> bool:
        if threshold < 0:
            return False
        async with self.engine.connect() as conn:
            conv_id = await self.history.conversation_id(session.id, conn)
            if conv_id is None:
                return False
            context = await self._context_tokens(conn, conv_id)
            if context <= threshold:
                return False
            marker = await markers.latest(conn, conv_id)
            loose = await self._loose_tokens(conn, conv_id, marker.through_seq if marker else 0)
        # Hysteresis (memory/compaction/goal.py): never for a message or two past the
        # kept tail, which would summarise every turn without shrinking the context.
        return worth_compacting(context, threshold, self.target_tokens, loose)

    async def compact(
        self, session: Session, mode: CompactionMode = CompactionMode.INCREMENTAL
    ) -> CompactionResult:
        """Handoff compaction of everything before the kept tail; an incremental one
        (automatic) stops at the oldest messages that bring the context to
        `target_tokens` (memory/compaction/goal.py).

        Raises the summarizer's error (or SummarizerError for an empty summary) with the
        history untouched; Conflict when another process compacted the session meanwhile.
        """
        lock = self._compacting.get(session.id)
        if lock is None:
            lock = self._compacting[session.id] = asyncio.Lock()
        async with lock:
            target = self.target_tokens if mode == CompactionMode.INCREMENTAL else 0
            return await self._compact(session, target)

    async def _compact(self, session: Session, target: int = 0) -> CompactionResult:
        started = time.monotonic()
        async with self.engine.connect() as conn:
            conv_id = await self.history.conversation_id(session.id, conn)
            if conv_id is None:
                return CompactionResult()
            marker = await markers.latest(conn, conv_id)
            after = marker.through_seq if marker else 0
            rows = await self.history.load_messages(
                conn, (messages.c.conversation_id == conv_id) & (messages.c.seq > after)
            )
            n_markers = await markers.count(conn, conv_id)
        prefix_tokens = (
            sum(estimate_tokens(m.text()) for m in _summary_pair(marker)) if marker else 0
        )
        tokens_before = prefix_tokens + sum(s.token_count for s, _ in rows)
        cut = _source_cut(rows, len(rows) - self.keep_tail, self.max_source_tokens)
        previous_text = marker.summary if marker else ""
        previous = estimate_tokens(previous_text)

        def estimate(context: int, summarised: int) -> int:
            # The new summary carries the previous one forward: only the source shrinks.
            return (
                context - summarised + markers.handoff_target(summarised, previous_text) - previous
            )

        enough = parts_to_reach(
            tokens_before, target, (s.token_count for s, _ in rows[:cut]), estimate
        )
        if enough is not None:
            # Never end the source between a call and its results (the tail's start is safe).
            while enough < cut and rows[enough][1].role == Role.TOOL:
                enough += 1
            cut = min(cut, enough)
        if cut <= 0:
            return CompactionResult(tokens_before=tokens_before, tokens_after=tokens_before)
        chosen, tail = rows[:cut], rows[cut:]
        source_tokens = sum(s.token_count for s, _ in chosen)
        target = markers.handoff_target(source_tokens, previous_text)
        # The slow call, outside every lock: appends go on meanwhile.
        summary = await self.summarizer.summarize(
            render_transcript([m for _, m in chosen]),
            SummarizeOptions(
                handoff=True,
                previous=marker.summary if marker else "",
                target_tokens=target,
            ),
        )
        if not isinstance(summary, str) or not summary.strip():
            raise SummarizerError("empty summary response")
        summary = storable(summary.strip())
        archived_at = utcnow()
        base = f"archive-{_session_slug(session.id)}-{n_markers + 1}"
        archive = await self._add_archive(session, base, summary)
        through = chosen[-1][0].seq
        try:
            async with self.history.session_transaction(session) as (tx, tx_conv):
                now_latest = await markers.latest(tx, tx_conv)
                if (now_latest.id if now_latest else None) != (marker.id if marker else None):
                    raise Conflict("the session was compacted meanwhile; nothing changed")
                # A forget meanwhile (memory/storage/forgetting.py) rewrote the summary carried
                # forward or deleted a message summarised here: the summary just made
                # may quote what was forgotten.
                still = await tx.scalar(
                    sa.select(sa.func.count()).where(
                        messages.c.conversation_id == tx_conv,
                        messages.c.seq > after,
                        messages.c.seq <= through,
                    )
                )
                if (now_latest.summary if now_latest else "") != (
                    marker.summary if marker else ""
                ) or still != len(chosen):
                    raise Conflict("messages were forgotten meanwhile; nothing changed")
                await markers.insert(
                    tx,
                    tx_conv,
                    through_seq=through,
                    summary=summary,
                    archive_name=archive.name,
                    archived_at=archived_at,
                    messages_compacted=len(chosen),
                    source_tokens=source_tokens,
                )
                await self.record_compaction(tx, session, archive.name, summary)
        except BaseException:
            await self._drop_archive(session, archive.name)
            raise
        new_marker = Marker(0, through, summary, archive.name, archived_at)
        tokens_after = sum(estimate_tokens(m.text()) for m in _summary_pair(new_marker)) + sum(
            s.token_count for s, _ in tail
        )
        return CompactionResult(
            leaf_summaries_created=1,
            messages_compacted=len(chosen),
            tokens_before=tokens_before,
            tokens_after=tokens_after,
            duration_s=time.monotonic() - started,
            summary=summary,
        )

    async def _add_archive(self, session: Session, base: str, summary: str) -> NoteEntry:
        # The generated name may be taken (a note the agent named so); try the next one.
        for attempt in range(100):
            name = base if attempt == 0 else f"{base}-{attempt + 1}"
            try:
                entry = await self.notes.apply(
                    session.agent_id, session.user_id, Add(name, summary, NoteKind.ARCHIVE)
                )
            except Conflict:
                continue
            assert entry is not None
            return entry
        raise Conflict(f"no free archive name after {base!r}")

    async def _drop_archive(self, session: Session, name: str) -> None:
        try:
            await self.notes.apply(session.agent_id, session.user_id, Remove(name))
        except Exception:  # the compaction error matters more than this cleanup
            log.warning("could not remove archive %r of a failed compaction", name, exc_info=True)

    # ---- Searcher ------------------------------------------------------------------

    async def search(self, session: Session, query: SearchQuery) -> list[SearchResult]:
        """The user's messages (core's shared index, memory/search/recall.py) and their notes
        and archives, in one list: ranked modes merge BM25 scores, substring is newest
        first. Scope `summaries` means the archives, `messages` the history."""
        return await self._recall.search(session, query)

    async def search_extra(
        self, session: Session, text: str, terms: list[str], scope: SearchScope, limit: int
    ) -> list[SearchResult]:
        """Notes and archives for `Recall` (its `ExtraSource`): BM25 over `terms`, or
        `text` literally when `terms` is empty."""
        if scope == SearchScope.MESSAGES:
            return []
        kinds = {NoteKind.ARCHIVE} if scope == SearchScope.SUMMARIES else set(NoteKind)
        if terms:
            # Ask for more when filtering by kind, so the filter cannot starve the result.
            wanted = limit if len(kinds) == len(NoteKind) else limit * 4
            hits = await self.notes.search(
                session.agent_id, session.user_id, " ".join(terms), wanted
            )
            signal = "words"
        else:
            needle = text.casefold()
            hits = [
                NoteHit(e, 1.0)
                for e in reversed(await self.notes.entries(session.agent_id, session.user_id))
                if needle in e.content.casefold() or needle in e.name.casefold()
            ]
            signal = "substring"
        return [
            SearchResult(
                source_type="archive" if h.entry.kind == NoteKind.ARCHIVE else "note",
                source_id=h.entry.name,
                content=snippet(h.entry.content, terms or [text]),
                score=h.score,
                timestamp=h.entry.created_at,
                signals=(signal,),
            )
            for h in hits
            if h.entry.kind in kinds
        ][:limit]

    async def resolve_extra(
        self, session: Session, hits: list[VectorHit], needles: list[str]
    ) -> list[SearchResult]:
        """Notes and archives among semantic `hits` (keyed by `note_key`: a note
        rewritten since it was embedded no longer matches its old vector)."""
        wanted = {(h.source, h.key): h.score for h in hits}
        out = []
        for entry in await self.notes.entries(session.agent_id, session.user_id):
            source = "archive" if entry.kind == NoteKind.ARCHIVE else "note"
            score = wanted.get((source, note_key(entry)))
            if score is not None:
                out.append(
                    SearchResult(
                        source_type=source,
                        source_id=entry.name,
                        content=snippet(entry.content, needles),
                        score=score,
                        timestamp=entry.created_at,
                    )
                )
        return out

    # ---- NoteStore -----------------------------------------------------------------

    async def _apply(self, session: Session, op: Any) -> NoteEntry:
        entry = await self.notes.apply(session.agent_id, session.user_id, op)
        assert entry is not None
        return entry

    async def note_add(
        self, session: Session, name: str, content: str, kind: NoteKind = NoteKind.NOTE
    ) -> NoteEntry:
        try:
            note_kind = NoteKind(kind)
        except ValueError as exc:
            raise InvalidArgument(f"note kind must be Note or Archive, not {kind!r}") from exc
        return await self._apply(session, Add(name, content, note_kind))

    async def note_rename(self, session: Session, name: str, new_name: str) -> NoteEntry:
        return await self._apply(session, Rename(name, new_name))

    async def note_alias(self, session: Session, name: str, alias: str) -> NoteEntry:
        return await self._apply(session, Alias(name, alias))

    async def note_write(self, session: Session, name: str, content: str) -> NoteEntry:
        return await self._apply(session, Write(name, content))

    async def note_remove(self, session: Session, name: str) -> None:
        await self.notes.apply(session.agent_id, session.user_id, Remove(name))

    async def note_get(self, session: Session, name: str) -> NoteEntry:
        return await self.notes.get(session.agent_id, session.user_id, name)

    async def note_list(self, session: Session) -> list[NoteEntry]:
        return await self.notes.entries(session.agent_id, session.user_id)

    async def note_search(self, session: Session, text: str, limit: int = 10) -> list[NoteHit]:
        return await self.notes.search(session.agent_id, session.user_id, text, limit)

    # ---- Reviewer ------------------------------------------------------------------

    async def build_review_context(self, session: Session, since: datetime | None) -> str:
        """The latest summary as background, then the messages after `since` (after the
        latest marker when `since` is None), newest kept within MAX_REVIEW_TOKENS."""
        async with self.engine.connect() as conn:
            conv_id = await self.history.conversation_id(session.id, conn)
            if conv_id is None:
                return ""
            marker = await markers.latest(conn, conv_id)
            if since is not None:
                where = messages.c.created_at > since
                after = 0
            else:
                where = sa.true()
                after = marker.through_seq if marker else 0
            picked: list[tuple[int, Message]] = []
            used = 0
            async for stored, msg in self._newest_first(conn, conv_id, after, where):
                if picked and used + stored.token_count > MAX_REVIEW_TOKENS:
                    break
                picked.append((stored.id, msg))
                used += stored.token_count
        if not picked:
            return ""
        picked.reverse()
        # (ids beside their messages: the facts reflect records cite them)
        kept = without_leading_results([m for _, m in picked])
        picked = picked[len(picked) - len(kept) :]
        parts = []
        if marker is not None:
            parts.append(
                "<background>\nSummary of the conversation so far (from its latest "
                f"compaction):\n{marker.summary}\n</background>"
            )
        parts.append(f"<messages>\n{render_reviewed(picked)}\n</messages>")
        return "\n\n".join(parts)

    # ---- helpers -------------------------------------------------------------------

    async def _newest_first(
        self,
        conn: AsyncConnection,
        conv_id: int,
        after_seq: int,
        where: sa.ColumnElement[bool] | None = None,
    ) -> AsyncIterator[tuple[StoredMessage, Message]]:
        """Messages of the conversation with seq > after_seq, newest first, paged."""
        upper: int | None = None
        while True:
            cond = (messages.c.conversation_id == conv_id) & (messages.c.seq > after_seq)
            if upper is not None:
                cond = cond & (messages.c.seq < upper)
            if where is not None:
                cond = cond & where
            page = await self.history.load_messages(conn, cond, limit=PAGE, newest_first=True)
            for row in page:
                yield row
            if len(page) < PAGE:
                return
            upper = page[-1][0].seq

    async def _loose_tokens(self, conn: AsyncConnection, conv_id: int, after_seq: int) -> int:
        """Tokens of the messages after the marker and before the kept tail: what a
        compaction would summarise."""
        older = (
            sa.select(messages.c.token_count)
            .where(messages.c.conversation_id == conv_id, messages.c.seq > after_seq)
            .order_by(messages.c.seq.desc())
            .offset(self.keep_tail)
            .subquery()
        )
        total = await conn.scalar(sa.select(sa.func.coalesce(sa.func.sum(older.c.token_count), 0)))
        return int(total or 0)

    async def _context_tokens(self, conn: AsyncConnection, conv_id: int) -> int:
        """Tokens of everything assemble would replay with an unlimited budget."""
        marker = await markers.latest(conn, conv_id)
        after = marker.through_seq if marker else 0
        live = await conn.scalar(
            sa.select(sa.func.coalesce(sa.func.sum(messages.c.token_count), 0)).where(
                messages.c.conversation_id == conv_id, messages.c.seq > after
            )
        )
        prefix = sum(estimate_tokens(m.text()) for m in _summary_pair(marker)) if marker else 0
        return int(live or 0) + prefix


def _source_cut(rows: list[tuple[StoredMessage, Message]], cut: int, max_tokens: int) -> int:
    """How many of `rows` (oldest first) one compaction summarises: at most `cut` (the
    start of the kept tail), at most `max_tokens` of source so the summarizer's prompt
    stays within a model's context (at least one message, whatever its size; the rest
    waits for the next compaction), and never leaving a tool result without its call."""
    used = 0
    for i, (stored, _) in enumerate(rows[: max(cut, 0)]):
        used += stored.token_count
        if used > max_tokens and i > 0:
            cut = i
            break
    msgs = [m for _, m in rows]
    return safe_start(msgs, cut)


def _summary_pair(marker: Marker) -> list[Message]:
    """The compact marker as the model sees it: summary (user) + acknowledgement."""
    return [
        Message(
            Role.USER,
            SUMMARY_INTRO.format(name=marker.archive_name, summary=marker.summary),
            created_at=marker.archived_at,
        ),
        Message(Role.ASSISTANT, ACKNOWLEDGEMENT, created_at=marker.archived_at),
    ]
