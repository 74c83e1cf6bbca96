"""What every benchmark script reports the same way: the machine line, percentiles, and
appending its figures to bench/HISTORY.md (bench/RESULTS.md
holds the current figure of each benchmark, updated by hand from there)."""

from __future__ import annotations

import os
import platform
import sqlite3
from pathlib import Path

HISTORY = Path(__file__).resolve().with_name("HISTORY.md")


def machine() -> str:
    """CPU model, cores, Python, OS and SQLite version: the `- machine:` line of a result."""
    cpu = platform.processor() or platform.machine() or "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return (
        f"{cpu}, {os.cpu_count()} cores, Python {platform.python_version()}, "
        f"{platform.system()}, SQLite {sqlite3.sqlite_version}"
    )


def percentile(values: list[float], q: float) -> float:
    """The nearest-rank `q` quantile (0 <= q <= 1) of `values`; NaN when there are none."""
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def append_results(text: str) -> None:
    """Append `text` to bench/HISTORY.md as its own block."""
    with HISTORY.open("a", encoding="utf-8") as fh:
        fh.write("\n" + text.strip("\n") + "\n")
