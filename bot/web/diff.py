"""The line diff of two versions of a profile, soul or constraint list, for the console.

By `SequenceMatcher` over whole lines: `difflib.ndiff` also compares every changed
line with every other to mark changes within lines (hints the pages never showed), and
that costs minutes for a few hundred slightly edited lines (2.5 s at 200, 120 s at 500);
this stays in milliseconds for texts of `MAX_TEXT_CHARS`.
"""

from __future__ import annotations

from difflib import SequenceMatcher


def line_diff(before: str, after: str) -> list[tuple[str, str]]:
    """(kind, line) of a line diff, kind ' ', '-' or '+' (a changed block: its old lines,
    then its new ones)."""
    old, new = before.splitlines(), after.splitlines()
    out: list[tuple[str, str]] = []
    for op, i1, i2, j1, j2 in SequenceMatcher(None, old, new).get_opcodes():
        if op == "equal":
            out.extend((" ", line) for line in old[i1:i2])
            continue
        out.extend(("-", line) for line in old[i1:i2])
        out.extend(("+", line) for line in new[j1:j2])
    return out
