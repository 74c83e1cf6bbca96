"""Charts drawn as SVG on the server, as the summary graph is (no script, no inline
style): tokens per day (`render`: one bar a day of the period, days without calls left
empty so gaps read as gaps, each bar's tooltip the day's calls, tokens and cost), and a
conversation's next context against its budget (`context_bar`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import date, timedelta
from html import escape
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from memory.actions.spec import ContextFigures

W, H, PAD, AXIS = 720.0, 140.0, 8.0, 18.0


@dataclass(frozen=True)
class Day:
    day: date
    calls: int
    tokens: int
    cost: str  # formatted, "–" where a model of the day has no price


def days_between(first: date, last: date, seen: Mapping[date, Day]) -> list[Day]:
    """Every day from `first` to `last`, the ones without calls empty."""
    out, d = [], first
    while d <= last:
        out.append(seen.get(d, Day(d, 0, 0, "")))
        d += timedelta(days=1)
    return out


def render(days: Sequence[Day]) -> str:
    if not days:
        return ""
    top = max(d.tokens for d in days) or 1
    step = (W - 2 * PAD) / len(days)
    bar = max(1.0, step * 0.8)
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" viewBox="0 0 {W:.0f} {H:.0f}" '
        f'role="img" aria-label="tokens per day, {len(days)} days, at most {top:,}">'
    ]
    for i, d in enumerate(days):
        x = PAD + i * step
        h = (H - PAD - AXIS) * d.tokens / top
        tip = f"{d.day.isoformat()}: {d.calls:,} calls, {d.tokens:,} tokens" + (
            f", cost {d.cost}" if d.cost else ""
        )
        out.append(
            f'<rect class="bar" x="{x:.1f}" y="{H - AXIS - h:.1f}" width="{bar:.1f}" '
            f'height="{h:.1f}"><title>{escape(tip)}</title></rect>'
        )
    out.append(
        f'<line class="base" x1="{PAD}" y1="{H - AXIS:.1f}" x2="{W - PAD}" y2="{H - AXIS:.1f}"/>'
        f'<text x="{PAD}" y="{H - 4:.1f}">{days[0].day.isoformat()}</text>'
        f'<text x="{W - PAD}" y="{H - 4:.1f}" text-anchor="end">{days[-1].day.isoformat()}</text>'
        f'<text x="{PAD}" y="{PAD + 8:.1f}">{top:,} tokens</text>'
    )
    out.append("</svg>")
    return "".join(out)


BAR_W, BAR_H = 720.0, 60.0
PARTS = (
    ("system", "system prompt"),
    ("tools", "memory tool"),
    ("summaries", "summaries"),
    ("messages", "messages"),
)


def context_bar(f: ContextFigures) -> str:
    """The next turn's context, part by part, against `memory.budget_tokens` (the end of
    the scale unless the context is larger), with a tick at compaction's threshold and
    one at the model's window when known. A window far past the budget (a hosted model's
    128k beside a 13.5k budget) is named at the bar's end instead of drawn: on its scale
    the parts would be slivers."""
    drawn_window = f.window if f.window and f.window <= 2 * max(f.budget, f.total) else None
    scale = max(f.budget, f.total, drawn_window or 0, 1)
    px = (BAR_W - 2 * PAD) / scale
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="chart context-bar" '
        f'viewBox="0 0 {BAR_W:.0f} {BAR_H:.0f}" role="img" '
        f'aria-label="next context {f.total:,} of {f.budget:,} tokens">'
    ]
    x = PAD
    for key, label in PARTS:
        tokens = getattr(f, key)
        w = tokens * px
        out.append(
            f'<rect class="part {key}" x="{x:.1f}" y="{PAD}" width="{w:.1f}" height="18">'
            f"<title>{escape(label)}: {tokens:,} tokens</title></rect>"
        )
        x += w
    budget_x = PAD + f.budget * px
    out.append(
        f'<line class="limit" x1="{budget_x:.1f}" y1="{PAD - 4}" x2="{budget_x:.1f}" '
        f'y2="{PAD + 22}"><title>memory.budget_tokens: {f.budget:,}</title></line>'
        f'<text x="{budget_x:.1f}" y="{BAR_H - 4:.1f}" text-anchor="end">budget {f.budget:,}</text>'
    )
    if f.compact_above is not None and f.compact_above <= scale:
        cx = PAD + f.compact_above * px
        out.append(
            f'<line class="compact" x1="{cx:.1f}" y1="{PAD - 4}" x2="{cx:.1f}" y2="{PAD + 22}">'
            f"<title>compaction.max_tokens: {f.compact_above:,} (of the conversation kept "
            f"in context, now {f.stored:,})</title></line>"
        )
    if drawn_window is not None:
        wx = PAD + drawn_window * px
        out.append(
            f'<line class="window" x1="{wx:.1f}" y1="{PAD - 4}" x2="{wx:.1f}" y2="{PAD + 22}">'
            f"<title>the model's window: {drawn_window:,} tokens</title></line>"
        )
    if f.window:
        out.append(
            f'<text class="window" x="{BAR_W - PAD:.1f}" y="{BAR_H - 20:.1f}" '
            f'text-anchor="end">model window {f.window:,}</text>'
        )
    out.append(f'<text x="{PAD}" y="{BAR_H - 4:.1f}">next context {f.total:,} tokens</text>')
    out.append("</svg>")
    return "".join(out)
