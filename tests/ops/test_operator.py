"""`mnemo memory ...` against real databases: export/import round trips, doctor on
clean and damaged data, backup and restore, listing, search, compaction."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
import sqlalchemy as sa

from bot.channels.telegram.delivery.handled import telegram_updates
from bot.channels.telegram.delivery.inbox import telegram_inbox
from bot.ops import backup, compact, doctor, search, sessions, transfer
from memory.contract.types import utcnow
from memory.storage.db import create_engine
from memory.storage.history import conversations, messages
from memory.storage.stores import changelog_table
from memory.testing.databases import temp_database_url
from tests.fakes.openai_server import FakeOpenAI
from tests.ops.conftest import ALICE, GROUP, make_settings, populate


async def _export(settings, session_id: str, fmt: str = "json") -> str:
    out = io.StringIO()
    assert await transfer.export(settings, session_id, fmt, out=out) == 0
    return out.getvalue()


async def _doctor(settings) -> tuple[int, str]:
    out = io.StringIO()
    # The data only: these settings name no model server (its probe: test_doctor_models.py).
    code = await doctor.doctor(settings, out=out, offline=True)
    return code, out.getvalue()


async def _execute(url: str, statement: sa.Executable) -> None:
    engine = create_engine(url)
    try:
        async with engine.begin() as conn:
            await conn.execute(statement)
    finally:
        await engine.dispose()


async def test_export_import_round_trip_is_exact(
    db_url: str, other_db_url: str, tmp_path: Path
) -> None:
    source = make_settings(db_url, tmp_path)
    target = make_settings(other_db_url, tmp_path)
    await populate(source, tmp_path)
    for session in (ALICE, GROUP):
        exported = await _export(source, session.id)
        doc = json.loads(exported)
        # The document really holds the hard parts: tool calls, results, reasoning, memory.
        kinds = {p["kind"] for m in doc["messages"] for p in m["parts"]}
        assert kinds == {"reasoning", "tool_call", "tool_result"}
        assert doc["user_memory"]["changelog"] and doc["snapshot"] is not None
        if session is ALICE:  # compacted by the fixture: simple's marker travels too
            assert doc["provider"]["name"] == "simple"
            assert doc["provider"]["data"]["markers"][0]["through_seq"] > 0
        path = tmp_path / f"{session.user_id}.json"
        path.write_text(exported, encoding="utf-8")
        assert await transfer.import_(target, str(path)) == 0
        assert await _export(target, session.id) == exported
    assert (await _doctor(target))[0] == 0


async def test_sqlite_export_imports_into_postgres(tmp_path: Path) -> None:
    """The way off SQLite: export each session, import into PostgreSQL."""
    async with (
        temp_database_url("sqlite", tmp_path) as lite,
        temp_database_url("postgres", tmp_path) as pg,
    ):
        source, target = make_settings(lite, tmp_path), make_settings(pg, tmp_path)
        await populate(source, tmp_path)
        exported = await _export(source, ALICE.id)
        path = tmp_path / "alice.json"
        path.write_text(exported, encoding="utf-8")
        assert await transfer.import_(target, str(path)) == 0
        assert await _export(target, ALICE.id) == exported


async def test_import_refuses_an_existing_session_and_writes_nothing(
    db_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    settings = make_settings(db_url, tmp_path)
    await populate(settings, tmp_path, compact=False)
    before = await _export(settings, ALICE.id)
    path = tmp_path / "alice.json"
    path.write_text(before, encoding="utf-8")
    assert await transfer.import_(settings, str(path)) == 1
    assert "already exists" in capsys.readouterr().err
    assert await _export(settings, ALICE.id) == before


DAMAGES = [
    (lambda d: d.update(format="other"), "not a mnemo session export"),
    (lambda d: d["messages"][3].update(seq="7"), ".messages[3].seq: expected an integer"),
    (lambda d: d["messages"][1]["parts"][0].pop("kind"), ".messages[1].parts[0].kind: missing"),
    (lambda d: d["messages"][2].update(created_at="yesterday"), "ISO-8601"),
    (lambda d: d["messages"][4].update(seq=1), "appears twice"),
    (lambda d: d["user_memory"]["changelog"][-1].update(scope=None), "scope: expected a string"),
]


async def test_bad_import_is_refused_whole(
    db_url: str, other_db_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = make_settings(db_url, tmp_path)
    target = make_settings(other_db_url, tmp_path)
    await populate(source, tmp_path, compact=False)
    exported = await _export(source, ALICE.id)
    for damage, message in DAMAGES:
        doc = json.loads(exported)
        damage(doc)
        path = tmp_path / "bad.json"
        path.write_text(json.dumps(doc), encoding="utf-8")
        assert await transfer.import_(target, str(path)) == 1
        assert message in capsys.readouterr().err
    engine = create_engine(other_db_url)
    try:
        async with engine.connect() as conn:  # every refused import left nothing behind
            assert await conn.scalar(sa.select(sa.func.count()).select_from(conversations)) == 0
            assert await conn.scalar(sa.select(sa.func.count()).select_from(messages)) == 0
            assert await conn.scalar(sa.select(sa.func.count()).select_from(changelog_table)) == 0
    finally:
        await engine.dispose()


async def test_import_of_a_file_that_is_not_json(db_url: str, tmp_path: Path, capsys) -> None:
    path = tmp_path / "x.json"
    path.write_text("{not json", encoding="utf-8")
    assert await transfer.import_(make_settings(db_url, tmp_path), str(path)) == 1
    assert "is not a JSON export" in capsys.readouterr().err
    assert (
        await transfer.import_(make_settings(db_url, tmp_path), str(tmp_path / "missing.json")) == 1
    )
    assert "cannot read" in capsys.readouterr().err


async def test_markdown_export_shows_messages_tools_and_memory(db_url: str, tmp_path: Path) -> None:
    settings = make_settings(db_url, tmp_path)
    await populate(settings, tmp_path)
    md = await _export(settings, ALICE.id, "markdown")
    assert md.startswith(f"# Session `{ALICE.id}`")
    assert "### #1 · user ·" in md and "question 0: what's C++" in md
    assert "tool call `memory` (id `call_0`)" in md and "> reasoning: think 0" in md
    assert "### Changelog" in md and "| profile | update | agent |" in md


async def test_doctor_is_clean_on_healthy_data(db_url: str, tmp_path: Path) -> None:
    settings = make_settings(db_url, tmp_path)
    await populate(settings, tmp_path)
    code, out = await _doctor(settings)
    assert code == 0, out
    assert out.startswith("ok: no faults")


async def test_doctor_notes_what_the_bot_left_for_its_next_start(
    db_url: str, tmp_path: Path
) -> None:
    settings = make_settings(db_url, tmp_path)
    await populate(settings, tmp_path)
    now = utcnow()
    await _execute(
        db_url, sa.insert(telegram_inbox).values(bot_id=7, update_id=9, payload="{}", parked_at=now)
    )
    await _execute(
        db_url,
        sa.insert(telegram_inbox).values(
            bot_id=7, update_id=10, payload="{x", parked_at=now, unreadable=True
        ),
    )
    await _execute(
        db_url,
        sa.insert(telegram_updates).values(
            bot_id=7,
            update_id=8,
            handled_at=now,
            resume=True,
            session_id="s",
            user_id=1,
            chat_id=1,
            message_id=1,
        ),
    )
    code, out = await _doctor(settings)
    assert code == 0, out  # left by design after a stop or crash: not a fault
    assert out.startswith("ok: no faults")
    assert (
        "note: 1 Telegram update(s) parked and 1 message(s) possibly owed an answer; "
        "the bot handles them when it (re)starts"
    ) in out
    assert "note: 1 parked Telegram update(s) could not be read and are not handled" in out


async def test_doctor_names_a_missing_message(db_url: str, tmp_path: Path) -> None:
    settings = make_settings(db_url, tmp_path)
    await populate(settings, tmp_path, compact=False)
    await _execute(db_url, sa.delete(messages).where(messages.c.seq == 3))
    code, out = await _doctor(settings)
    assert code == 1
    assert "FAULT messages_seq_gap: session " in out


async def test_doctor_names_a_changelog_version_going_backwards(
    db_url: str, tmp_path: Path
) -> None:
    settings = make_settings(db_url, tmp_path)
    await populate(settings, tmp_path, compact=False)
    last = (
        sa.select(sa.func.max(changelog_table.c.id))
        .where(changelog_table.c.user_id == ALICE.user_id, changelog_table.c.scope == "profile")
        .scalar_subquery()
    )
    await _execute(
        db_url,
        sa.update(changelog_table)
        .where(changelog_table.c.id == last)
        .values(version_before=0, version_after=1),
    )
    code, out = await _doctor(settings)
    assert code == 1
    assert f"FAULT changelog_version_backwards: user {ALICE.user_id} agent default" in out
    assert "memory_state_version_mismatch" in out


async def test_sqlite_backup_restores_to_a_clean_database(tmp_path: Path, capsys) -> None:
    async with temp_database_url("sqlite", tmp_path) as url:
        settings = make_settings(url, tmp_path)
        await populate(settings, tmp_path)
        original = await _export(settings, ALICE.id)
        copy = tmp_path / "backups" / "mnemo.db"
        assert backup.backup(settings, str(copy)) == 0
        assert "backed up" in capsys.readouterr().out
        restored = make_settings(f"sqlite+aiosqlite:///{copy}", tmp_path)
        code, out = await _doctor(restored)
        assert code == 0, out
        assert await _export(restored, ALICE.id) == original
        # A backup never overwrites.
        assert backup.backup(settings, str(copy)) == 1
        assert "exists" in capsys.readouterr().err


def test_postgres_backup_prints_the_pg_dump_command(tmp_path: Path, capsys) -> None:
    settings = make_settings("postgresql+psycopg://mnemo:secret@db:5432/mnemo", tmp_path)
    assert backup.backup(settings, "/backups/mnemo.dump") == 1
    captured = capsys.readouterr()
    assert captured.out.strip() == (
        "pg_dump --format=custom --no-owner --file /backups/mnemo.dump 'postgresql://mnemo@db:5432/mnemo'"
    )
    assert "secret" not in captured.out + captured.err


async def test_sessions_status_and_search(db_url: str, tmp_path: Path, capsys) -> None:
    settings = make_settings(db_url, tmp_path)
    await populate(settings, tmp_path)
    out = io.StringIO()
    assert await sessions.sessions(settings, out=out) == 0
    lines = out.getvalue().splitlines()
    assert lines[0].split()[:5] == ["SESSION", "USER", "MESSAGES", "SUMMARIES", "LAST"]
    rows = {line.split()[0]: line.split() for line in lines[1:]}
    assert rows[ALICE.id][1:3] == [str(ALICE.user_id), "24"]  # 9 exchanges, 3 through a tool call
    assert rows[GROUP.id][1:3] == [str(GROUP.user_id), "12"]

    out = io.StringIO()
    assert await sessions.status(settings, ALICE.id, out=out) == 0
    status = dict(line.split(None, 1) for line in out.getvalue().splitlines())
    assert status["messages"].startswith("24 (")
    assert status["provider"] == "simple"
    assert status["memory"] == "snapshot version 5, current version 5"
    assert await sessions.status(settings, "nobody", out=io.StringIO()) == 1

    out = io.StringIO()
    assert await search.search(settings, GROUP.id, "question 2", out=out) == 0
    assert "question 2" in out.getvalue()


async def test_compact_all_with_progress(db_url: str, tmp_path: Path, capsys) -> None:
    async with FakeOpenAI() as llm:
        settings = make_settings(db_url, tmp_path, llm_url=llm.base_url)
        await populate(settings, tmp_path, compact=False)
        assert await compact.compact(settings, None, True) == 0
        captured = capsys.readouterr()
        assert captured.err.splitlines()[-1].startswith("[" + "#" * 30 + "] 2/2 ")
        assert captured.out.startswith("compacted 2/2 session(s)")
        assert llm.requests  # the summaries came from the LLM
        # Compacting again changes nothing and still succeeds.
        assert await compact.compact(settings, ALICE.id, False) == 0
        assert await compact.compact(settings, None, False) == 2
        code, out = await _doctor(settings)
        assert code == 0, out


async def test_doctor_names_a_simple_marker_past_the_history(db_url: str, tmp_path: Path) -> None:
    from plugins.simple.markers import markers

    settings = make_settings(db_url, tmp_path)
    await populate(settings, tmp_path)
    await _execute(db_url, sa.update(markers).values(through_seq=999))
    code, out = await _doctor(settings)
    assert code == 1
    assert f"FAULT marker_beyond_history: session {ALICE.id} marker" in out
