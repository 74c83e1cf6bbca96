"""One single-file notes/archives memory, held in RAM and snapshotted to disk.

The seed "Memory" store: entries (monotonic id, unique name, aliases, content, kind
Note|Archive, created_at) addressed by name or alias, BM25 search over content + name,
and a closed set of write operations (`Add`, `Rename`, `Alias`, `Write`, `Remove`).
Every successful apply writes an atomic snapshot of the whole file; a failed write
leaves both the file and the RAM state as they were.

File format (UTF-8, JSON Lines, one object per line; `\\n` inside text is escaped by JSON):

    {"format": "mnemo-notes", "version": 1, "next_id": 7, "entries": 2}
    {"id": 1, "name": "groceries", "aliases": ["shopping"], "kind": "Note",
     "created_at": "2026-11-26T10:00:00+00:00", "content": "milk, eggs"}
    {"id": 5, ...}

The header's `entries` count catches a truncated file. The search index is not stored:
it is derived from the entries and rebuilt on open (storing it would double the file and
could disagree with the entries it describes). Each entry's line is cached, so a write
serialises one entry and joins the rest as bytes: the snapshot cost is the file size,
not a re-encoding of every entry.

Names and aliases share one namespace, compared after collapsing whitespace and
casefolding ("Shopping  List" and "shopping list" are the same name); the spelling the
agent chose is kept for display. Rename replaces the canonical name (the old one stops
resolving; promoting an alias of the same entry is allowed); Alias binds one more name.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import tempfile
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import Any

from memory.contract.errors import Conflict, InvalidArgument, NotFound, StoreCorrupt
from memory.contract.types import NoteEntry, NoteHit, NoteKind, utcnow
from memory.text.sanitize import storable
from plugins.simple.bm25 import BM25Index, tokenize

FORMAT = "mnemo-notes"
VERSION = 1
MAX_NAME_LEN = 200
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


@dataclass(frozen=True)
class Add:
    name: str
    content: str
    kind: NoteKind = NoteKind.NOTE


@dataclass(frozen=True)
class Rename:
    name: str
    new_name: str


@dataclass(frozen=True)
class Alias:
    name: str
    alias: str


@dataclass(frozen=True)
class Write:
    name: str
    content: str


@dataclass(frozen=True)
class Remove:
    name: str


NoteOp = Add | Rename | Alias | Write | Remove


def clean_name(name: str) -> str:
    """`name` with whitespace collapsed; InvalidArgument when unusable as a name."""
    if not isinstance(name, str):
        raise InvalidArgument("a note name must be text")
    cleaned = " ".join(name.split())
    if not cleaned:
        raise InvalidArgument("a note name must not be empty")
    if len(cleaned) > MAX_NAME_LEN:
        raise InvalidArgument(f"a note name is at most {MAX_NAME_LEN} characters")
    if _CONTROL.search(cleaned):
        raise InvalidArgument("a note name must not contain control characters")
    return storable(cleaned)


def name_key(name: str) -> str:
    """The form names are compared in."""
    return clean_name(name).casefold()


def _check_content(content: str) -> str:
    if not isinstance(content, str):
        raise InvalidArgument("note content must be text")
    if not content.strip():
        raise InvalidArgument("note content must not be empty")
    # As in the SQL history: NUL and lone surrogates (unencodable) become U+FFFD.
    return storable(content)


def _copy(entry: NoteEntry) -> NoteEntry:
    return replace(entry, aliases=list(entry.aliases))


def encode_entry(entry: NoteEntry) -> dict[str, Any]:
    """`entry` as the JSON object of its line (what an export carries)."""
    return {
        "id": entry.id,
        "name": entry.name,
        "aliases": list(entry.aliases),
        "kind": str(entry.kind),
        "created_at": entry.created_at.isoformat() if entry.created_at else None,
        "content": entry.content,
    }


def _encode(entry: NoteEntry) -> bytes:
    line = json.dumps(encode_entry(entry), ensure_ascii=False, separators=(",", ":"))
    return (line + "\n").encode()


def _decode(obj: Any) -> NoteEntry:
    """An entry from its JSON object; ValueError/TypeError/KeyError when malformed."""
    if not isinstance(obj, dict):
        raise ValueError("entry is not an object")
    entry_id, name, aliases = obj["id"], obj["name"], obj["aliases"]
    content, created = obj["content"], obj["created_at"]
    if not isinstance(entry_id, int) or isinstance(entry_id, bool) or entry_id <= 0:
        raise ValueError("bad id")
    if not isinstance(name, str) or not isinstance(content, str):
        raise ValueError("bad name or content")
    if not isinstance(aliases, list) or not all(isinstance(a, str) for a in aliases):
        raise ValueError("bad aliases")
    created_at = datetime.fromisoformat(created) if created is not None else None
    return NoteEntry(
        id=entry_id,
        name=name,
        content=content,
        kind=NoteKind(obj["kind"]),
        aliases=list(aliases),
        created_at=created_at,
    )


_COMPARED = ("name", "aliases", "kind", "created_at", "content")


def _differences(a: NoteEntry, b: NoteEntry) -> list[str]:
    return [f for f in _COMPARED if getattr(a, f) != getattr(b, f)]


def _same(a: NoteEntry, b: NoteEntry) -> bool:
    """Equal but for the id (a merge renumbers)."""
    return not _differences(a, b)


def _index_tokens(entry: NoteEntry) -> list[str]:
    # Content and name; aliases are resolution only, never search terms.
    return tokenize(entry.content) + tokenize(entry.name)


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class NotesFile:
    """The entries of one `.mem` file. Not thread-safe: callers serialise access."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._next_id = 1
        self._entries: dict[int, NoteEntry] = {}
        self._lines: dict[int, bytes] = {}  # id -> its encoded line, in id order
        self._names: dict[str, int] = {}  # name or alias key -> id
        self._index = BM25Index()
        # (inode, mtime, size) of the file as last read or written; None = no file yet
        self.stamp: tuple[int, int, int] | None = None

    # ---- opening -------------------------------------------------------------------

    @classmethod
    def open(cls, path: Path) -> NotesFile:
        """Read `path`; a missing file is an empty memory, a malformed one StoreCorrupt."""
        notes = cls(path)
        try:
            with open(path, "rb") as fh:
                data = fh.read()
                st = os.fstat(fh.fileno())
        except FileNotFoundError:
            return notes
        except OSError as exc:
            raise StoreCorrupt(f"notes file {path} cannot be read: {exc}") from exc
        notes._load(data)
        notes.stamp = (st.st_ino, st.st_mtime_ns, st.st_size)
        return notes

    def _corrupt(self, line_no: int, why: str) -> StoreCorrupt:
        return StoreCorrupt(
            f"notes file {self.path} is corrupt (line {line_no}: {why}); "
            "it was left untouched, restore it from a backup or move it away"
        )

    def _load(self, data: bytes) -> None:
        lines = data.split(b"\n")
        if lines and lines[-1] == b"":
            lines.pop()
        if not lines:
            raise self._corrupt(1, "empty file, no header")
        try:
            header = json.loads(lines[0])
        except ValueError as exc:
            raise self._corrupt(1, f"header is not JSON ({exc})") from exc
        if not isinstance(header, dict) or header.get("format") != FORMAT:
            raise self._corrupt(1, "not a mnemo notes file")
        if header.get("version") != VERSION:
            raise self._corrupt(1, f"unsupported version {header.get('version')!r}")
        next_id, count = header.get("next_id"), header.get("entries")
        if not isinstance(next_id, int) or not isinstance(count, int):
            raise self._corrupt(1, "header lacks next_id/entries")
        if count != len(lines) - 1:
            raise self._corrupt(1, f"header says {count} entries, file holds {len(lines) - 1}")
        for line_no, raw in enumerate(lines[1:], start=2):
            try:
                entry = _decode(json.loads(raw))
            except (ValueError, TypeError, KeyError) as exc:
                raise self._corrupt(line_no, f"bad entry ({exc})") from exc
            if entry.id in self._entries or entry.id >= next_id:
                raise self._corrupt(line_no, f"id {entry.id} repeated or beyond next_id")
            for label in (entry.name, *entry.aliases):
                try:
                    key = name_key(label)
                except InvalidArgument as exc:
                    raise self._corrupt(line_no, f"bad name {label!r}") from exc
                if key in self._names:
                    raise self._corrupt(line_no, f"name {label!r} is bound twice")
                self._names[key] = entry.id
            self._entries[entry.id] = entry
            self._lines[entry.id] = raw + b"\n"
            self._index.add(entry.id, _index_tokens(entry))
        self._next_id = next_id
        # Lines must stay in id order for the next snapshot; files we write already are.
        self._lines = dict(sorted(self._lines.items()))

    # ---- reads ---------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._entries)

    def _resolve(self, name: str) -> NoteEntry:
        entry_id = self._names.get(name_key(name))
        if entry_id is None:
            raise NotFound(f"no note named {clean_name(name)!r}")
        return self._entries[entry_id]

    def get(self, name: str) -> NoteEntry:
        """The entry `name` (a name or an alias) resolves to; NotFound otherwise."""
        return _copy(self._resolve(name))

    def entries(self) -> list[NoteEntry]:
        """Every entry, oldest (lowest id) first."""
        return [_copy(e) for e in self._entries.values()]

    def search(self, text: str, limit: int = 10) -> list[NoteHit]:
        """Entries ranked by BM25 against `text`, best first, with their scores. Every
        entry sharing a term with the query is a candidate: the caller picks a cutoff."""
        hits = self._index.top(tokenize(text), limit)
        return [NoteHit(entry=_copy(self._entries[i]), score=score) for i, score in hits]

    # ---- writes --------------------------------------------------------------------

    def apply(self, op: NoteOp) -> NoteEntry | None:
        """Apply one write and snapshot the file. Returns the entry as it now is (None
        after Remove). On any error nothing changes, in RAM or on disk."""
        match op:
            case Add():
                return self._add(op)
            case Rename():
                return self._rename(op)
            case Alias():
                return self._alias(op)
            case Write():
                return self._write(op)
            case Remove():
                self._remove(op)
                return None
        raise InvalidArgument(f"unknown notes operation {op!r}")

    def _free(self, name: str, owner: int | None = None) -> str:
        """The key of `name`, or Conflict when it is bound to an entry other than `owner`."""
        key = name_key(name)
        bound = self._names.get(key)
        if bound is not None and bound != owner:
            raise Conflict(
                f"the name {clean_name(name)!r} is already used by note "
                f"{self._entries[bound].name!r}"
            )
        return key

    def _add(self, op: Add) -> NoteEntry:
        name = clean_name(op.name)
        key = self._free(name)
        content = _check_content(op.content)
        entry = NoteEntry(
            id=self._next_id,
            name=name,
            content=content,
            kind=NoteKind(op.kind),
            aliases=[],
            created_at=utcnow(),
        )
        self._commit(entry, next_id=self._next_id + 1)
        self._names[key] = entry.id
        self._index.add(entry.id, _index_tokens(entry))
        return _copy(entry)

    def _rename(self, op: Rename) -> NoteEntry:
        old = self._resolve(op.name)
        new_name = clean_name(op.new_name)
        new_key = self._free(new_name, owner=old.id)
        old_key = name_key(old.name)
        # Promoting one of the entry's own aliases takes it out of the alias list.
        aliases = [a for a in old.aliases if name_key(a) != new_key]
        entry = replace(old, name=new_name, aliases=aliases)
        self._commit(entry)
        if old_key != new_key:
            del self._names[old_key]
        self._names[new_key] = entry.id
        self._index.add(entry.id, _index_tokens(entry))
        return _copy(entry)

    def _alias(self, op: Alias) -> NoteEntry:
        target = self._resolve(op.name)
        alias = clean_name(op.alias)
        key = self._free(alias)
        entry = replace(target, aliases=[*target.aliases, alias])
        self._commit(entry)
        self._names[key] = entry.id
        return _copy(entry)

    def _write(self, op: Write) -> NoteEntry:
        target = self._resolve(op.name)
        entry = replace(target, content=_check_content(op.content), aliases=list(target.aliases))
        self._commit(entry)
        self._index.add(entry.id, _index_tokens(entry))
        return _copy(entry)

    def _remove(self, op: Remove) -> None:
        target = self._resolve(op.name)
        self._commit(None, drop=target.id)
        for label in (target.name, *target.aliases):
            del self._names[name_key(label)]
        self._index.remove(target.id)

    def _commit(
        self, entry: NoteEntry | None, *, drop: int | None = None, next_id: int | None = None
    ) -> None:
        """Snapshot the file with `entry` put (or `drop` removed), then adopt the change
        in RAM. The caller updates the name map and index only after this returns."""
        saved = dict(self._lines)  # shallow: the bytes themselves are shared
        if entry is not None:
            self._lines[entry.id] = _encode(entry)
        if drop is not None:
            del self._lines[drop]
        new_next = next_id if next_id is not None else self._next_id
        try:
            self._snapshot(new_next)
        except BaseException:
            self._lines = saved
            raise
        self._next_id = new_next
        if entry is not None:
            self._entries[entry.id] = entry
        if drop is not None:
            del self._entries[drop]

    # ---- import ----------------------------------------------------------------------

    def merged(self, incoming: list[NoteEntry]) -> bytes | None:
        """The file's bytes with `incoming` (valid entries, unique ids and names, as an
        export holds them) merged in; None when it adds nothing. Nothing changes here.

        An incoming entry equal to the one its name resolves to here (name, aliases,
        kind, created_at, content; ids may differ) is skipped. Any other incoming name or
        alias already bound raises Conflict naming it: we never overwrite a note. Into a
        file without entries the incoming ids are kept (so a migrated file exports the
        same); otherwise new entries take ids from next_id on, in incoming order.
        """
        added: list[NoteEntry] = []
        for entry in sorted(incoming, key=lambda e: e.id):
            owners = {self._names.get(name_key(label)) for label in (entry.name, *entry.aliases)}
            owners.discard(None)
            if not owners:
                added.append(entry)
                continue
            here = self._entries.get(self._names.get(name_key(entry.name), 0))
            if here is not None and owners == {here.id} and _same(here, entry):
                continue
            clash = here or self._entries[min(i for i in owners if i is not None)]
            differing = ", ".join(_differences(clash, entry))
            raise Conflict(
                f"note {entry.name!r} clashes with the existing note {clash.name!r} "
                f"(they differ in {differing}) in {self.path}"
            )
        if not added:
            return None
        lines = dict(self._lines)
        if self._entries:
            next_id = self._next_id
            for entry in added:
                lines[next_id] = _encode(replace(entry, id=next_id))
                next_id += 1
        else:
            lines = {e.id: _encode(e) for e in added}
            next_id = max(self._next_id, max(lines) + 1)
        header = {"format": FORMAT, "version": VERSION, "next_id": next_id, "entries": len(lines)}
        return json.dumps(header).encode() + b"\n" + b"".join(lines.values())

    def _snapshot(self, next_id: int) -> None:
        header = {
            "format": FORMAT,
            "version": VERSION,
            "next_id": next_id,
            "entries": len(self._lines),
        }
        data = json.dumps(header).encode() + b"\n" + b"".join(self._lines.values())
        directory = self.path.parent
        directory.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{self.path.name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise
        # The rename is durable only once the directory entry is on disk.
        _fsync_dir(directory)
        st = os.stat(self.path)
        self.stamp = (st.st_ino, st.st_mtime_ns, st.st_size)
