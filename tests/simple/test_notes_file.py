"""The single-file notes/archives memory: operations, errors, persistence, crash safety."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from memory.contract.errors import Conflict, InvalidArgument, NotFound, StoreCorrupt
from memory.contract.types import NoteKind
from plugins.simple.notes_file import Add, Alias, NotesFile, Remove, Rename, Write


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "agent" / "42.mem"


def test_missing_file_opens_empty_and_is_written_on_first_apply(path: Path) -> None:
    notes = NotesFile.open(path)
    assert len(notes) == 0 and notes.entries() == []
    assert not path.exists()
    entry = notes.apply(Add("groceries", "milk, eggs"))
    assert path.exists()
    assert entry.id == 1 and entry.kind == NoteKind.NOTE and entry.created_at is not None
    reopened = NotesFile.open(path)
    assert reopened.get("groceries") == entry


def test_ids_are_monotonic_and_never_reused(path: Path) -> None:
    notes = NotesFile.open(path)
    a = notes.apply(Add("a", "one"))
    b = notes.apply(Add("b", "two"))
    notes.apply(Remove("b"))
    c = notes.apply(Add("c", "three"))
    assert (a.id, b.id, c.id) == (1, 2, 3)
    # ... also after reopening (next_id is persisted, not derived from the entries).
    notes.apply(Remove("c"))
    assert NotesFile.open(path).apply(Add("d", "four")).id == 4


def test_every_operation_round_trips_through_the_file(path: Path) -> None:
    notes = NotesFile.open(path)
    notes.apply(Add("groceries", "milk, eggs"))
    notes.apply(Add("archive-s1-1", "Goal: ship it", NoteKind.ARCHIVE))
    notes.apply(Alias("groceries", "shopping"))
    notes.apply(Rename("groceries", "Food List"))
    notes.apply(Write("shopping", "milk, eggs, bread\nline two"))
    notes.apply(Add("tmp", "x"))
    notes.apply(Remove("tmp"))
    reopened = NotesFile.open(path)
    assert reopened.entries() == notes.entries()
    food = reopened.get("food list")
    assert (food.name, food.aliases, food.content) == (
        "Food List",
        ["shopping"],
        "milk, eggs, bread\nline two",
    )
    assert reopened.get("archive-s1-1").kind == NoteKind.ARCHIVE
    with pytest.raises(NotFound):
        reopened.get("tmp")


def test_names_and_aliases_share_one_case_insensitive_namespace(path: Path) -> None:
    notes = NotesFile.open(path)
    notes.apply(Add("Groceries", "milk"))
    notes.apply(Add("todo", "call mum"))
    notes.apply(Alias("todo", "tasks"))
    for op in (
        Add("groceries", "dup"),  # same name, other case
        Add("  TASKS ", "dup"),  # another entry's alias
        Alias("todo", "groceries"),  # alias onto another entry's name
        Alias("groceries", "tasks"),  # alias onto another entry's alias
        Rename("todo", "GROCERIES"),  # rename onto another entry's name
    ):
        with pytest.raises(Conflict):
            notes.apply(op)
    with pytest.raises(Conflict):
        notes.apply(Alias("todo", "todo"))  # already bound (to itself)
    # Nothing above changed anything.
    assert [(e.name, e.aliases) for e in NotesFile.open(path).entries()] == [
        ("Groceries", []),
        ("todo", ["tasks"]),
    ]


def test_rename_rebinds_the_canonical_name(path: Path) -> None:
    notes = NotesFile.open(path)
    notes.apply(Add("draft", "text"))
    notes.apply(Alias("draft", "final"))
    renamed = notes.apply(Rename("draft", "final"))  # promote an own alias
    assert (renamed.name, renamed.aliases) == ("final", [])
    with pytest.raises(NotFound):
        notes.get("draft")  # the old canonical name no longer resolves
    notes.apply(Add("draft", "a new entry may take the freed name"))
    assert notes.apply(Rename("final", "FINAL")).name == "FINAL"  # respelling is allowed


def test_unknown_names_and_bad_input_are_clear_errors(path: Path) -> None:
    notes = NotesFile.open(path)
    for op in (Rename("nope", "x"), Alias("nope", "x"), Write("nope", "x"), Remove("nope")):
        with pytest.raises(NotFound, match="nope"):
            notes.apply(op)
    for op in (
        Add("", "x"),
        Add("   ", "x"),
        Add("ok", "   "),
        Add("a\x00b", "x"),
        Add("n" * 201, "x"),
    ):
        with pytest.raises(InvalidArgument):
            notes.apply(op)
    assert not path.exists()  # no failed apply wrote anything


def test_search_covers_name_and_content_not_aliases(path: Path) -> None:
    notes = NotesFile.open(path)
    notes.apply(Add("groceries", "milk and eggs"))
    notes.apply(Add("holiday plan", "flights to Lisbon in May"))
    notes.apply(Add("archive-s1-1", "we decided on Lisbon", NoteKind.ARCHIVE))
    notes.apply(Alias("groceries", "zebra"))
    assert notes.search("zebra") == []  # aliases are resolution, not search terms
    assert [h.entry.name for h in notes.search("groceries")] == ["groceries"]
    hits = notes.search("lisbon holiday")
    assert [h.entry.name for h in hits] == ["holiday plan", "archive-s1-1"]
    assert hits[0].score > hits[1].score > 0
    assert len(notes.search("lisbon", limit=1)) == 1
    # The index follows writes, renames and removals.
    notes.apply(Write("groceries", "bread"))
    notes.apply(Rename("holiday plan", "trip"))
    notes.apply(Remove("archive-s1-1"))
    assert notes.search("milk") == [] and notes.search("holiday") == []
    # Both match one rare term; the shorter entry ranks first (length normalisation).
    assert [h.entry.name for h in notes.search("bread trip")] == ["groceries", "trip"]


def test_returned_entries_are_copies(path: Path) -> None:
    notes = NotesFile.open(path)
    notes.apply(Add("a", "text"))
    got = notes.get("a")
    got.aliases.append("b")
    got.content = "changed"
    assert notes.get("a").aliases == [] and notes.get("a").content == "text"


def test_failure_between_temp_write_and_rename_keeps_previous_snapshot(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    notes = NotesFile.open(path)
    notes.apply(Add("keep", "the old content"))
    before = path.read_bytes()

    def broken_replace(src: str, dst: str) -> None:
        raise OSError("disk on fire")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(OSError, match="disk on fire"):
        notes.apply(Write("keep", "new content"))
    with pytest.raises(OSError):
        notes.apply(Add("other", "x"))
    monkeypatch.undo()

    assert path.read_bytes() == before
    assert [p.name for p in path.parent.iterdir()] == ["42.mem"]  # temp files cleaned up
    # RAM kept the old state too, and later applies continue from it.
    assert notes.get("keep").content == "the old content"
    with pytest.raises(NotFound):
        notes.get("other")
    assert notes.apply(Add("other", "x")).id == 2
    assert NotesFile.open(path).get("keep").content == "the old content"


@pytest.mark.parametrize(
    "content, where",
    [
        (b"", "empty file"),
        (b"not json\n", "line 1"),
        (b'{"format": "other", "version": 1}\n', "not a mnemo notes file"),
        (b'{"format": "mnemo-notes", "version": 99, "next_id": 1, "entries": 0}\n', "version"),
        (
            b'{"format": "mnemo-notes", "version": 1, "next_id": 5, "entries": 2}\n{"id": 1}\n',
            "2 entries",
        ),
        (
            b'{"format": "mnemo-notes", "version": 1, "next_id": 5, "entries": 1}\n{"id": 1}\n',
            "line 2",
        ),
    ],
)
def test_corrupt_file_is_a_clear_error_and_left_untouched(
    path: Path, content: bytes, where: str
) -> None:
    path.parent.mkdir(parents=True)
    path.write_bytes(content)
    with pytest.raises(StoreCorrupt, match=where):
        NotesFile.open(path)
    assert path.read_bytes() == content


def test_truncated_and_inconsistent_files_are_corrupt(path: Path) -> None:
    notes = NotesFile.open(path)
    notes.apply(Add("a", "one"))
    notes.apply(Add("b", "two"))
    good = path.read_bytes()
    path.write_bytes(good[: good.rindex(b"{")])  # lose the last entry
    with pytest.raises(StoreCorrupt, match="1 entries|holds 1"):
        NotesFile.open(path)
    lines = good.splitlines()
    second = json.loads(lines[2])
    second["name"] = "A"  # clashes with entry "a"
    path.write_bytes(b"\n".join([lines[0], lines[1], json.dumps(second).encode()]) + b"\n")
    with pytest.raises(StoreCorrupt, match="bound twice"):
        NotesFile.open(path)


def test_hostile_text_is_stored(path: Path) -> None:
    notes = NotesFile.open(path)
    notes.apply(Add("odd \ud800 name", "nul \x00 and lone \udfff surrogate 🙂"))
    entry = NotesFile.open(path).entries()[0]
    assert entry.name == "odd \ufffd name"
    assert entry.content == "nul \ufffd and lone \ufffd surrogate 🙂"
