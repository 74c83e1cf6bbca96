"""`mnemo memory import` refuses a value longer than its column holds, naming the field
and the limit, on both databases alike (PostgreSQL would raise a raw DataError, SQLite
would store it), and writes nothing."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from bot.ops import transfer
from memory.storage.db import create_engine
from memory.storage.history import conversations, messages, parts
from memory.storage.stores import changelog_table, snapshot_table, state_table
from tests.ops.conftest import ALICE, make_settings, populate

# (where in the document, the column's limit): each gets a value one character too long.
# (A message's role and a part's kind are enumerations: tests/ops/test_hostile_import.py.)
TOO_LONG: list[tuple[tuple[str | int, ...], int]] = [
    (("session", "id"), 255),
    (("session", "title"), 200),
    (("session", "agent_id"), 128),
    (("session", "channel"), 32),
    (("snapshot", "agent_id"), 128),
    (("user_memory", "changelog", 0, "scope"), 32),
    (("user_memory", "changelog", 0, "session_id"), 255),
]


def _lengthen(doc: dict[str, Any], where: tuple[str | int, ...], limit: int) -> str:
    """Set the value at `where` one character past `limit`; the error the import gives."""
    target: Any = doc
    for step in where[:-1]:
        target = target[step]
    target[where[-1]] = "x" * (limit + 1)
    path = "".join(f"[{s}]" if isinstance(s, int) else f".{s}" for s in where)
    return f"{path}: {limit + 1} characters, longer than the limit of {limit}"


async def _export(settings: Any, session_id: str) -> str:
    out = io.StringIO()
    assert await transfer.export(settings, session_id, "json", out=out) == 0
    return out.getvalue()


async def _row_counts(url: str) -> list[int]:
    engine = create_engine(url)
    try:
        async with engine.connect() as conn:
            return [
                await conn.scalar(sa.select(sa.func.count()).select_from(t))
                for t in (
                    conversations,
                    messages,
                    parts,
                    snapshot_table,
                    state_table,
                    changelog_table,
                )
            ]
    finally:
        await engine.dispose()


async def test_too_long_values_are_refused_by_name_and_nothing_is_written(
    db_url: str, other_db_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = make_settings(db_url, tmp_path)
    target = make_settings(other_db_url, tmp_path)
    await populate(source, tmp_path, compact=False)
    exported = await _export(source, ALICE.id)
    path = tmp_path / "long.json"
    for where, limit in TOO_LONG:
        doc = json.loads(exported)
        message = _lengthen(doc, where, limit)
        path.write_text(json.dumps(doc), encoding="utf-8")
        assert await transfer.import_(target, str(path)) == 1, message
        err = capsys.readouterr().err
        assert "import refused, nothing was written" in err and message in err, err
        assert await _row_counts(other_db_url) == [0, 0, 0, 0, 0, 0], message


async def test_values_at_the_limit_are_imported_intact(
    db_url: str, other_db_url: str, tmp_path: Path
) -> None:
    source = make_settings(db_url, tmp_path)
    target = make_settings(other_db_url, tmp_path)
    await populate(source, tmp_path, compact=False)
    doc = json.loads(await _export(source, ALICE.id))
    # Characters, not bytes, as PostgreSQL's VARCHAR(n) counts them.
    doc["session"].update(id="é" * 255, title="🙂" * 200, agent_id="a" * 128, channel="c" * 32)
    doc["snapshot"].update(agent_id="a" * 128)
    path = tmp_path / "edge.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    assert await transfer.import_(target, str(path)) == 0
    back = json.loads(await _export(target, "é" * 255))
    assert back["session"] == doc["session"]
    assert back["messages"] == doc["messages"]
