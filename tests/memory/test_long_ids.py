"""Tool-call ids and tool names are the model's strings, of any length (core revision
0003_parts_text_ids): stored, loaded, exported and imported intact, on a fresh database
and on one created before that revision."""

from __future__ import annotations

from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from alembic.script import ScriptDirectory
from sqlalchemy.ext.asyncio import AsyncEngine

import memory.storage.db
from memory.contract.types import Message, Session, ToolCall
from memory.storage.db import (
    create_engine,
    current_heads,
    migrate,
    migration_locations,
    write_transaction,
)
from memory.storage.history import HistoryStore
from memory.testing.databases import temp_database_url
from memory.transfer.session import export_session, import_session

S = Session("tg:long", "default", 7, "telegram")
LONG_ID = "call_" + "x" * 995  # 1,000 characters
LONG_NAME = "tool_" + "n" * 395  # a made-up tool name, past 255 too
PREVIOUS_CORE_HEAD = "0002_history"
RELEASED_HEADS = {"lcm": "lcm_0003"}  # of branches that later came to need a newer core


def turn(call_id: str, name: str) -> list[Message]:
    call = ToolCall(call_id, name, '{"q": 1}')
    return [
        Message("user", f"ask {name[:8]}"),
        Message("assistant", "", tool_calls=[call]),
        Message("tool", "result", tool_call_id=call_id, name=name),
        Message("assistant", "done"),
    ]


def strip_times(msgs: list[Message]) -> list[tuple]:
    return [(m.role, m.content, m.tool_calls, m.tool_call_id, m.name) for m in msgs]


async def test_long_tool_call_id_round_trips(engine) -> None:
    store = HistoryStore(engine)
    sent = turn(LONG_ID, LONG_NAME)
    await store.append(S, *sent)
    back = await store.load_history(S.id)
    assert strip_times(back) == strip_times(sent)
    assert len(back[1].tool_calls[0].id) == 1000 and back[2].tool_call_id == LONG_ID


async def test_long_ids_survive_export_and_import(engine, db_kind: str, tmp_path: Path) -> None:
    await HistoryStore(engine).append(S, *turn(LONG_ID, LONG_NAME))
    doc = await export_session(engine, S.id)
    target_dir = tmp_path / "target"
    target_dir.mkdir()
    async with temp_database_url(db_kind, target_dir) as url:
        target = create_engine(url)
        try:
            await migrate(target)
            await import_session(target, doc)
            assert await export_session(target, S.id) == doc
        finally:
            await target.dispose()


# --- a database created before 0003_parts_text_ids -----------------------------------


def _alembic_config(connection) -> Config:  # type: ignore[no-untyped-def]
    # The same locations `migrate` uses, so every installed branch is in the chain.
    cfg = Config()
    cfg.set_main_option(
        "script_location", str(Path(memory.storage.db.__file__).parent.parent / "migrations")
    )
    cfg.set_main_option("version_locations", " ".join(migration_locations()))
    cfg.set_main_option("path_separator", "space")
    cfg.attributes["connection"] = connection
    return cfg


def _upgrade_to_previous_heads(sync_conn) -> None:  # type: ignore[no-untyped-def]
    """Core at PREVIOUS_CORE_HEAD, every other branch (lcm's FTS triggers on `messages`
    among them) at its head: the schema the release before this revision left."""
    cfg = _alembic_config(sync_conn)
    command.upgrade(cfg, PREVIOUS_CORE_HEAD)
    for base in ScriptDirectory.from_config(cfg).get_bases():
        labels = ScriptDirectory.from_config(cfg).get_revision(base).branch_labels
        if "core" not in labels:
            for label in labels:
                # lcm's later revisions need a newer core (lcm_0004: 0004_search_index)
                command.upgrade(cfg, RELEASED_HEADS.get(label, f"{label}@head"))


async def _triggers_on_messages(engine: AsyncEngine) -> set[str]:
    if engine.dialect.name == "sqlite":
        query = "SELECT name FROM sqlite_master WHERE type = 'trigger' AND tbl_name = 'messages'"
    else:
        query = (
            "SELECT tgname FROM pg_trigger WHERE tgrelid = 'messages'::regclass "
            "AND NOT tgisinternal"
        )
    async with engine.connect() as conn:
        return set((await conn.execute(sa.text(query))).scalars())


async def _part_column_types(engine: AsyncEngine) -> dict[str, str]:
    def read(sync_conn) -> dict[str, str]:  # type: ignore[no-untyped-def]
        columns = sa.inspect(sync_conn).get_columns("message_parts")
        return {c["name"]: str(c["type"].compile(dialect=sync_conn.dialect)) for c in columns}

    async with engine.connect() as conn:
        return await conn.run_sync(read)


async def test_migrating_an_older_database_widens_ids(engine, db_url: str, db_kind: str) -> None:
    old = create_engine(db_url)
    try:
        async with write_transaction(old) as conn:
            await conn.run_sync(_upgrade_to_previous_heads)
        store = HistoryStore(old)
        await store.append(S, *turn("call_short", "memory"))
        before = turn("call_short", "memory")
        if db_kind == "postgres":
            # What this revision fixes: the old VARCHAR(255) refused the whole turn.
            with pytest.raises(sa.exc.DBAPIError, match="too long"):
                await store.append(S, *turn(LONG_ID, LONG_NAME))
        else:  # SQLite never enforced the length
            await store.append(S, *turn(LONG_ID, LONG_NAME))
            before += turn(LONG_ID, LONG_NAME)
        triggers = await _triggers_on_messages(old)
        if db_kind == "sqlite":
            assert triggers, "lcm's FTS triggers should be in the previous schema"

        await migrate(old)

        # The same revisions as a database migrated from scratch (a branch revision that
        # depends on core's head stands for both in alembic_version).
        async with old.connect() as conn, engine.connect() as fresh:
            assert await current_heads(conn) == await current_heads(fresh)
        # The triggers a database migrated from scratch has (lcm's FTS triggers gave way
        # to core's shared index in 0004_search_index / lcm_0004).
        assert await _triggers_on_messages(old) == await _triggers_on_messages(engine)
        # Same column types as a database migrated from scratch.
        assert await _part_column_types(old) == await _part_column_types(engine)
        await store.append(S, *turn(LONG_ID, LONG_NAME))
        history = await store.load_history(S.id)
        assert strip_times(history) == strip_times(before + turn(LONG_ID, LONG_NAME))
    finally:
        await old.dispose()
