"""simple's part of forgetting (memory/storage/forgetting.py has the shared part).

A marker's summary carries the previous one forward, so forgetting a message changes
the summary of the marker whose range held it and of every marker after it. Per
conversation:
1. Plan, without any lock: from the first affected marker on, each summary is made again
   from its remaining messages and the rebuilt summary before it (the summarizer's
   handoff, as a compaction makes it); a marker whose range has nothing left is dropped
   (the one before it covers the empty range), and a rebuilt marker ends at its last
   remaining message.
2. The archive notes of those markers are rewritten first (a dropped marker's to a line
   saying its messages were forgotten): the notes file is outside the database, and a
   crash after this step leaves archives that no longer quote the forgotten text beside
   a history that still holds it (the forget can simply be run again), never the
   reverse.
3. One transaction under the session's lock, if the markers are still as planned (else
   plan again): markers updated or dropped, the changelog rows of their compactions
   (which carry the summary) rewritten, the archives' old vectors, the messages and
   their index entries deleted, a content-free changelog row written.
4. Dropped markers' archive notes are removed.

Notes (not archives) that quote a forgotten message are not changed: they are the
user's or the agent's own words, shown in the preview and the report to keep or drop.
"""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from memory.compaction.summarizer import SummarizerError
from memory.contract.capabilities import Summarizer
from memory.contract.errors import Conflict, NotFound
from memory.contract.types import ChangeEntry, NoteKind, Scope, Session, SummarizeOptions
from memory.storage import forgetting as fg
from memory.storage.forgetting import Dependents, ErasureReport, ForgetReport, Owner
from memory.storage.history import HistoryStore, messages
from memory.storage.stores import changelog_table
from memory.text.sanitize import storable
from memory.text.transcript import render_transcript
from plugins.simple import markers
from plugins.simple.embedding_source import SOURCES
from plugins.simple.notes_file import Remove, Write
from plugins.simple.notes_store import NotesStore

log = logging.getLogger(__name__)

PLAN_ATTEMPTS = 3
FORGOTTEN_ARCHIVE = "The messages this archive summarised were forgotten."


@dataclass(frozen=True)
class _Row:
    id: int
    through_seq: int
    summary: str
    archive_name: str


@dataclass
class _Rebuilt:
    summary: str
    through_seq: int
    messages: int
    tokens: int


@dataclass
class _Plan:
    session: Session
    shape: tuple[tuple[int, int], ...]  # (marker id, through_seq) of every marker
    rebuilt: dict[int, _Rebuilt | None]  # marker id -> new summary (None: dropped)
    archives: dict[int, str]  # marker id -> its archive note's name


async def _markers(conn: AsyncConnection, conv_id: int) -> list[_Row]:
    rows = await conn.execute(
        sa.select(
            markers.markers.c.id,
            markers.markers.c.through_seq,
            markers.markers.c.summary,
            markers.markers.c.archive_name,
        )
        .where(markers.markers.c.conversation_id == conv_id)
        .order_by(markers.markers.c.id)
    )
    return [_Row(*r) for r in rows]


def _first_affected(rows: list[_Row], seqs: Sequence[int]) -> int | None:
    low = min(seqs)
    return next((i for i, r in enumerate(rows) if r.through_seq >= low), None)


