"""Session snapshots moved in this process: a counter that lets a reader trust a cached
snapshot version.

A session's snapshot version (the version of profile, soul and rules it reads, so its
prompt stays byte-stable and the model server's prompt cache keeps hitting) changes only
when a compaction of the session rewrites the prompt's start anyway
(`SharedStores.record_compaction`) or a person's `/memory` write advances it. A reader
that caches versions per session (bot/model/prompt.py, when one process serves the store)
stays right if every advance bumps this counter once it is committed: the places that
advance (memory/actions/spec.py, bot/conversation/compaction.py) call `moved()`, whichever
provider keeps the snapshots.
"""

from __future__ import annotations

_moves = 0


def moved() -> None:
    global _moves
    _moves += 1


def moves() -> int:
    return _moves
