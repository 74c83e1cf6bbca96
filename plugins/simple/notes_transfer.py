"""A user's notes file in `mnemo memory export|import` (`.provider.data.notes`).

Notes are kept per (agent, user), not per session: an export carries all the notes and
archives of its session's (agent, user), once, as the lines of their file (id, name,
aliases, kind, created_at, content) in id order.

Import merges them into the target's file for that (agent, user):
- an entry equal to the target's entry of that name (all but the id) is skipped, so the
  sessions of one user import one after another, each carrying the same notes;
- any other name or alias already used in the target refuses the whole import with
  Conflict naming the note: a note is never overwritten, and never silently dropped;
- into a file without entries the ids are kept (export -> import -> export is equal),
  otherwise the new entries are appended with the target's next ids.

All or nothing, with the database: `stage` runs inside the import's transaction, takes
the file's writer lock (the `flock` the bot's writers take, held until publish or
discard so no write in between is lost), checks the merge and writes the merged file to
a temporary file beside it. The importer commits, then `publish` renames it into place
(atomic); any failure before the commit discards it. A failure of the rename itself,
or a crash between the commit and the rename, leaves the session imported without its
notes; the rename error names the staged file to move into place by hand.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path
from typing import Any

from memory.contract.errors import InvalidArgument, StoreCorrupt
from memory.contract.maintenance import parse_timestamp
from memory.contract.types import NoteEntry, NoteKind
from plugins.simple.notes_file import (
    MAX_NAME_LEN,
    NotesFile,
    _fsync_dir,
    encode_entry,
    name_key,
)
from plugins.simple.notes_store import lock_file


def export_entries(entries: list[NoteEntry]) -> list[dict[str, Any]]:
    return [encode_entry(e) for e in entries]


def read_entries(raw: Any, where: str = ".provider.data.notes") -> list[NoteEntry]:
    """The exported entries, validated (InvalidArgument naming the JSON path)."""
    if not isinstance(raw, list):
        raise InvalidArgument(f"{where}: expected a list")
    out: list[NoteEntry] = []
    ids: set[int] = set()
    names: set[str] = set()
    for i, obj in enumerate(raw):
        at = f"{where}[{i}]"
        fields = ("id", "name", "aliases", "kind", "created_at", "content")
        if not isinstance(obj, dict) or any(k not in obj for k in fields):
            raise InvalidArgument(f"{at}: expected an object with {', '.join(fields)}")
        entry_id, name, aliases, content = obj["id"], obj["name"], obj["aliases"], obj["content"]
        if isinstance(entry_id, bool) or not isinstance(entry_id, int) or entry_id <= 0:
            raise InvalidArgument(f"{at}.id: expected a positive integer")
        if entry_id in ids:
            raise InvalidArgument(f"{at}.id: {entry_id} appears twice")
        if not isinstance(content, str) or not content.strip():
            raise InvalidArgument(f"{at}.content: expected non-empty text")
        if not isinstance(aliases, list):
            raise InvalidArgument(f"{at}.aliases: expected a list")
        try:
            kind = NoteKind(obj["kind"])
        except ValueError:
            raise InvalidArgument(f"{at}.kind: expected Note or Archive") from None
        created = obj["created_at"]
        created_at = None if created is None else parse_timestamp(created, f"{at}.created_at")
        for label_at, label in (
            (f"{at}.name", name),
            *((f"{at}.aliases[{j}]", a) for j, a in enumerate(aliases)),
        ):
            if not isinstance(label, str) or len(label) > MAX_NAME_LEN:
                raise InvalidArgument(
                    f"{label_at}: expected a name of at most {MAX_NAME_LEN} characters"
                )
            try:
                key = name_key(label)
            except InvalidArgument as exc:
                raise InvalidArgument(f"{label_at}: {exc}") from None
            if key in names:
                raise InvalidArgument(f"{label_at}: the name {label!r} is used twice")
            names.add(key)
        ids.add(entry_id)
        out.append(
            NoteEntry(
                id=entry_id,
                name=name,
                content=content,
                kind=kind,
                aliases=list(aliases),
                created_at=created_at,
            )
        )
    return out


class StagedNotes:
    """A merged notes file written beside its target, not yet in place; holds the
    file's writer lock until `publish` or `discard`."""

    def __init__(self, path: Path, tmp: str, lock_fd: int) -> None:
        self.path, self.tmp, self._lock_fd = path, tmp, lock_fd

    def publish(self) -> None:
        try:
            os.replace(self.tmp, self.path)
            _fsync_dir(self.path.parent)
        except OSError as exc:
            raise OSError(
                f"the session was imported but its notes could not be put in place "
                f"({exc}); move {self.tmp} to {self.path} by hand"
            ) from exc
        finally:
            os.close(self._lock_fd)

    def discard(self) -> None:
        try:
            os.unlink(self.tmp)
        except FileNotFoundError:
            pass
        finally:
            os.close(self._lock_fd)


def stage(path: Path, entries: list[NoteEntry]) -> StagedNotes | None:
    """Check the merge of `entries` into `path` and write the result beside it (None when
    it adds nothing). Conflict for a clashing note, StoreCorrupt for a target file that
    cannot be read or a directory that cannot be written; nothing is left behind."""
    if not entries:
        return None
    try:
        fd = lock_file(path)
    except OSError as exc:
        raise StoreCorrupt(f"cannot write the notes file {path}: {exc}") from exc
    tmp: str | None = None
    try:
        data = NotesFile.open(path).merged(entries)
        if data is None:
            os.close(fd)
            return None
        tmp_fd, tmp = tempfile.mkstemp(
            dir=path.parent, prefix=f".{path.name}.import-", suffix=".tmp"
        )
        with os.fdopen(tmp_fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        return StagedNotes(path, tmp, fd)
    except BaseException as exc:
        if tmp is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
        os.close(fd)
        if isinstance(exc, OSError):
            raise StoreCorrupt(f"cannot write the notes file {path}: {exc}") from exc
        raise
