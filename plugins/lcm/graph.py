"""The summary DAG of one conversation for the operator's console
(`memory.contract.graph.SummaryGraphReader`): every summary with its depth, time range and
source-message range, the parent -> child edges, and which summaries are in the context
now. A fixed number of queries however many summaries (500 is a long conversation)."""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from memory.contract.errors import NotFound
from memory.contract.graph import GraphNode, GraphNodeDetail, SummaryGraph
from memory.storage.history import HistoryStore, messages
from plugins.lcm.dag import _utc, load_summaries, source_message_ids
from plugins.lcm.models import context_items, summaries, summary_messages, summary_parents


class LcmGraph:
    """Mixin of the lcm provider (which has `engine` and `history`)."""

    engine: AsyncEngine
    history: HistoryStore

    async def summary_graph(self, session_id: str) -> SummaryGraph:
        async with self.engine.connect() as conn:
            conv_id = await self.history.conversation_id(session_id, conn)
            if conv_id is None:
                return SummaryGraph()
            rows = (
                await conn.execute(
                    sa.select(
                        summaries.c.id,
                        summaries.c.kind,
                        summaries.c.depth,
                        summaries.c.token_count,
                        summaries.c.earliest_at,
                        summaries.c.latest_at,
                        summaries.c.descendant_count,
                    )
                    .where(summaries.c.conversation_id == conv_id)
                    .order_by(summaries.c.depth, summaries.c.earliest_at, summaries.c.pk)
                )
            ).all()
            # Each leaf's message range, by seq: one grouped join over the leaves' sources.
            ranges = dict(
                (r[0], (r[1], r[2]))
                for r in (
                    await conn.execute(
                        sa.select(
                            summary_messages.c.summary_id,
                            sa.func.min(messages.c.seq),
                            sa.func.max(messages.c.seq),
                        )
                        .join(messages, messages.c.id == summary_messages.c.message_id)
                        .join(summaries, summaries.c.id == summary_messages.c.summary_id)
                        .where(summaries.c.conversation_id == conv_id)
                        .group_by(summary_messages.c.summary_id)
                    )
                ).all()
            )
            edges = [
                (p, c)
                for p, c in (
                    await conn.execute(
                        sa.select(summary_parents.c.summary_id, summary_parents.c.child_id)
                        .join(summaries, summaries.c.id == summary_parents.c.summary_id)
                        .where(summaries.c.conversation_id == conv_id)
                        .order_by(summary_parents.c.summary_id, summary_parents.c.ordinal)
                    )
                ).all()
            ]
            in_context = set(
                (
                    await conn.execute(
                        sa.select(context_items.c.summary_id).where(
                            context_items.c.conversation_id == conv_id,
                            context_items.c.summary_id.is_not(None),
                        )
                    )
                ).scalars()
            )
            count = await conn.scalar(
                sa.select(sa.func.max(messages.c.seq)).where(messages.c.conversation_id == conv_id)
            )
        _spread_ranges(ranges, edges)
        nodes = [
            GraphNode(
                id=r.id,
                kind=r.kind,
                depth=r.depth,
                token_count=r.token_count,
                earliest_at=_utc(r.earliest_at),
                latest_at=_utc(r.latest_at),
                first_seq=ranges.get(r.id, (None, None))[0],
                last_seq=ranges.get(r.id, (None, None))[1],
                descendant_count=r.descendant_count,
                in_context=r.id in in_context,
            )
            for r in rows
        ]
        return SummaryGraph(nodes=nodes, edges=edges, message_count=int(count or 0))

    async def summary_node(self, session_id: str, node_id: str) -> GraphNodeDetail:
        """One summary of the session with its edges and the message range under it (its
        leaves' sources, reached through the DAG by a recursive query)."""
        async with self.engine.connect() as conn:
            conv_id = await self.history.conversation_id(session_id, conn)
            owned = await conn.scalar(
                sa.select(summaries.c.id).where(
                    summaries.c.id == node_id, summaries.c.conversation_id == conv_id
                )
            )
            if conv_id is None or owned is None:
                raise NotFound(f"summary {node_id!r} not found in session {session_id!r}")
            record = (await load_summaries(conn, [node_id], with_edges=True))[node_id]
            below = sa.select(sa.literal(node_id).label("id")).cte("below", recursive=True)
            below = below.union_all(
                sa.select(summary_parents.c.child_id).where(
                    summary_parents.c.summary_id == below.c.id
                )
            )
            low, high = (
                await conn.execute(
                    sa.select(sa.func.min(messages.c.seq), sa.func.max(messages.c.seq))
                    .select_from(summary_messages)
                    .join(messages, messages.c.id == summary_messages.c.message_id)
                    .where(summary_messages.c.summary_id.in_(sa.select(below.c.id)))
                )
            ).one()
            in_context = await conn.scalar(
                sa.select(sa.func.count()).where(
                    context_items.c.conversation_id == conv_id,
                    context_items.c.summary_id == node_id,
                )
            )
            sources = await source_message_ids(conn, node_id) if record.kind == "leaf" else []
        node = GraphNode(
            id=record.id,
            kind=record.kind,
            depth=record.depth,
            token_count=record.token_count,
            earliest_at=record.earliest_at,
            latest_at=record.latest_at,
            first_seq=low,
            last_seq=high,
            descendant_count=record.descendant_count,
            in_context=bool(in_context),
        )
        return GraphNodeDetail(
            node=node,
            content=record.content,
            parent_ids=record.parent_ids,
            child_ids=record.child_ids,
            source_message_ids=sources,
        )


def _spread_ranges(
    ranges: dict[str, tuple[int | None, int | None]], edges: list[tuple[str, str]]
) -> None:
    """A condensed summary covers the union of its children's ranges: filled bottom-up
    (children before parents, as the edges allow)."""
    children: dict[str, list[str]] = {}
    for parent, child in edges:
        children.setdefault(parent, []).append(child)

    def cover(node: str, seen: frozenset[str] = frozenset()) -> tuple[int | None, int | None]:
        if node in ranges:
            return ranges[node]
        if node in seen:  # a cycle would be a fault; never loop on one
            return None, None
        spans = [cover(k, seen | {node}) for k in children.get(node, [])]
        lows = [lo for lo, _ in spans if lo is not None]
        highs = [hi for _, hi in spans if hi is not None]
        ranges[node] = (min(lows) if lows else None, max(highs) if highs else None)
        return ranges[node]

    for parent in children:
        cover(parent)
