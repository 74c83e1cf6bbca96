"""`mnemo memory usage` and the spend lines of `mnemo memory doctor`: what model calls cost,
read from `usage_records` (memory/storage/usage.py).

`usage` only reads: it opens no database that does not exist (a mistyped SQLite path
would otherwise be created empty) and migrates nothing; a database from before the
usage table says so.
"""

from __future__ import annotations

import sys
from datetime import timedelta
from pathlib import Path
from typing import TextIO

from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncEngine

from bot.config.settings import Settings
from memory.contract.types import utcnow
from memory.storage.db import create_engine
from memory.storage.operator_reads import spend_per_user, usage_recorded
from memory.storage.prices import Price, format_cost
from memory.storage.usage import BACKGROUND_KINDS, ReportRow, UsageStore, day_start

EXIT_OK, EXIT_FAULT = 0, 1
GROUPINGS = ("user", "kind", "day", "model")


def _missing_sqlite(url: str) -> str | None:
    """The path of a SQLite database file that does not exist, else None."""
    parsed = make_url(url)
    if not parsed.drivername.startswith("sqlite"):
        return None
    path = parsed.database or ""
    if not path or path == ":memory:" or path.startswith("file:"):
        return None
    return None if Path(path).exists() else path


def _cost(row: ReportRow, prices: dict[str, Price]) -> str:
    price = prices.get(row.model)
    return format_cost(price.cost(row.tokens)) if price is not None else "-"


def render(rows: list[ReportRow], by: str, prices: dict[str, Price]) -> list[str]:
    """A plain table: one line per (group, model), and the total; by model, the group
    is the model, shown once."""
    lead = ("model",) if by == "model" else (by, "model")
    head = (*lead, "calls", "prompt", "cached", "completion", "total", "cost")
    table = [head]
    for r in rows:
        t = r.tokens
        mark = "~" if t.estimated else ""  # some calls of the line were estimated
        table.append(
            (
                *((r.model,) if by == "model" else (r.key, r.model)),
                str(r.calls),
                f"{mark}{t.prompt}",
                str(t.cached_prompt),
                f"{mark}{t.completion}",
                f"{mark}{t.total}",
                _cost(r, prices),
            )
        )
    widths = [max(len(line[i]) for line in table) for i in range(len(head))]
    out = []
    for line in table:
        cells = [
            cell.ljust(w) if i < len(lead) else cell.rjust(w)
            for i, (cell, w) in enumerate(zip(line, widths, strict=True))
        ]
        out.append("  ".join(cells).rstrip())
    return out


async def usage_command(
    settings: Settings, by: str = "kind", days: int = 30, out: TextIO | None = None
) -> int:
    """`mnemo memory usage [--by user|kind|day|model] [--days N]`."""
    out = out or sys.stdout
    missing = _missing_sqlite(settings.database.url)
    if missing is not None:
        print(f"mnemo: no database at {missing} (check database.url)", file=sys.stderr)
        return EXIT_FAULT
    engine = create_engine(settings.database.url)
    try:
        if not await usage_recorded(engine):
            print(
                "no usage recorded: this database predates usage accounting "
                "(`mnemo migrate`, or the bot's next start, adds it)",
                file=out,
            )
            return EXIT_OK
        since = day_start(utcnow()) - timedelta(days=days - 1)
        rows = await UsageStore(engine).report(by, since)  # type: ignore[arg-type]
    finally:
        await engine.dispose()
    print(f"model calls since {since:%Y-%m-%d} 00:00 UTC, by {by}:", file=out)
    if not rows:
        print("(none)", file=out)
        return EXIT_OK
    for line in render(rows, by, settings.llm.price_table()):
        print(line, file=out)
    calls = sum(r.calls for r in rows)
    total = sum(r.tokens.total for r in rows)
    print(f"total: {calls} call(s), {total:,} tokens", file=out)
    if any(r.tokens.estimated for r in rows):
        print("~: includes calls whose usage the server did not report (estimated)", file=out)
    return EXIT_OK


async def guard_report(settings: Settings, engine: AsyncEngine) -> list[str]:
    """Doctor's lines on the background spend guard: the window's spend against the
    caps, and the users at their cap now."""
    guard = settings.limits.background
    if not await usage_recorded(engine):
        return []
    store = UsageStore(engine)
    since = utcnow() - timedelta(seconds=guard.window_s)
    calls, tokens = await store.window(since, BACKGROUND_KINDS)
    caps = f"caps {guard.calls_total or 'none'} calls, {guard.tokens_total or 'none'} tokens"
    lines = [
        f"background spend in the last {guard.window}: {calls} call(s), {tokens:,} "
        f"tokens ({caps}; limits.background)"
    ]
    if (guard.calls_total and calls >= guard.calls_total) or (
        guard.tokens_total and tokens >= guard.tokens_total
    ):
        lines.append(
            "note: the background total cap is reached: summaries, reflect and "
            "embeddings are put off until the window moves on"
        )
    held = [
        str(user_id)
        for user_id, n, spent in await spend_per_user(engine, since, BACKGROUND_KINDS)
        if (guard.calls_per_user and n >= guard.calls_per_user)
        or (guard.tokens_per_user and spent >= guard.tokens_per_user)
    ]
    if held:
        lines.append(
            f"note: {len(held)} user(s) at their background cap, their work put off: "
            + ", ".join(held[:10])
            + (" ..." if len(held) > 10 else "")
        )
    return lines