class SimpleForgetting:
    """Mixed into `SimpleProvider`: the `Forgetter` capability."""

    engine: AsyncEngine
    history: HistoryStore
    summarizer: Summarizer
    notes: NotesStore

    if TYPE_CHECKING:  # the provider's, through SharedStores

        async def record_changelog(self, conn: AsyncConnection, entry: ChangeEntry) -> None: ...
        async def erase_stores(self, conn: AsyncConnection, user_id: int, agent_id: str) -> int: ...

    async def summary_sources(self, owner: Owner, summary_id: str) -> list[int]:
        raise NotFound(f"summary {summary_id!r} not found")

    async def _quoting_notes(
        self, owner: Owner, found: list[fg.ForgetItem], needles: Sequence[str]
    ) -> list[str]:
        quoted = await fg.quoted_texts(self.engine, found, needles)
        if not quoted:
            return []
        return [
            e.name
            for e in await self.notes.entries(owner.agent_id, owner.user_id)
            if e.kind == NoteKind.NOTE and any(q in e.content.casefold() for q in quoted)
        ]

    async def forget_dependents(
        self, owner: Owner, message_ids: Sequence[int], needles: Sequence[str] = ()
    ) -> Dependents:
        count = 0
        async with self.engine.connect() as conn:
            found = await fg.owned_items(conn, owner, message_ids)
            for conv_id, group in fg.by_conversation(found).items():
                rows = await _markers(conn, conv_id)
                first = _first_affected(rows, [i.seq for i in group])
                count += 0 if first is None else len(rows) - first
        quoting = await self._quoting_notes(owner, found, needles) if found else []
        return Dependents(summaries=count, quoting_notes=quoting)

    async def forget_messages(
        self, owner: Owner, message_ids: Sequence[int], needles: Sequence[str] = ()
    ) -> ForgetReport:
        async with self.engine.connect() as conn:
            found = await fg.owned_items(conn, owner, message_ids)
        if not found:
            return ForgetReport()
        total = ForgetReport(quoting_notes=await self._quoting_notes(owner, found, needles))
        return await fg.forget_each_conversation(
            found, functools.partial(self._forget_in, owner), total
        )

    async def _forget_in(
        self, owner: Owner, conv_id: int, group: list[fg.ForgetItem]
    ) -> ForgetReport:
        session = Session(group[0].session_id, owner.agent_id, owner.user_id)
        for _ in range(PLAN_ATTEMPTS):
            plan = await self._forget_plan(conv_id, session, group)
            await self._rewrite_archives(owner, plan)
            report = await self._forget_apply(owner, plan, [i.id for i in group])
            if report is not None:
                for marker_id, rebuilt in plan.rebuilt.items():
                    if rebuilt is None:
                        await self._remove_archive(owner, plan.archives[marker_id])
                return report
        raise Conflict("the conversation kept changing while forgetting; nothing was forgotten")

    async def _forget_plan(
        self, conv_id: int, session: Session, group: list[fg.ForgetItem]
    ) -> _Plan:
        gone = {i.id for i in group}
        async with self.engine.connect() as conn:
            rows = await _markers(conn, conv_id)
            shape = tuple((r.id, r.through_seq) for r in rows)
            first = _first_affected(rows, [i.seq for i in group])
            rebuilt: dict[int, _Rebuilt | None] = {}
            if first is None:
                return _Plan(session, shape, rebuilt, {})
            previous = rows[first - 1].summary if first else ""
            after = rows[first - 1].through_seq if first else 0
            for row in rows[first:]:
                remaining = [
                    (s, m)
                    for s, m in await self.history.load_messages(
                        conn,
                        (messages.c.conversation_id == conv_id)
                        & (messages.c.seq > after)
                        & (messages.c.seq <= row.through_seq),
                    )
                    if s.id not in gone
                ]
                after = row.through_seq
                if not remaining:
                    rebuilt[row.id] = None
                    continue
                tokens = sum(s.token_count for s, _ in remaining)
                summary = await self.summarizer.summarize(
                    render_transcript([m for _, m in remaining]),
                    SummarizeOptions(
                        handoff=True,
                        previous=previous,
                        target_tokens=markers.handoff_target(tokens, previous),
                    ),
                )
                if not isinstance(summary, str) or not summary.strip():
                    raise SummarizerError("empty summary response")
                previous = storable(summary.strip())
                rebuilt[row.id] = _Rebuilt(previous, remaining[-1][0].seq, len(remaining), tokens)
        archives = {r.id: r.archive_name for r in rows if r.id in rebuilt}
        return _Plan(session, shape, rebuilt, archives)

    async def _rewrite_archives(self, owner: Owner, plan: _Plan) -> None:
        for marker_id, rebuilt in plan.rebuilt.items():
            text = rebuilt.summary if rebuilt is not None else FORGOTTEN_ARCHIVE
            # An archive removed by hand has nothing of it left to rewrite.
            with contextlib.suppress(NotFound):
                await self.notes.apply(
                    owner.agent_id, owner.user_id, Write(plan.archives[marker_id], text)
                )

    async def _remove_archive(self, owner: Owner, name: str) -> None:
        with contextlib.suppress(NotFound):
            await self.notes.apply(owner.agent_id, owner.user_id, Remove(name))

    async def _forget_apply(
        self, owner: Owner, plan: _Plan, forgotten: list[int]
    ) -> ForgetReport | None:
        async with self.history.session_transaction(plan.session) as (conn, conv_id):
            rows = await _markers(conn, conv_id)
            if tuple((r.id, r.through_seq) for r in rows) != plan.shape:
                return None
            for marker_id, rebuilt in plan.rebuilt.items():
                mine = markers.markers.c.id == marker_id
                compaction = changelog_table.update().where(
                    changelog_table.c.user_id == owner.user_id,
                    changelog_table.c.agent_id == owner.agent_id,
                    changelog_table.c.session_id == plan.session.id,
                    changelog_table.c.scope == Scope.COMPACTION.value,
                    changelog_table.c.before_text == plan.archives[marker_id],
                )
                if rebuilt is None:
                    await conn.execute(markers.markers.delete().where(mine))
                    await conn.execute(compaction.values(after_text=FORGOTTEN_ARCHIVE))
                    continue
                await conn.execute(
                    markers.markers.update()
                    .where(mine)
                    .values(
                        summary=rebuilt.summary,
                        through_seq=rebuilt.through_seq,
                        messages_compacted=rebuilt.messages,
                        source_tokens=rebuilt.tokens,
                    )
                )
                await conn.execute(compaction.values(after_text=rebuilt.summary))
            await self._drop_archive_vectors(conn, owner, list(plan.archives.values()))
            report = ForgetReport(
                messages=await fg.delete_messages(conn, conv_id, forgotten),
                summaries_rebuilt=sum(1 for r in plan.rebuilt.values() if r is not None),
                summaries_removed=sum(1 for r in plan.rebuilt.values() if r is None),
            )
            await self.record_changelog(conn, fg.forget_entry(owner, plan.session.id, report))
        return report

    async def _drop_archive_vectors(
        self, conn: AsyncConnection, owner: Owner, names: list[str]
    ) -> None:
        """Every vector of these archives (keyed `<entry id>:<digest of its text>`), the
        ones of the text just replaced included."""
        ids = []
        for name in names:
            try:
                ids.append((await self.notes.get(owner.agent_id, owner.user_id, name)).id)
            except NotFound:
                continue
        source = SOURCES[NoteKind.ARCHIVE]
        for entry_id in ids:
            await conn.execute(
                fg.embeddings.delete().where(
                    fg.embeddings.c.source == source,
                    fg.embeddings.c.user_id == owner.user_id,
                    fg.embeddings.c.agent_id == owner.agent_id,
                    fg.embeddings.c.item_key.like(f"{entry_id}:%"),
                )
            )

    async def erase_owner(self, owner: Owner, by: str) -> ErasureReport:
        report = ErasureReport()
        async with fg.owner_transaction(self.engine, owner) as conn:
            owned = await fg.owned_conversations(conn, owner)
            conv_ids = list(owned)
            report.sessions = len(conv_ids)
            for chunk in fg.chunks(conv_ids):
                in_convs = markers.markers.c.conversation_id.in_(chunk)
                report.summaries += int(
                    await conn.scalar(sa.select(sa.func.count()).where(in_convs)) or 0
                )
                await conn.execute(markers.markers.delete().where(in_convs))
            report.messages = await fg.erase_history(conn, owner, conv_ids)
            report.changelog_rows = await self.erase_stores(conn, owner.user_id, owner.agent_id)
            await fg.run_erase_hooks(conn, owner, report)
            # The notes file goes right after the commit; counted here for the record.
            entries = await self.notes.entries(owner.agent_id, owner.user_id)
            report.notes = sum(1 for e in entries if e.kind == NoteKind.NOTE)
            await self.record_changelog(conn, fg.erasure_entry(owner, report, by))
        for session_id in owned.values():
            self.history.forget_cached(session_id)
        # After the commit: a crash before this line leaves the file, and erasing again
        # (the database part is then empty) removes it.
        await self.notes.erase(owner.agent_id, owner.user_id)
        return report
