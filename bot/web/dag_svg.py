"""The summary graph drawn as SVG on the server (no script: each node is a link).

Layout, an icicle over the message axis: the x axis is the conversation's messages by
seq, each node a box spanning the messages it covers, one row per depth (the deepest on
top), edges from each parent to its children, and under the leaves a bar per leaf down
to its source-message range on the axis. At 500 summaries the drawing is wide rather
than dense: boxes keep a minimum width and the page scrolls sideways.
"""

from __future__ import annotations

from dataclasses import dataclass
from html import escape
from urllib.parse import quote

from memory.contract.graph import GraphNode, SummaryGraph

ROW_H, BOX_H, AXIS_H, PAD = 56, 30, 44, 12
MIN_BOX_W, MIN_WIDTH, MAX_WIDTH = 8.0, 960.0, 24_000.0


@dataclass(frozen=True)
class Box:
    node: GraphNode
    x: float
    y: float
    w: float


def layout(graph: SummaryGraph) -> tuple[list[Box], float, float, float]:
    """Boxes, the drawing's width and height, and pixels per message."""
    leaves = sum(1 for n in graph.nodes if n.depth == 0) or 1
    total = max(graph.message_count, max((n.last_seq or 0 for n in graph.nodes), default=0), 1)
    width = min(MAX_WIDTH, max(MIN_WIDTH, leaves * (MIN_BOX_W + 6)))
    scale = (width - 2 * PAD) / total
    depths = max((n.depth for n in graph.nodes), default=0)
    boxes, fallback = [], 0
    for n in graph.nodes:
        if n.first_seq is None or n.last_seq is None:  # range unknown: park it on the left
            x, w = PAD + fallback * (MIN_BOX_W + 2), MIN_BOX_W
            fallback += 1
        else:
            x = PAD + (n.first_seq - 1) * scale
            w = max(MIN_BOX_W, (n.last_seq - n.first_seq + 1) * scale - 1)
        y = PAD + (depths - n.depth) * ROW_H
        boxes.append(Box(n, x, y, w))
    height = PAD + (depths + 1) * ROW_H + AXIS_H + PAD
    return boxes, width, height, scale


def render(graph: SummaryGraph, selected: str | None, href: str) -> str:
    """The SVG element; `href` + node id is each node's link (to this page)."""
    boxes, width, height, scale = layout(graph)
    by_id = {b.node.id: b for b in boxes}
    focus = _neighbours(graph, selected)
    axis_y = height - PAD - AXIS_H + 18
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="dag" width="{width:.0f}" '
        f'height="{height:.0f}" viewBox="0 0 {width:.0f} {height:.0f}" role="img" '
        f'aria-label="summary graph, {len(boxes)} nodes">'
    ]
    out.append('<g class="edges">')
    for parent, child in graph.edges:
        p, c = by_id.get(parent), by_id.get(child)
        if p is None or c is None:
            continue
        cls = "edge hot" if selected in (parent, child) else "edge"
        out.append(
            f'<line class="{cls}" x1="{p.x + p.w / 2:.1f}" y1="{p.y + BOX_H:.1f}" '
            f'x2="{c.x + c.w / 2:.1f}" y2="{c.y:.1f}"/>'
        )
    for b in boxes:  # leaves (and markers) down to their messages
        if b.node.depth == 0 and b.node.first_seq is not None:
            cls = "source hot" if b.node.id == selected else "source"
            out.append(
                f'<polygon class="{cls}" points="{b.x:.1f},{b.y + BOX_H:.1f} '
                f"{b.x + b.w:.1f},{b.y + BOX_H:.1f} {b.x + b.w:.1f},{axis_y:.1f} "
                f'{b.x:.1f},{axis_y:.1f}"/>'
            )
    out.append("</g>")
    out.append(_axis(graph.message_count, width, axis_y, scale))
    out.append(_kept_tail(graph, width, axis_y, scale))
    out.append('<g class="nodes">')
    for b in boxes:
        n = b.node
        classes = ["node", n.kind]
        if n.in_context:
            classes.append("in-context")
        if n.id == selected:
            classes.append("selected")
        elif n.id in focus:
            classes.append("related")
        tip = (
            f"{n.id} · {n.kind} depth {n.depth} · {n.token_count} tokens · "
            f"messages {n.first_seq}–{n.last_seq}"
        )
        out.append(
            f'<a href="{escape(href + quote(n.id), quote=True)}#detail" '
            f'data-node="{escape(n.id, quote=True)}">'
            f'<rect class="{" ".join(classes)}" x="{b.x:.1f}" y="{b.y:.1f}" '
            f'width="{b.w:.1f}" height="{BOX_H}" rx="3"><title>{escape(tip)}</title></rect>'
            + (
                f'<text x="{b.x + 4:.1f}" y="{b.y + 19:.1f}">{escape(label)}</text>'
                if (label := _label(n, b.w))
                else ""
            )
            + "</a>"
        )
    out.append("</g></svg>")
    return "".join(out)


