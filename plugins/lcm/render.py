"""Summaries as text: the seed's XML user message, and the summarizer's input."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from xml.sax.saxutils import escape, quoteattr

from plugins.lcm.dag import SummaryRecord


def _stamp(value: datetime | None) -> str:
    return value.isoformat() if value is not None else ""


def summary_xml(s: SummaryRecord) -> str:
    """The seed's format, plus `<children>` (the constituents a condensed summary can be
    expanded into). `<parents>` lists the condensed summaries containing this one (parents contain,
    children are what it was built from), so it is empty for a summary still in the context window.
    Content is XML-escaped: a message quoting `</summary>` must not end the element."""
    lines = [
        f'<summary id={quoteattr(s.id)} kind={quoteattr(s.kind)} depth="{s.depth}" '
        f"earliest_at={quoteattr(_stamp(s.earliest_at))} "
        f"latest_at={quoteattr(_stamp(s.latest_at))}>",
        "<parents>",
        *(f"<summary_ref id={quoteattr(p)} />" for p in s.parent_ids),
        "</parents>",
    ]
    if s.child_ids:
        lines += ["<children>", *(f"<summary_ref id={quoteattr(c)} />" for c in s.child_ids)]
        lines.append("</children>")
    lines += ["<content>", escape(s.content), "</content>", "</summary>"]
    return "\n".join(lines)


def condensed_source(children: Sequence[SummaryRecord]) -> str:
    """What a condensed summary is made from: its children, oldest first, each headed by
    the span of time it covers."""
    blocks = []
    for c in children:
        span = f"{_stamp(c.earliest_at)} .. {_stamp(c.latest_at)}"
        blocks.append(f"[summary {c.id}, {span}]\n{c.content}")
    return "\n\n".join(blocks)
