"""Session snapshots moved in this process: a counter that lets a reader trust a cached
snapshot version.

A session's snapshot version (the version of profile, soul and rules it reads, so its
prompt stays stable) changes only when the session's own memory
writes advance it. A reader that caches versions per session (bot/prompt.py, when one
process serves the store) stays right if every advance bumps this counter once it is
done: the places that advance (memory/tool.py, bot/commands.py) call `moved()`, whichever
provider keeps the snapshots.
"""

from __future__ import annotations

_moves = 0


def moved() -> None:
    global _moves
    _moves += 1


def moves() -> int:
    return _moves
