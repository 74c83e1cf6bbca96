"""simple's compaction markers as a graph for the operator's console
(`memory.contract.graph.SummaryGraphReader`): one node per handoff summary, no edges (each
carries the one before it forward, and only the newest is in the context). Its archive
in the user's notes file bears the marker's `archive_name`."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from memory.contract.errors import NotFound
from memory.contract.graph import GraphNode, GraphNodeDetail, SummaryGraph
from memory.contract.types import as_utc
from memory.storage.history import HistoryStore, messages
from memory.text.tokens import estimate_tokens
from plugins.simple.markers import markers


@dataclass(frozen=True)
class _Row:
    marker: Any  # a row of simple_compactions
    earliest_at: datetime | None
    latest_at: datetime | None


class SimpleGraph:
    """Mixin of the simple provider (which has `engine` and `history`)."""

    engine: AsyncEngine
    history: HistoryStore

    async def _marker_rows(self, session_id: str) -> tuple[list[_Row], int]:
        """The markers, each with the times of the first and last messages it newly
        covers (two index seeks a marker: never a scan of a long conversation)."""
        async with self.engine.connect() as conn:
            conv_id = await self.history.conversation_id(session_id, conn)
            if conv_id is None:
                return [], 0
            rows = (
                await conn.execute(
                    sa.select(markers)
                    .where(markers.c.conversation_id == conv_id)
                    .order_by(markers.c.id)
                )
            ).all()
            of_conv = messages.c.conversation_id == conv_id
            out, previous = [], 0
            for r in rows:
                first = await conn.scalar(
                    sa.select(messages.c.created_at)
                    .where(of_conv, messages.c.seq > previous)
                    .order_by(messages.c.seq)
                    .limit(1)
                )
                last = await conn.scalar(
                    sa.select(messages.c.created_at)
                    .where(of_conv, messages.c.seq <= r.through_seq)
                    .order_by(messages.c.seq.desc())
                    .limit(1)
                )
                out.append(_Row(r, as_utc(first), as_utc(last)))
                previous = r.through_seq
            count = await conn.scalar(sa.select(sa.func.max(messages.c.seq)).where(of_conv))
        return out, int(count or 0)

    @staticmethod
    def _nodes(rows: list[_Row]) -> list[GraphNode]:
        nodes, first = [], 1
        for i, row in enumerate(rows):
            r = row.marker
            nodes.append(
                GraphNode(
                    id=f"marker-{r.id}",
                    kind="marker",
                    depth=0,
                    token_count=estimate_tokens(r.summary),
                    earliest_at=row.earliest_at,
                    latest_at=row.latest_at,
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
                marker = row.marker
                return GraphNodeDetail(node=node, content=marker.summary, label=marker.archive_name)
        raise NotFound(f"marker {node_id!r} not found in session {session_id!r}")
