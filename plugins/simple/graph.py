"""simple's compaction markers as a graph for the operator's console
(`memory.summary_graph.SummaryGraphReader`): one node per handoff summary, no edges (each
carries the one before it forward, and only the newest is in the context). Its archive
in the user's notes file bears the marker's `archive_name`."""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from memory.errors import NotFound
from memory.history import HistoryStore, messages
from memory.summary_graph import GraphNode, GraphNodeDetail, SummaryGraph
from memory.types import as_utc
from plugins.simple.markers import markers

m2 = markers.alias("earlier")


class SimpleGraph:
    """Mixin of the simple provider (which has `engine` and `history`)."""

    engine: AsyncEngine
    history: HistoryStore

    async def _marker_rows(self, session_id: str) -> tuple[list[sa.Row], int]:
        """The markers, each with the time range of the messages it newly covers."""
        async with self.engine.connect() as conn:
            conv_id = await self.history.conversation_id(session_id, conn)
            if conv_id is None:
                return [], 0
            previous = (
                sa.select(sa.func.coalesce(sa.func.max(m2.c.through_seq), 0))
                .where(m2.c.conversation_id == conv_id, m2.c.id < markers.c.id)
                .scalar_subquery()
            )
            covered = sa.and_(
                messages.c.conversation_id == conv_id,
                messages.c.seq > previous,
                messages.c.seq <= markers.c.through_seq,
            )
            rows = (
                await conn.execute(
                    sa.select(
                        markers,
                        sa.select(sa.func.min(messages.c.created_at))
                        .where(covered)
                        .scalar_subquery()
                        .label("earliest_at"),
                        sa.select(sa.func.max(messages.c.created_at))
                        .where(covered)
                        .scalar_subquery()
                        .label("latest_at"),
                    )
                    .where(markers.c.conversation_id == conv_id)
                    .order_by(markers.c.id)
                )
            ).all()
            count = await conn.scalar(
                sa.select(sa.func.max(messages.c.seq)).where(messages.c.conversation_id == conv_id)
            )
        return list(rows), int(count or 0)

    @staticmethod
    def _nodes(rows: list[sa.Row]) -> list[GraphNode]:
        nodes, first = [], 1
        for i, r in enumerate(rows):
            nodes.append(
                GraphNode(
                    id=f"marker-{r.id}",
                    kind="marker",
                    depth=0,
                    token_count=max(1, (len(r.summary) + 3) // 4),
                    earliest_at=as_utc(r.earliest_at),
                    latest_at=as_utc(r.latest_at),
                    first_seq=first,
                    last_seq=r.through_seq,
                    descendant_count=r.messages_compacted,
                    in_context=i == len(rows) - 1,
                )
            )
            first = r.through_seq + 1
        return nodes

    async def summary_graph(self, session_id: str) -> SummaryGraph:
        rows, count = await self._marker_rows(session_id)
        return SummaryGraph(nodes=self._nodes(rows), message_count=count)

    async def summary_node(self, session_id: str, node_id: str) -> GraphNodeDetail:
        rows, _ = await self._marker_rows(session_id)
        for node, row in zip(self._nodes(rows), rows, strict=True):
            if node.id == node_id:
                return GraphNodeDetail(node=node, content=row.summary, label=row.archive_name)
        raise NotFound(f"marker {node_id!r} not found in session {session_id!r}")
