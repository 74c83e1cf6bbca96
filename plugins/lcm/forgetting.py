"""lcm's part of forgetting (memory/storage/forgetting.py has the shared part): the summaries
built on a forgotten message are rebuilt from what remains, up the DAG.

Per conversation:
1. Plan, without any lock: the affected summaries are the leaves whose sources include a
   forgotten message and every summary above them. From the leaves up, each is
   re-summarised from its remaining sources (a leaf from its remaining messages, a
   condensed summary from its rebuilt or untouched children) through the summarizer, or
   removed when nothing remains under it.
2. Apply, in one transaction under the session's lock: if the affected summaries are
   still exactly as planned (a compaction may have built on them meanwhile: then plan
   again), the rebuilt summaries are inserted under NEW ids, the context items and
   parents' edges move to them, the old summaries, the messages, their parts, index
   entries and vectors are deleted, and a content-free changelog row is written.

Rebuilt summaries take new ids so that nothing planned from the old ones can land: a
compaction planned before the forget replays its plan against items that no longer
exist and skips it (plugins/lcm/compaction.py `_Window.replace`), instead of condensing
the old text back in. An old summary id then answers NotFound, like any forgotten id.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from memory.compaction.summarizer import SummarizerError, condensed_target, leaf_target
from memory.contract.capabilities import Summarizer
from memory.contract.errors import Conflict, NotFound
from memory.contract.types import ChangeEntry, Session, SummarizeOptions
from memory.storage import forgetting as fg
from memory.storage.forgetting import Dependents, ErasureReport, ForgetReport, Owner
from memory.storage.history import HistoryStore, conversations, messages
from memory.text.sanitize import storable
from memory.text.transcript import render_transcript
from plugins.lcm.dag import (
    LEAF,
    SummaryRecord,
    insert_summaries,
    load_summaries,
)
from plugins.lcm.models import context_items, summaries, summary_messages, summary_parents
from plugins.lcm.render import condensed_source

SUMMARY_SOURCE = "summary"  # plugins/lcm/embedding_source.py
PLAN_ATTEMPTS = 3

# (summary id, its ordered sources): what a plan was made from
Shape = tuple[tuple[str, tuple[int | str, ...]], ...]


@dataclass
class _Plan:
    conv_id: int
    session: Session
    shape: Shape
    rebuilt: dict[str, SummaryRecord | None]  # old id -> its replacement (None: removed)
    sources: dict[str, list[int | str]]  # new id -> its sources (message or child ids)
    low: int  # seq of the oldest forgotten message


async def _affected(
    conn: AsyncConnection, conv_id: int, low: int
) -> tuple[dict[str, SummaryRecord], dict[str, list[int | str]]]:
    """The summaries that may quote a message forgotten at seq `low` or later, with their
    sources: every leaf covering a message from `low` on (a compaction gives the
    summarizer the summary before the chunk "for continuity", so a later summary may
    repeat an earlier one), and everything above them."""
    leaves = set(
        (
            await conn.execute(
                sa.select(summary_messages.c.summary_id)
                .distinct()
                .join(messages, messages.c.id == summary_messages.c.message_id)
                .where(messages.c.conversation_id == conv_id, messages.c.seq >= low)
            )
        ).scalars()
    )
    affected, frontier = set(leaves), set(leaves)
    while frontier:
        parents = set(
            (
                await conn.execute(
                    sa.select(summary_parents.c.summary_id).where(
                        summary_parents.c.child_id.in_(sorted(frontier))
                    )
                )
            ).scalars()
        )
        frontier = parents - affected
        affected |= frontier
    records = await load_summaries(conn, affected)
    sources: dict[str, list[int | str]] = {sid: [] for sid in records}
    ids = sorted(records)
    for chunk in fg.chunks(ids):
        for sid, mid in await conn.execute(
            sa.select(summary_messages.c.summary_id, summary_messages.c.message_id)
            .where(summary_messages.c.summary_id.in_(chunk))
            .order_by(summary_messages.c.summary_id, summary_messages.c.ordinal)
        ):
            sources[sid].append(int(mid))
        for sid, child in await conn.execute(
            sa.select(summary_parents.c.summary_id, summary_parents.c.child_id)
            .where(summary_parents.c.summary_id.in_(chunk))
            .order_by(summary_parents.c.summary_id, summary_parents.c.ordinal)
        ):
            sources[sid].append(str(child))
    return records, sources


def _shape(sources: dict[str, list[int | str]]) -> Shape:
    return tuple(sorted((sid, tuple(src)) for sid, src in sources.items()))


class LcmForgetting:
    """Mixed into `LcmProvider`: the `Forgetter` capability."""

    engine: AsyncEngine
    history: HistoryStore
    summarizer: Summarizer

    if TYPE_CHECKING:  # the provider's, through SharedStores and LcmProvider

        async def record_changelog(self, conn: AsyncConnection, entry: ChangeEntry) -> None: ...
        async def erase_stores(self, conn: AsyncConnection, user_id: int, agent_id: str) -> int: ...
        def _forgot(self, conv_id: int, erased_session: str | None = None) -> None: ...

    async def summary_sources(self, owner: Owner, summary_id: str) -> list[int]:
        async with self.engine.connect() as conn:
            found = await conn.scalar(
                sa.select(summaries.c.id)
                .join(conversations, conversations.c.id == summaries.c.conversation_id)
                .where(
                    summaries.c.id == summary_id,
                    conversations.c.user_id == owner.user_id,
                    conversations.c.agent_id == owner.agent_id,
                )
            )
            if found is None:
                raise NotFound(f"summary {summary_id!r} not found")
            out: list[int] = []
            stack = [summary_id]
            while stack:
                sid = stack.pop()
                out += (
                    await conn.execute(
                        sa.select(summary_messages.c.message_id).where(
                            summary_messages.c.summary_id == sid
                        )
                    )
                ).scalars()
                stack += (
                    await conn.execute(
                        sa.select(summary_parents.c.child_id).where(
                            summary_parents.c.summary_id == sid
                        )
                    )
                ).scalars()
        return sorted(set(out))

    async def forget_dependents(
        self, owner: Owner, message_ids: Sequence[int], needles: Sequence[str] = ()
    ) -> Dependents:
        count = 0
        async with self.engine.connect() as conn:
            found = await fg.owned_items(conn, owner, message_ids)
            for conv_id, group in fg.by_conversation(found).items():
                records, _ = await _affected(conn, conv_id, min(i.seq for i in group))
                count += len(records)
        return Dependents(summaries=count)

    async def forget_messages(
        self, owner: Owner, message_ids: Sequence[int], needles: Sequence[str] = ()
    ) -> ForgetReport:
        async with self.engine.connect() as conn:
            found = await fg.owned_items(conn, owner, message_ids)
        return await fg.forget_each_conversation(found, functools.partial(self._forget_in, owner))

    async def _forget_in(
        self, owner: Owner, conv_id: int, group: list[fg.ForgetItem]
    ) -> ForgetReport:
        forgotten = [i.id for i in group]
        low = min(i.seq for i in group)
        session = Session(group[0].session_id, owner.agent_id, owner.user_id)
        for _ in range(PLAN_ATTEMPTS):
            plan = await self._forget_plan(conv_id, session, forgotten, low)
            report = await self._forget_apply(owner, plan, forgotten)
            if report is not None:
                self._forgot(conv_id)
                return report
        raise Conflict("the conversation kept changing while forgetting; nothing was forgotten")

    async def _forget_plan(
        self, conv_id: int, session: Session, forgotten: list[int], low: int
    ) -> _Plan:
        async with self.engine.connect() as conn:
            records, sources = await _affected(conn, conv_id, low)
            gone = set(forgotten)
            rebuilt: dict[str, SummaryRecord | None] = {}
            new_sources: dict[str, list[int | str]] = {}
            # Children before parents: a condensed summary is at its children's depth + 1.
            for old in sorted(records.values(), key=lambda r: (r.depth, r.id)):
                if old.kind == LEAF:
                    remaining = [m for m in sources[old.id] if m not in gone]
                    record = await self._rebuild_leaf(conn, old, [int(m) for m in remaining])
                    kept: list[int | str] = list(remaining)
                else:
                    kids: list[SummaryRecord] = []
                    for child in sources[old.id]:
                        cid = str(child)
                        if cid in rebuilt:
                            if rebuilt[cid] is not None:
                                kids.append(rebuilt[cid])  # type: ignore[arg-type]
                        else:
                            kids += (await load_summaries(conn, [cid])).values()
                    record = await self._rebuild_condensed(old, kids)
                    kept = [k.id for k in kids]
                rebuilt[old.id] = record
                if record is not None:
                    new_sources[record.id] = kept
        return _Plan(conv_id, session, _shape(sources), rebuilt, new_sources, low)

    async def _forget_summarize(self, text: str, opts: SummarizeOptions) -> str:
        content = storable(await self.summarizer.summarize(text, opts) or "").strip()
        if not content:
            raise SummarizerError("the summarizer returned an empty summary")
        return content

    async def _rebuild_leaf(
        self, conn: AsyncConnection, old: SummaryRecord, remaining: list[int]
    ) -> SummaryRecord | None:
        if not remaining:
            return None
        loaded = await self.history.load_messages(conn, ids=remaining)
        tokens = sum(s.token_count for s, _ in loaded)
        content = await self._forget_summarize(
            render_transcript([m for _, m in loaded]),
            SummarizeOptions(is_condensed=False, depth=0, target_tokens=leaf_target(tokens)),
        )
        return SummaryRecord.new_leaf(old.conversation_id, content, [s for s, _ in loaded])

    async def _rebuild_condensed(
        self, old: SummaryRecord, kids: list[SummaryRecord]
    ) -> SummaryRecord | None:
        if not kids:
            return None
        tokens = sum(k.token_count for k in kids)
        content = await self._forget_summarize(
            condensed_source(kids),
            SummarizeOptions(
                is_condensed=True, depth=old.depth - 1, target_tokens=condensed_target(tokens)
            ),
        )
        return SummaryRecord.new_condensed(old.conversation_id, old.depth, content, kids)

    async def _forget_apply(
        self, owner: Owner, plan: _Plan, forgotten: list[int]
    ) -> ForgetReport | None:
        """The plan in one transaction; None (nothing written) when the summaries it was
        made from changed meanwhile."""
        async with self.history.session_transaction(plan.session) as (conn, conv_id):
            _, sources = await _affected(conn, conv_id, plan.low)
            if _shape(sources) != plan.shape:
                return None
            new = [r for r in plan.rebuilt.values() if r is not None]
            await insert_summaries(conn, new, plan.sources)
            for old_id, record in plan.rebuilt.items():
                # By the primary key's conversation prefix: summary_id has no index.
                items = (context_items.c.conversation_id == conv_id) & (
                    context_items.c.summary_id == old_id
                )
                if record is None:
                    await conn.execute(context_items.delete().where(items))
                else:
                    await conn.execute(
                        context_items.update()
                        .where(items)
                        .values(summary_id=record.id, token_count=record.token_count)
                    )
            old_ids = sorted(plan.rebuilt)
            for chunk in fg.chunks(old_ids):
                await conn.execute(
                    summary_parents.delete().where(summary_parents.c.summary_id.in_(chunk))
                )
                await conn.execute(
                    summary_messages.delete().where(summary_messages.c.summary_id.in_(chunk))
                )
                await conn.execute(summaries.delete().where(summaries.c.id.in_(chunk)))
            await fg.delete_vectors(conn, SUMMARY_SOURCE, old_ids, owner)
            for chunk in fg.chunks(forgotten):
                await conn.execute(
                    context_items.delete().where(
                        context_items.c.conversation_id == conv_id,
                        context_items.c.message_id.in_(chunk),
                    )
                )
            report = ForgetReport(
                messages=await fg.delete_messages(conn, conv_id, forgotten),
                summaries_rebuilt=len(new),
                summaries_removed=len(plan.rebuilt) - len(new),
            )
            await self.record_changelog(conn, fg.forget_entry(owner, plan.session.id, report))
        return report

    async def erase_owner(self, owner: Owner, by: str) -> ErasureReport:
        report = ErasureReport()
        async with fg.owner_transaction(self.engine, owner) as conn:
            owned = await fg.owned_conversations(conn, owner)
            conv_ids = list(owned)
            report.sessions = len(conv_ids)
            for chunk in fg.chunks(conv_ids):
                ids = sa.select(summaries.c.id).where(summaries.c.conversation_id.in_(chunk))
                report.summaries += int(
                    await conn.scalar(
                        sa.select(sa.func.count()).where(summaries.c.conversation_id.in_(chunk))
                    )
                    or 0
                )
                await conn.execute(
                    context_items.delete().where(context_items.c.conversation_id.in_(chunk))
                )
                await conn.execute(
                    summary_parents.delete().where(summary_parents.c.summary_id.in_(ids))
                )
                await conn.execute(
                    summary_messages.delete().where(summary_messages.c.summary_id.in_(ids))
                )
                await conn.execute(summaries.delete().where(summaries.c.conversation_id.in_(chunk)))
            report.messages = await fg.erase_history(conn, owner, conv_ids)
            report.changelog_rows = await self.erase_stores(conn, owner.user_id, owner.agent_id)
            await fg.run_erase_hooks(conn, owner, report)
            await self.record_changelog(conn, fg.erasure_entry(owner, report, by))
        for conv_id, session_id in owned.items():
            self._forgot(conv_id, session_id)
        return report
