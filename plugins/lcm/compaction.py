"""Compaction: messages -> leaf summaries -> condensed summaries, without holding the
session's lock while the summarizer thinks.

Passes (seed "Compaction"):
- leaf: contiguous runs of message items outside the protected tail, cut into chunks of
  `leaf_chunk_size` messages (oldest first; a remainder shorter than that waits for more)
  -> one leaf summary each, depth 0, target a third of the source tokens;
- condensed: contiguous runs of >= `condensed_min` summaries of the same depth, cut into
  groups of at most CONDENSED_MAX_CHILDREN -> one condensed summary each, depth + 1,
  target half of the source tokens. The cap keeps a summarizer's input bounded however
  long the backlog.
A round is one leaf pass then one condensed pass (the new leaves can condense at once).
`incremental` is one round; `full` repeats rounds until one changes nothing (at most
`max_full_rounds`), each planned from the items as the previous one left them.

Protected tail: the newest `keep_tail` message items and everything after the oldest of
them. A chunk never separates an assistant's tool calls from their results (the tail is
widened backwards, a chunk forwards), so no assembled window ever starts at an orphaned
tool result.

Concurrency: a round's whole plan (which items, the summarizer calls, even condensing the
new leaves) is made from short read transactions, without the session's lock. Only then
does `apply` take `session_transaction` and, in one short transaction, replay the plan
against the items actually there: every summary whose inputs are still consecutive context items
replaces them; one whose inputs moved (another compaction got there first) is skipped,
and so is everything built on it. Appends only ever add items after the last one, so they
never invalidate a plan, never wait for a summarizer, and are never lost.

Failure: within a round, a summarizer error propagates before anything of the round is
written. An incremental compaction is one round, so it leaves the session exactly as it
was (the caller logs it). A full one keeps the rounds already applied (each committed with
its changelog row, the context consistent and lossless) and raises CompactionIncomplete
carrying their result, so a long `/compact` on a flaky model makes progress and a second
run continues where it stopped; a failure in its first round raises the error itself.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from memory.compaction.goal import parts_to_reach, worth_compacting
from memory.compaction.summarizer import SummarizerError, condensed_target, leaf_target
from memory.contract.capabilities import Summarizer
from memory.contract.errors import CompactionIncomplete, StopRequested
from memory.contract.types import CompactionMode, CompactionResult, Role, Session, SummarizeOptions
from memory.storage.history import HistoryStore
from memory.text.sanitize import storable
from memory.text.transcript import render_transcript
from plugins.lcm import context_items as ci
from plugins.lcm.dag import (
    CONDENSED,
    LEAF,
    SummaryRecord,
    insert_summaries,
    load_summaries,
)
from plugins.lcm.models import context_items
from plugins.lcm.render import condensed_source
from plugins.lcm.settings import LcmSettings
from plugins.lcm.totals import ContextTotals

CONDENSED_MAX_CHILDREN = 4
_IN_CHUNK = 500  # ids per IN (...) list: far below every database's parameter limit

Key = tuple[str, int | str]


@dataclass
class _Node:
    """An item of the planned context: an existing item or a planned summary."""

    key: Key
    first_ordinal: int  # of the oldest existing item it stands for
    tokens: int
    role: str | None = None  # messages
    depth: int = -1  # summaries
    record: SummaryRecord | None = None  # summaries (existing or planned)

    @property
    def is_message(self) -> bool:
        return self.key[0] == "m"


@dataclass
class _Planned:
    record: SummaryRecord
    sources: list[Any]  # leaf: message ids; condensed: child summary ids (in order)
    inputs: list[Key]  # the context items it replaces, in order
    # The summary whose text the summarizer was shown as `previous`: if a forget replaced
    # it meanwhile, this summary may quote what was forgotten and must not land.
    previous: Key | None = None


@dataclass
class _Plan:
    summaries: list[_Planned] = field(default_factory=list)
    # Ordinal of every existing item the plan was made from, by key.
    ordinals: dict[Key, int] = field(default_factory=dict)


# Called inside the apply transaction with what it did, so a record of the compaction
# (the provider's changelog row) commits with it or not at all.
OnApplied = Callable[[AsyncConnection, Session, CompactionResult], Awaitable[None]]


class Compaction:
    def __init__(
        self,
        engine: AsyncEngine,
        history: HistoryStore,
        summarizer: Summarizer,
        settings: LcmSettings,
        on_applied: OnApplied | None = None,
    ) -> None:
        self.engine = engine
        self.history = history
        self.summarizer = summarizer
        self.settings = settings
        self.on_applied = on_applied
        self.totals = ContextTotals()  # fed by the provider's appends (see totals.py)

    # -- public -------------------------------------------------------------------

    async def needs_compaction(self, session: Session, threshold: int) -> bool:
        if threshold < 0:
            return False
        conv_id = await self.history.conversation_id(session.id)
        if conv_id is None:
            return False
        known = self.totals.take(conv_id)
        if known is not None:
            if known <= threshold:
                return False  # an upper bound of the real total, carried by our own appends
            seq = self.totals.last_seq(conv_id)
            if seq is not None and self.totals.waiting(conv_id, seq):
                return False  # over, but too few messages outside the tail for a chunk yet
        async with self.engine.connect() as conn:
            tokens, last_seq = await ci.context_size(conn, conv_id)
            self.totals.measured(conv_id, tokens, last_seq)
            if tokens <= threshold or self.totals.waiting(conv_id, last_seq):
                return False
            if self.settings.target_tokens <= 0:
                return True  # no hysteresis asked for: whatever a leaf chunk can take
            boundary = await ci.nth_newest_message_ordinal(conn, conv_id, self.settings.keep_tail)
            loose = await ci.message_tokens_before(conn, conv_id, boundary)
        # Hysteresis (memory/compaction/goal.py): a gap's worth of messages past the tail.
        return worth_compacting(tokens, threshold, self.settings.target_tokens, loose)

    async def compact(self, session: Session, mode: CompactionMode) -> CompactionResult:
        """Incremental: one round. Full: rounds until one changes nothing (at most
        `max_full_rounds`), each applied on its own as soon as it is planned, so a failure
        in round k keeps rounds 1..k-1 (raised as CompactionIncomplete carrying them)."""
        mode = CompactionMode(mode)
        started = time.monotonic()
        conv_id = await self.history.conversation_id(session.id)
        if conv_id is None:
            return CompactionResult()
        incremental = mode == CompactionMode.INCREMENTAL
        rounds = 1 if incremental else self.settings.max_full_rounds
        target = self.settings.target_tokens if incremental else 0
        total = CompactionResult()
        for _ in range(rounds):
            try:
                result = await self._round(session, conv_id, target)
            except CompactionIncomplete as part:  # stopped mid-round, its part applied
                _add(total, part.result)
                total.duration_s = time.monotonic() - started
                raise CompactionIncomplete(total, part.__cause__ or part) from part.__cause__
            except Exception as exc:
                if not total.changed:
                    raise  # nothing applied: the caller sees the failure itself
                total.duration_s = time.monotonic() - started
                raise CompactionIncomplete(total, exc) from exc
            if not result.changed:
                break  # nothing left, or another compaction got there first
            _add(total, result)
        if total.changed:
            total.duration_s = time.monotonic() - started
        else:  # "nothing to compact" still says how big the context is
            async with self.engine.connect() as conn:
                total.tokens_before = total.tokens_after = (await ci.context_size(conn, conv_id))[0]
        return total

    async def _round(self, session: Session, conv_id: int, target: int = 0) -> CompactionResult:
        """One leaf pass then one condensed pass over the items as they are now, applied
        in one transaction: all of it or (on any error) none of it. With a `target`, the
        leaf pass summarises only the oldest chunks that bring the context to it."""
        seq_before = self.totals.last_seq(conv_id)  # never above the seq the read sees
        nodes, context = await self._read_compactable(conv_id)
        plan = _Plan(ordinals={n.key: n.first_ordinal for n in nodes})
        try:
            planned = await self._leaf_pass(conv_id, nodes, plan, context, target)
            await self._condensed_pass(conv_id, planned, plan)
        except StopRequested as stop:
            # The operator stops a long compaction (Ctrl-C): the summaries made so far are
            # each valid on their own (a leaf replaces its run of messages, a condensed one
            # its children), so they are applied, not thrown away with the round.
            if not plan.summaries:
                raise
            try:
                result = await self._apply(session, plan)
            finally:
                self.totals.forget(conv_id)
            raise CompactionIncomplete(result, stop) from stop
        if not plan.summaries:
            if seq_before is not None:
                self.totals.nothing_until(conv_id, seq_before + self._messages_short(nodes))
            return CompactionResult()
        try:
            return await self._apply(session, plan)
        finally:
            self.totals.forget(conv_id)

    def _messages_short(self, nodes: Sequence[_Node]) -> int:
        """After a plan found nothing: how many more messages before a leaf chunk can form.
        Only the newest run of messages outside the tail grows (one message per message
        appended), and condensed groups need new leaves first."""
        run = 0
        for node in reversed(nodes):
            if not node.is_message:
                break
            run += 1
        return max(1, self.settings.leaf_chunk_size - run)

    async def estimate_calls(self, session: Session) -> int:
        """About how many summarizer calls a full compaction of `session` would make now:
        its leaf chunks, then the condensed groups they and the leaves already there would
        form, level by level (an operator's progress bar total; never exact)."""
        conv_id = await self.history.conversation_id(session.id)
        if conv_id is None:
            return 0
        nodes, _ = await self._read_compactable(conv_id)
        leaves = len(self._leaf_chunks(nodes))
        calls, level = leaves, leaves + sum(1 for n in nodes if n.depth == 0)
        least = self.settings.condensed_min
        while leaves and level >= least:
            level = -(-level // max(CONDENSED_MAX_CHILDREN, least))
            calls += level
        return calls

    # -- reading (no lock) ----------------------------------------------------------

    async def _read_compactable(self, conv_id: int) -> tuple[list[_Node], int]:
        """The items outside the protected tail, oldest first, and the context's tokens."""
        async with self.engine.connect() as conn:
            context = await ci.context_tokens(conn, conv_id)
            boundary = await ci.nth_newest_message_ordinal(conn, conv_id, self.settings.keep_tail)
            items = await ci.items_up_to(conn, conv_id, boundary)
            if boundary is not None:
                # The protected tail starts at `boundary`, widened back past tool results
                # so that it also holds the assistant message that called them.
                first = items.pop()
                while items and first.role == Role.TOOL:
                    first = items.pop()
            records = await load_summaries(conn, [i.summary_id for i in items if i.summary_id])
        nodes = []
        for item in items:
            record = records.get(item.summary_id) if item.summary_id else None
            nodes.append(
                _Node(
                    key=item.key,
                    first_ordinal=item.ordinal,
                    tokens=item.token_count,
                    role=item.role,
                    depth=item.depth if item.depth is not None else -1,
                    record=record,
                )
            )
        return nodes, context

    # -- planning (no lock; the summarizer runs here) ---------------------------------

    def _leaf_chunks(self, nodes: Sequence[_Node]) -> list[tuple[int, int]]:
        size = self.settings.leaf_chunk_size
        chunks: list[tuple[int, int]] = []
        i = 0
        while i < len(nodes):
            if not nodes[i].is_message:
                i += 1
                continue
            end = i
            while end < len(nodes) and nodes[end].is_message:
                end += 1
            start = i
            while end - start >= size:
                stop = start + size
                # Tool results stay with the call that asked for them.
                while stop < end and nodes[stop].role == Role.TOOL:
                    stop += 1
                chunks.append((start, stop))
                start = stop
            i = end
        return chunks

    def _condensed_groups(self, nodes: Sequence[_Node]) -> list[tuple[int, int]]:
        least = self.settings.condensed_min
        groups: list[tuple[int, int]] = []
        i = 0
        while i < len(nodes):
            if nodes[i].is_message:
                i += 1
                continue
            depth = nodes[i].depth
            end = i
            while end < len(nodes) and not nodes[end].is_message and nodes[end].depth == depth:
                end += 1
            start = i
            while end - start >= least:
                stop = min(start + max(CONDENSED_MAX_CHILDREN, least), end)
                groups.append((start, stop))
                start = stop
            i = end
        return groups

    async def _leaf_pass(
        self, conv_id: int, nodes: list[_Node], plan: _Plan, context: int = 0, target: int = 0
    ) -> list[_Node]:
        chunks = self._leaf_chunks(nodes)
        enough = parts_to_reach(
            context, target, (sum(n.tokens for n in nodes[a:b]) for a, b in chunks)
        )
        if enough is not None:
            chunks = chunks[:enough]
        if not chunks:
            return nodes
        out: list[_Node] = []
        pos = 0
        for start, stop in chunks:
            out.extend(nodes[pos:start])
            out.append(await self._summarize_leaf(conv_id, nodes[start:stop], out, plan))
            pos = stop
        out.extend(nodes[pos:])
        return out

    async def _condensed_pass(self, conv_id: int, nodes: list[_Node], plan: _Plan) -> list[_Node]:
        groups = self._condensed_groups(nodes)
        if not groups:
            return nodes
        out: list[_Node] = []
        pos = 0
        for start, stop in groups:
            out.extend(nodes[pos:start])
            out.append(await self._summarize_condensed(conv_id, nodes[start:stop], out, plan))
            pos = stop
        out.extend(nodes[pos:])
        return out

    async def _summarize_leaf(
        self, conv_id: int, chunk: Sequence[_Node], before: Sequence[_Node], plan: _Plan
    ) -> _Node:
        ids = [int(n.key[1]) for n in chunk]
        async with self.engine.connect() as conn:
            loaded = await self.history.load_messages(conn, ids=ids)
        source_tokens = sum(s.token_count for s, _ in loaded)
        opts = SummarizeOptions(
            is_condensed=False,
            depth=0,
            previous=_previous(before),
            target_tokens=leaf_target(source_tokens),
        )
        content = await self._summarize(render_transcript([m for _, m in loaded]), opts)
        record = SummaryRecord.new_leaf(conv_id, content, [s for s, _ in loaded])
        plan.summaries.append(
            _Planned(
                record, [s.id for s, _ in loaded], [n.key for n in chunk], _previous_key(before)
            )
        )
        return _Node(
            ("s", record.id), chunk[0].first_ordinal, record.token_count, depth=0, record=record
        )

    async def _summarize_condensed(
        self, conv_id: int, group: Sequence[_Node], before: Sequence[_Node], plan: _Plan
    ) -> _Node:
        children = [n.record for n in group]
        assert all(c is not None for c in children)
        kids: list[SummaryRecord] = [c for c in children if c is not None]
        depth = group[0].depth
        source_tokens = sum(c.token_count for c in kids)
        opts = SummarizeOptions(
            is_condensed=True,
            depth=depth,
            previous=_previous(before),
            target_tokens=condensed_target(source_tokens),
        )
        content = await self._summarize(condensed_source(kids), opts)
        record = SummaryRecord.new_condensed(conv_id, depth + 1, content, kids)
        plan.summaries.append(
            _Planned(record, [c.id for c in kids], [n.key for n in group], _previous_key(before))
        )
        return _Node(
            ("s", record.id),
            group[0].first_ordinal,
            record.token_count,
            depth=depth + 1,
            record=record,
        )

    async def _summarize(self, text: str, opts: SummarizeOptions) -> str:
        content = storable(await self.summarizer.summarize(text, opts) or "").strip()
        if not content:
            raise SummarizerError("the summarizer returned an empty summary")
        return content

    # -- applying (one short transaction under the session's lock) ----------------------

    async def _apply(self, session: Session, plan: _Plan) -> CompactionResult:
        async with self.history.session_transaction(session) as (conn, conv_id):
            window = _Window(await self._current_items(conn, conv_id, plan))
            applied = [
                p
                for p in plan.summaries
                if (p.previous is None or window.has(p.previous))
                and window.replace(p.inputs, p.record)
            ]
            if not applied:
                return CompactionResult()
            await insert_summaries(
                conn, [p.record for p in applied], {p.record.id: p.sources for p in applied}
            )
            removed = [it for it in window.original if it.key not in window.keys]
            added = window.new_top_level()
            await _delete_items(conn, conv_id, [it.ordinal for it in removed])
            if added:
                await conn.execute(
                    sa.insert(context_items),
                    [
                        {
                            "conversation_id": conv_id,
                            "ordinal": ordinal,
                            "message_id": None,
                            "summary_id": record.id,
                            "token_count": record.token_count,
                        }
                        for ordinal, record in added
                    ],
                )
            after = await ci.context_tokens(conn, conv_id)
            before = (
                after + sum(it.token_count for it in removed) - sum(r.token_count for _, r in added)
            )
            result = CompactionResult(
                leaf_summaries_created=sum(1 for p in applied if p.record.kind == LEAF),
                condensed_summaries_created=sum(1 for p in applied if p.record.kind == CONDENSED),
                messages_compacted=sum(len(p.sources) for p in applied if p.record.kind == LEAF),
                tokens_before=before,
                tokens_after=after,
            )
            if self.on_applied is not None:
                await self.on_applied(conn, session, result)
        return result

    async def _current_items(
        self, conn: AsyncConnection, conv_id: int, plan: _Plan
    ) -> list[ci.Item]:
        """The items now in the ordinal range the plan was made from."""
        ordinals = [
            plan.ordinals[k]
            for p in plan.summaries
            for k in [*p.inputs, p.previous]
            if k in plan.ordinals
        ]
        if not ordinals:
            return []
        return await ci.items_between(conn, conv_id, min(ordinals), max(ordinals))


def _add(total: CompactionResult, result: CompactionResult) -> None:
    """Fold one applied round into the compaction's result: counts add up, the context
    goes from before the first round to after the last."""
    if not total.changed:
        total.tokens_before = result.tokens_before
    total.leaf_summaries_created += result.leaf_summaries_created
    total.condensed_summaries_created += result.condensed_summaries_created
    total.messages_compacted += result.messages_compacted
    total.tokens_after = result.tokens_after


def _previous(nodes: Sequence[_Node]) -> str:
    """The summary just before a chunk, for the summarizer's continuity."""
    if nodes and nodes[-1].record is not None:
        return nodes[-1].record.content
    return ""


def _previous_key(nodes: Sequence[_Node]) -> Key | None:
    """The item `_previous` read its text from, if any."""
    if nodes and nodes[-1].record is not None:
        return nodes[-1].key
    return None


async def _delete_items(conn: AsyncConnection, conv_id: int, ordinals: list[int]) -> None:
    for i in range(0, len(ordinals), _IN_CHUNK):
        await conn.execute(
            sa.delete(context_items).where(
                context_items.c.conversation_id == conv_id,
                context_items.c.ordinal.in_(ordinals[i : i + _IN_CHUNK]),
            )
        )


@dataclass
class _Link:
    key: Key
    first_ordinal: int
    record: SummaryRecord | None = None  # set for summaries created by this plan
    prev: _Link | None = None
    next: _Link | None = None


class _Window:
    """The current context items of the plan's range as a linked list, on which the
    planned replacements are replayed (each O(its inputs))."""

    def __init__(self, items: list[ci.Item]) -> None:
        self.original = items
        self._by_key: dict[Key, _Link] = {}
        self.head: _Link | None = None
        prev: _Link | None = None
        for it in items:
            link = _Link(it.key, it.ordinal, prev=prev)
            if prev is None:
                self.head = link
            else:
                prev.next = link
            self._by_key[it.key] = link
            prev = link

    @property
    def keys(self) -> set[Key]:
        return set(self._by_key)

    def has(self, key: Key) -> bool:
        return key in self._by_key

    def replace(self, inputs: Sequence[Key], record: SummaryRecord) -> bool:
        """Swap `inputs` for `record` if they are still consecutive items, in order."""
        first = self._by_key.get(inputs[0])
        if first is None:
            return False
        link: _Link | None = first
        for key in inputs:
            if link is None or link.key != key:
                return False
            last = link
            link = link.next
        new = _Link(("s", record.id), first.first_ordinal, record, prev=first.prev, next=last.next)
        if first.prev is None:
            self.head = new
        else:
            first.prev.next = new
        if last.next is not None:
            last.next.prev = new
        for key in inputs:
            del self._by_key[key]
        self._by_key[new.key] = new
        return True

    def new_top_level(self) -> list[tuple[int, SummaryRecord]]:
        """(ordinal, summary) of every planned summary that ended up in the context."""
        out = []
        link = self.head
        while link is not None:
            if link.record is not None:
                out.append((link.first_ordinal, link.record))
            link = link.next
        return out
