"""The notes/archives memories of every (agent, user), one file each.

`<store_dir>/<agent_id>/<user_id>.mem`: the seed's store is shared by an agent across its
conversations with one person; in a multi-user bot the user id (a group's chat id in a
group) is the scope, so one person's notes never surface in another's chat.

Concurrency: operations on one file are serialised by an asyncio lock, and all file I/O
and index work runs in a worker thread so the event loop never waits on a disk. Across
processes an advisory `flock` on `<user_id>.mem.lock` serialises writers, and every
operation first compares the file's (inode, mtime, size) with what this process last saw,
re-reading it when another process wrote it since.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import re
import threading
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import TypeVar

from memory.contract.errors import InvalidArgument
from memory.contract.types import NoteEntry, NoteHit
from plugins.simple.notes_file import NoteOp, NotesFile

T = TypeVar("T")

# Characters kept as they are in a directory name; everything else is %XX-escaped (so
# the mapping is one-to-one and `.`/`/` can never form `..` or a separator).
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")


def safe_component(agent_id: str) -> str:
    """`agent_id` as a single, reversible, traversal-free path component."""
    if not isinstance(agent_id, str) or not agent_id:
        raise InvalidArgument("agent id must be a non-empty string")
    return _UNSAFE.sub(lambda m: "".join(f"%{b:02X}" for b in m.group().encode()), agent_id)


class NotesStore:
    """Opens, caches and serialises access to the per-(agent, user) notes files."""

    def __init__(self, root: Path, *, max_open: int = 256) -> None:
        self.root = Path(root)
        self.max_open = max_open
        # Worker threads fill the cache (each for its own path) while the loop evicts.
        self._files: OrderedDict[Path, NotesFile] = OrderedDict()
        self._files_guard = threading.Lock()
        self._locks: dict[Path, asyncio.Lock] = {}
        self._users: dict[Path, int] = {}

    def path_for(self, agent_id: str, user_id: int) -> Path:
        if isinstance(user_id, bool) or not isinstance(user_id, int):
            raise InvalidArgument("user id must be an integer")
        return self.root / safe_component(agent_id) / f"{user_id}.mem"

    # ---- public API ----------------------------------------------------------------

    async def apply(self, agent_id: str, user_id: int, op: NoteOp) -> NoteEntry | None:
        """Apply one write operation to the user's memory (snapshotted on success)."""
        path = self.path_for(agent_id, user_id)
        async with self._using(path):
            return await asyncio.to_thread(self._apply_sync, path, op)

    async def get(self, agent_id: str, user_id: int, name: str) -> NoteEntry:
        return await self._read(agent_id, user_id, lambda f: f.get(name))

    async def entries(self, agent_id: str, user_id: int) -> list[NoteEntry]:
        return await self._read(agent_id, user_id, lambda f: f.entries())

    async def search(
        self, agent_id: str, user_id: int, text: str, limit: int = 10
    ) -> list[NoteHit]:
        return await self._read(agent_id, user_id, lambda f: f.search(text, limit))

    async def erase(self, agent_id: str, user_id: int) -> int:
        """Delete the user's notes file (an erasure); returns how many entries it held.
        The file is unlinked, not rewritten: its blocks go back to the filesystem."""
        path = self.path_for(agent_id, user_id)
        async with self._using(path):
            return await asyncio.to_thread(self._erase_sync, path)

    def _erase_sync(self, path: Path) -> int:
        with _flocked(path):
            count = len(self._fresh(path))
            with self._files_guard:
                self._files.pop(path, None)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
        return count

    def close(self) -> None:
        """Drop the cached files (everything is already on disk)."""
        with self._files_guard:
            self._files.clear()

    # ---- internals -----------------------------------------------------------------

    @asynccontextmanager
    async def _using(self, path: Path) -> AsyncIterator[None]:
        """Hold `path`'s lock. Locks exist only while someone uses the path, and the
        file cache evicts only paths nobody uses; both are touched only on the loop."""
        self._users[path] = self._users.get(path, 0) + 1
        lock = self._locks.setdefault(path, asyncio.Lock())
        try:
            async with lock:
                yield
        finally:
            remaining = self._users.pop(path) - 1
            if remaining:
                self._users[path] = remaining
            else:
                del self._locks[path]
            self._evict(path)

    async def _read(self, agent_id: str, user_id: int, fn: Callable[[NotesFile], T]) -> T:
        path = self.path_for(agent_id, user_id)
        async with self._using(path):
            return await asyncio.to_thread(lambda: fn(self._fresh(path)))

    def _fresh(self, path: Path) -> NotesFile:
        """The cached file for `path`, re-read if it changed on disk since we saw it.
        Runs in a worker thread under `path`'s lock, touching only `path`'s slot."""
        with self._files_guard:
            cached = self._files.get(path)
        if cached is not None and cached.stamp == file_stamp(path):
            return cached
        notes = NotesFile.open(path)
        with self._files_guard:
            self._files[path] = notes
        return notes

    def _apply_sync(self, path: Path, op: NoteOp) -> NoteEntry | None:
        with _flocked(path):
            return self._fresh(path).apply(op)

    def _evict(self, used: Path) -> None:
        with self._files_guard:
            if used in self._files:
                self._files.move_to_end(used)
            excess = len(self._files) - self.max_open
            if excess <= 0:
                return
            idle = [p for p in self._files if p not in self._users][:excess]
            for path in idle:
                del self._files[path]


def file_stamp(path: Path) -> tuple[int, int, int] | None:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return (st.st_ino, st.st_mtime_ns, st.st_size)


def lock_file(path: Path) -> int:
    """Take `path`'s writer lock across processes (blocking); the returned descriptor
    holds it until closed."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path.with_name(path.name + ".lock"), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
    except BaseException:
        os.close(fd)
        raise
    return fd


@contextmanager
def _flocked(path: Path) -> Iterator[None]:
    fd = lock_file(path)
    try:
        yield
    finally:
        os.close(fd)  # closing releases the lock
