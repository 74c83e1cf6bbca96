"""Tokens per day drawn as SVG on the server, as the summary graph is (no script): one
bar per day of the period, days without calls left empty so gaps read as gaps; each
bar's tooltip gives the day's calls, tokens and cost."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import date, timedelta
from html import escape

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