# Average advance of the 11 px label font: a label is drawn only where it fits its box;
# the whole of it is the box's tooltip and the detail shown when it is selected.
CHAR_W = 6.6


def _label(n: GraphNode, w: float) -> str:
    for text in (f"{n.kind} d{n.depth} · {n.token_count}t", f"{n.kind} d{n.depth}", f"d{n.depth}"):
        if len(text) * CHAR_W + 8 <= w:
            return text
    return ""


def _neighbours(graph: SummaryGraph, selected: str | None) -> set[str]:
    if not selected:
        return set()
    return {c for p, c in graph.edges if p == selected} | {
        p for p, c in graph.edges if c == selected
    }


def _axis(count: int, width: float, y: float, scale: float) -> str:
    parts = [f'<g class="axis"><line x1="{PAD}" y1="{y:.1f}" x2="{width - PAD:.1f}" y2="{y:.1f}"/>']
    if count:
        for seq in _ticks(count, width):
            x = PAD + (seq - 1) * scale
            parts.append(
                f'<line x1="{x:.1f}" y1="{y:.1f}" x2="{x:.1f}" y2="{y + 5:.1f}"/>'
                f'<text x="{x:.1f}" y="{y + 18:.1f}">{seq}</text>'
            )
        parts.append(
            f'<text class="caption" x="{width - PAD:.1f}" y="{y - 6:.1f}" '
            f'text-anchor="end">messages (seq 1–{count})</text>'
        )
    parts.append("</g>")
    return "".join(parts)


def _kept_tail(graph: SummaryGraph, width: float, y: float, scale: float) -> str:
    """The messages after the last one a summary covers: sent to the model as they are
    (the fresh tail), marked on the axis so the gap under the boxes reads as kept, not lost."""
    covered = max((n.last_seq or 0 for n in graph.nodes), default=0)
    if graph.message_count <= covered:
        return ""
    x = PAD + covered * scale
    return (
        f'<g class="tail"><rect x="{x:.1f}" y="{y - 4:.1f}" width="{width - PAD - x:.1f}" '
        f'height="8"><title>messages {covered + 1}–{graph.message_count}: not summarized, '
        f"sent as they are</title></rect>"
        f'<text x="{width - PAD:.1f}" y="{y + 32:.1f}" text-anchor="end">kept as messages '
        f"({covered + 1}–{graph.message_count})</text></g>"
    )


def _ticks(count: int, width: float) -> list[int]:
    """Seq 1, then every multiple of a round step giving a tick every ~120 px: at most
    width / 120 + 2 of them. A range, not a hand-advanced counter: the `while` this
    replaces never moved past 1 when the step was 1 (fewer than 16 messages), hanging
    the bot (issue #32)."""
    step = _tick_step(count, width)
    return [1, *range(max(step, 2), count + 1, step)]


def _tick_step(count: int, width: float) -> int:
    """A round step (1, 2, 5, 10, 20, ...) giving a tick every ~120 px. Ends: `step`
    grows tenfold a turn up to `want`."""
    want = max(1, int(count * 120 / width))
    step = 1
    while step < want:
        for f in (2, 5, 10):
            if step * f >= want:
                return step * f
        step *= 10
    return step
