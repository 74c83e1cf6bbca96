"""What a provider built over a session's messages, as a graph an operator can look at.

`SummaryGraphReader` is an optional capability: lcm answers with its summary DAG (leaf
summaries over message ranges, condensed summaries over summaries), simple with its
compaction markers (one node each, no edges: a handoff summary replaces what came before
it). The web console draws it (bot/web/dag_svg.py). Read by the operator: no session
scope check, the caller is trusted.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol, runtime_checkable


@dataclass(frozen=True)
class GraphNode:
    id: str
    kind: str  # "leaf" | "condensed" (lcm), "marker" (simple)
    depth: int
    token_count: int
    earliest_at: datetime | None
    latest_at: datetime | None
    first_seq: int | None  # the source messages it covers, by seq (None: unknown)
    last_seq: int | None
    descendant_count: int = 0  # messages under it
    in_context: bool = False  # part of what assemble gives the model now


@dataclass
class SummaryGraph:
    nodes: list[GraphNode] = field(default_factory=list)
    edges: list[tuple[str, str]] = field(default_factory=list)  # (parent, child)
    message_count: int = 0  # seq range of the conversation: 1..message_count

    def node(self, node_id: str) -> GraphNode | None:
        return next((n for n in self.nodes if n.id == node_id), None)


@dataclass(frozen=True)
class GraphNodeDetail:
    node: GraphNode
    content: str
    parent_ids: list[str] = field(default_factory=list)  # summaries containing it
    child_ids: list[str] = field(default_factory=list)  # summaries it was built from
    source_message_ids: list[int] = field(default_factory=list)  # a leaf's messages
    label: str = ""  # simple: the archive's name


@runtime_checkable
class SummaryGraphReader(Protocol):
    async def summary_graph(self, session_id: str) -> SummaryGraph:
        """Every node of the session's graph (empty for an unknown session)."""
        ...

    async def summary_node(self, session_id: str, node_id: str) -> GraphNodeDetail:
        """One node with its content and edges; `memory.contract.errors.NotFound` when it is not
        the session's."""
        ...
