"""simple's notes and archives as `EmbeddingSource`s (sources `note` and `archive`).

Entries live in the per-(agent, user) files of `NotesStore`, not in the database, so a
pending look walks `<store_dir>/<agent>/<user>.mem`, skipping files unchanged (same
inode, mtime and size) since a look found all of their entries embedded.

An entry's key is `<id>:<hash of the embedded text>` (`note_key`): a rewritten or
renamed note gets a new key, so it is embedded again; the vectors of keys its file no
longer holds are deleted when the file is looked at, and a searcher resolving a hit
checks the key against the entry as it now is (`note_key(entry) == hit.key`).
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from urllib.parse import unquote

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from memory.contract.embedding import Batch, Item
from memory.contract.errors import StoreCorrupt
from memory.contract.types import NoteEntry, NoteKind
from memory.search.semantic.store import delete_keys, embeddings
from plugins.simple.notes_store import NotesStore, file_stamp

SOURCES = {NoteKind.NOTE: "note", NoteKind.ARCHIVE: "archive"}


def note_text(entry: NoteEntry) -> str:
    """What is embedded: a note's name says what it is about; an archive's is a label."""
    if entry.kind == NoteKind.ARCHIVE:
        return entry.content
    return f"{entry.name}\n{entry.content}"


def note_key(entry: NoteEntry) -> str:
    digest = hashlib.sha256(note_text(entry).encode("utf-8", "surrogatepass")).hexdigest()
    return f"{entry.id}:{digest[:16]}"


class NotesSource:
    """One kind of entry (notes or archives) of every notes file under the store."""

    def __init__(self, engine: AsyncEngine, store: NotesStore, kind: NoteKind) -> None:
        self.engine, self.store, self.kind = engine, store, kind
        self.name = SOURCES[kind]
        self._settled: dict[tuple[str, Path], tuple[int, int, int]] = {}

    def _files(self) -> list[tuple[Path, str, int]]:
        """(path, agent id, user id) of every notes file."""
        out = []
        try:
            agents = list(os.scandir(self.store.root))
        except FileNotFoundError:
            return []
        for agent_dir in agents:
            if not agent_dir.is_dir():
                continue
            for f in os.scandir(agent_dir.path):
                stem, dot, ext = f.name.rpartition(".")
                if ext == "mem" and dot and stem.lstrip("-").isdigit():
                    out.append((Path(f.path), unquote(agent_dir.name), int(stem)))
        return out

    async def _items(self, agent_id: str, user_id: int) -> list[Item]:
        try:
            entries = await self.store.entries(agent_id, user_id)
        except StoreCorrupt:  # doctor reports it; embedding must not stop for it
            return []
        return [
            Item(self.name, note_key(e), user_id, agent_id, note_text(e))
            for e in entries
            if e.kind == self.kind
        ]

    async def _embedded(self, model: str, agent_id: str, user_id: int) -> set[str]:
        async with self.engine.connect() as conn:
            return set(
                (
                    await conn.execute(
                        sa.select(embeddings.c.item_key).where(
                            embeddings.c.source == self.name,
                            embeddings.c.user_id == user_id,
                            embeddings.c.agent_id == agent_id,
                            embeddings.c.model == model,
                        )
                    )
                ).scalars()
            )

    async def pending(self, model: str, *, limit: int, after: int | None = None) -> Batch:
        out: list[Item] = []
        for path, agent_id, user_id in self._files():
            stamp = file_stamp(path)
            if stamp is None or self._settled.get((model, path)) == stamp:
                continue
            items = await self._items(agent_id, user_id)
            await delete_keys(self.engine, self.name, user_id, agent_id, (i.key for i in items))
            done = await self._embedded(model, agent_id, user_id)
            missing = [i for i in items if i.key not in done]
            if not missing:
                self._settled[(model, path)] = stamp
            out += missing
            if len(out) >= limit:
                return Batch(out[:limit], 0)  # the next look finds the rest
        return Batch(out, None)

    async def counts(self, model: str) -> tuple[int, int]:
        total = done = 0
        for _path, agent_id, user_id in self._files():
            items = await self._items(agent_id, user_id)
            have = await self._embedded(model, agent_id, user_id)
            total += len(items)
            done += sum(1 for i in items if i.key in have)
        return total, done
