"""`mnemo memory export|import` carries a simple user's notes and archives (their
notes file lives in `memory.simple.store_dir`, outside the database): readable in the
target, byte-equal round trips, conflicts refused, and a failed notes write leaving the
target database without the session."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
import sqlalchemy as sa

from bot.config.settings import Settings
from bot.ops import common, doctor, transfer
from memory.contract.types import NoteKind, SearchMode, SearchQuery, SearchScope, Session
from memory.storage.db import create_engine
from memory.storage.history import conversations
from memory.testing.databases import temp_database_url
from tests.ops.conftest import ALICE, conversation, make_settings, populate

ALICE_2 = Session("tg:alice#2", ALICE.agent_id, ALICE.user_id, "telegram")


async def _export(settings: Settings, session_id: str) -> str:
    out = io.StringIO()
    assert await transfer.export(settings, session_id, "json", out=out) == 0
    return out.getvalue()


async def _import(settings: Settings, text: str, tmp_path: Path) -> int:
    path = tmp_path / "export.json"
    path.write_text(text, encoding="utf-8")
    return await transfer.import_(settings, str(path))


async def _with_notes(settings: Settings, tmp_path: Path) -> None:
    """The fixture's sessions (ALICE compacted: one archive) plus a note with an alias
    and a second session of ALICE's user."""
    await populate(settings, tmp_path)
    async with common.open_memory(settings) as m:
        await m.provider.note_add(ALICE, "Groceries", "milk, eggs and saffron")
        await m.provider.note_alias(ALICE, "Groceries", "shopping")
        await m.provider.bootstrap(ALICE_2)
        await m.provider.append(ALICE_2, *conversation(2))


async def _sessions(url: str) -> list[str]:
    engine = create_engine(url)
    try:
        async with engine.connect() as conn:
            return list((await conn.scalars(sa.select(conversations.c.session_id))).all())
    finally:
        await engine.dispose()


def _notes_file(settings: Settings) -> Path:
    return Path(settings.memory.simple.store_dir) / ALICE.agent_id / f"{ALICE.user_id}.mem"


@pytest.mark.postgres
async def test_notes_move_from_sqlite_to_postgres_with_another_store_dir(tmp_path: Path) -> None:
    async with (
        temp_database_url("sqlite", tmp_path) as lite,
        temp_database_url("postgres", tmp_path) as pg,
    ):
        source, target = make_settings(lite, tmp_path), make_settings(pg, tmp_path / "target")
        assert source.memory.simple.store_dir != target.memory.simple.store_dir
        await _with_notes(source, tmp_path)
        exported = await _export(source, ALICE.id)
        notes = json.loads(exported)["provider"]["data"]["notes"]
        assert sorted((n["kind"], n["name"]) for n in notes) == [
            ("Archive", "archive-tg-alice-1"),
            ("Note", "Groceries"),
        ]

        assert await _import(target, exported, tmp_path) == 0
        async with common.open_memory(target) as m:
            listed = {e.name: e for e in await m.provider.note_list(ALICE)}
            assert listed["Groceries"].aliases == ["shopping"]
            assert listed["archive-tg-alice-1"].kind == NoteKind.ARCHIVE
            assert (
                await m.provider.note_get(ALICE, "shopping")
            ).content == "milk, eggs and saffron"
            hits = await m.provider.note_search(ALICE, "saffron")
            assert [h.entry.name for h in hits] == ["Groceries"]
            found = await m.provider.search(
                ALICE,
                SearchQuery("question", scope=SearchScope.SUMMARIES, mode=SearchMode.FULL_TEXT),
            )
            assert [r.source_id for r in found] == ["archive-tg-alice-1"]
        # Byte-equal, notes included: the target's file kept the ids.
        assert await _export(target, ALICE.id) == exported
        assert (await doctor.doctor(target, out=io.StringIO(), offline=True)) == 0


async def test_sessions_of_one_user_carry_the_same_notes_once(
    db_url: str, other_db_url: str, tmp_path: Path
) -> None:
    source, target = (
        make_settings(db_url, tmp_path),
        make_settings(other_db_url, tmp_path / "target"),
    )
    await _with_notes(source, tmp_path)
    first, second = await _export(source, ALICE.id), await _export(source, ALICE_2.id)
    assert (
        json.loads(first)["provider"]["data"]["notes"]
        == json.loads(second)["provider"]["data"]["notes"]
    )
    assert await _import(target, first, tmp_path) == 0
    written = _notes_file(target).read_bytes()
    assert await _import(target, second, tmp_path) == 0  # identical notes: skipped
    assert _notes_file(target).read_bytes() == written
    assert await _export(target, ALICE.id) == first
    assert await _export(target, ALICE_2.id) == second


async def test_notes_merge_beside_other_notes_of_the_user(
    db_url: str, other_db_url: str, tmp_path: Path
) -> None:
    source, target = (
        make_settings(db_url, tmp_path),
        make_settings(other_db_url, tmp_path / "target"),
    )
    await _with_notes(source, tmp_path)
    async with common.open_memory(target, create=True) as m:  # a fresh database
        await m.provider.note_add(ALICE, "Birthday", "12 May")
    assert await _import(target, await _export(source, ALICE.id), tmp_path) == 0
    async with common.open_memory(target) as m:
        entries = await m.provider.note_list(ALICE)
    assert [e.name for e in entries] == ["Birthday", "archive-tg-alice-1", "Groceries"]
    assert len({e.id for e in entries}) == 3


async def test_a_differing_note_in_the_target_refuses_the_import(
    db_url: str, other_db_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source, target = (
        make_settings(db_url, tmp_path),
        make_settings(other_db_url, tmp_path / "target"),
    )
    await _with_notes(source, tmp_path)
    async with common.open_memory(target, create=True) as m:  # a fresh database
        await m.provider.note_add(ALICE, "groceries", "bread")  # same name, other text
    before = _notes_file(target).read_bytes()
    assert await _import(target, await _export(source, ALICE.id), tmp_path) == 1
    err = capsys.readouterr().err
    assert "'Groceries' clashes with the existing note 'groceries'" in err
    assert "content" in err
    assert await _sessions(other_db_url) == []
    assert _notes_file(target).read_bytes() == before
    assert [p.name for p in _notes_file(target).parent.iterdir() if p.suffix == ".tmp"] == []


async def test_a_failed_notes_write_leaves_the_database_without_the_session(
    db_url: str, other_db_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source, target = (
        make_settings(db_url, tmp_path),
        make_settings(other_db_url, tmp_path / "target"),
    )
    await _with_notes(source, tmp_path)
    exported = await _export(source, ALICE.id)
    # The store_dir cannot hold files (a file stands in its place; root ignores modes).
    blocker = _notes_file(target).parent.parent
    blocker.parent.mkdir(parents=True)
    blocker.write_text("not a directory")
    assert await _import(target, exported, tmp_path) == 1
    assert "cannot write the notes file" in capsys.readouterr().err
    assert await _sessions(other_db_url) == []
    blocker.unlink()  # fixed, the same import goes through whole
    assert await _import(target, exported, tmp_path) == 0
    assert await _export(target, ALICE.id) == exported
