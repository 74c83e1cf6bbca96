"""`mnemo memory import` refuses a provider's own value longer than its column (simple's
marker `archive_name`, lcm's summary `id`) as it refuses the shared tables' ones: by
name and limit, on both databases alike, writing nothing."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from bot.ops import transfer
from memory.storage.db import create_engine
from memory.storage.history import conversations
from plugins.lcm.models import SUMMARY_ID_LENGTH, context_items, summaries
from plugins.simple.markers import markers
from tests.ops.conftest import ALICE, make_settings, populate

ARCHIVE_NAME_LENGTH = 200  # plugins/simple/models.py: archive_name String(200)


async def _exported(url: str, tmp_path: Path, provider: str) -> dict[str, Any]:
    settings = make_settings(url, tmp_path, provider)
    await populate(settings, tmp_path)
    out = io.StringIO()
    assert await transfer.export(settings, ALICE.id, "json", out=out) == 0
    return json.loads(out.getvalue())


async def _import(url: str, tmp_path: Path, provider: str, doc: dict[str, Any]) -> int:
    path = tmp_path / f"{provider}.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    return await transfer.import_(make_settings(url, tmp_path, provider), str(path))


async def _count(url: str, *tables: sa.Table) -> list[int]:
    engine = create_engine(url)
    try:
        async with engine.connect() as conn:
            return [await conn.scalar(sa.select(sa.func.count()).select_from(t)) for t in tables]
    finally:
        await engine.dispose()


def _rename_summary(data: dict[str, Any], old: str, new: str) -> None:
    """Rename one summary everywhere the overlay names it, so only its length is wrong."""
    for s in data["summaries"]:
        if s["id"] == old:
            s["id"] = new
        s["child_ids"] = [new if c == old else c for c in s["child_ids"]]
    for item in data["context_items"]:
        if item["summary_id"] == old:
            item["summary_id"] = new


async def test_simple_archive_name_too_long_is_refused(
    db_url: str, other_db_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = await _exported(db_url, tmp_path, "simple")
    assert doc["provider"]["data"]["markers"], "the fixture must compact"
    doc["provider"]["data"]["markers"][0]["archive_name"] = "n" * (ARCHIVE_NAME_LENGTH + 1)
    assert await _import(other_db_url, tmp_path, "simple", doc) == 1
    err = capsys.readouterr().err
    assert "import refused, nothing was written" in err, err
    assert (
        f".provider.data.markers[0].archive_name: {ARCHIVE_NAME_LENGTH + 1} characters, "
        f"longer than the limit of {ARCHIVE_NAME_LENGTH}"
    ) in err, err
    assert await _count(other_db_url, conversations, markers) == [0, 0]


async def test_simple_archive_name_at_the_limit_is_imported(
    db_url: str, other_db_url: str, tmp_path: Path
) -> None:
    doc = await _exported(db_url, tmp_path, "simple")
    name = "é" * ARCHIVE_NAME_LENGTH  # characters, not bytes, as VARCHAR(n) counts them
    doc["provider"]["data"]["markers"][0]["archive_name"] = name
    assert await _import(other_db_url, tmp_path, "simple", doc) == 0
    engine = create_engine(other_db_url)
    try:
        async with engine.connect() as conn:
            assert list((await conn.execute(sa.select(markers.c.archive_name))).scalars()) == [name]
    finally:
        await engine.dispose()


async def test_lcm_summary_id_too_long_is_refused(
    db_url: str, other_db_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = await _exported(db_url, tmp_path, "lcm")
    data = doc["provider"]["data"]
    # The last summary is the newest condensed one, named by a context item: renaming it
    # everywhere leaves a document that only its length makes invalid.
    index = len(data["summaries"]) - 1
    _rename_summary(data, data["summaries"][index]["id"], "s" * (SUMMARY_ID_LENGTH + 1))
    assert await _import(other_db_url, tmp_path, "lcm", doc) == 1
    err = capsys.readouterr().err
    assert "import refused, nothing was written" in err, err
    assert (
        f".provider.data.summaries[{index}].id: {SUMMARY_ID_LENGTH + 1} characters, "
        f"longer than the limit of {SUMMARY_ID_LENGTH}"
    ) in err, err
    assert await _count(other_db_url, conversations, summaries, context_items) == [0, 0, 0]


async def test_lcm_summary_id_at_the_limit_is_imported(
    db_url: str, other_db_url: str, tmp_path: Path
) -> None:
    doc = await _exported(db_url, tmp_path, "lcm")
    data = doc["provider"]["data"]
    new_id = "s" * SUMMARY_ID_LENGTH
    _rename_summary(data, data["summaries"][-1]["id"], new_id)
    assert await _import(other_db_url, tmp_path, "lcm", doc) == 0
    engine = create_engine(other_db_url)
    try:
        async with engine.connect() as conn:
            ids = set((await conn.execute(sa.select(summaries.c.id))).scalars())
            named = set((await conn.execute(sa.select(context_items.c.summary_id))).scalars())
    finally:
        await engine.dispose()
    assert new_id in ids and new_id in named
