"""`mnemo memory usage` through the CLI: a plain table of what model calls cost, read
only (a database that does not exist is not created), and doctor's spend-guard lines."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from pathlib import Path

import pytest

from bot.cli import main
from memory.contract.types import utcnow
from memory.storage.db import create_engine, migrate
from memory.storage.usage import TokenUsage, UsageRow, UsageStore


def config(tmp_path: Path, db: Path, extra: str = "") -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(
        f"database: {{url: 'sqlite+aiosqlite:///{db}'}}\ndata_dir: {tmp_path / 'data'}\n" + extra,
        encoding="utf-8",
    )
    return path


def seed(db: Path, rows: list[UsageRow]) -> None:
    async def go() -> None:
        engine = create_engine(f"sqlite+aiosqlite:///{db}")
        try:
            await migrate(engine)
            await UsageStore(engine).write(rows)
        finally:
            await engine.dispose()

    asyncio.run(go())


def test_a_missing_database_is_not_created(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "typo.db"
    assert main(["memory", "usage", "--config", str(config(tmp_path, db))]) == 1
    assert f"no database at {db}" in capsys.readouterr().err
    assert not db.exists()


def test_usage_by_user_and_kind_with_costs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "m.db"
    now = utcnow()
    seed(
        db,
        [
            UsageRow("chat", "gpt-x", TokenUsage(1000, 400, 100), user_id=42, at=now),
            UsageRow("chat", "gpt-x", TokenUsage(2000, 0, 200), user_id=43, at=now),
            UsageRow("summary", "gpt-x", TokenUsage(500, 0, 50, estimated=True), user_id=42),
            UsageRow("chat", "gpt-x", TokenUsage(9, 0, 9), user_id=42, at=now - timedelta(days=90)),
        ],
    )
    prices = "llm:\n  prices:\n    gpt-x: {input: 1.0, cached_input: 0.5, output: 4.0}\n"
    cfg = config(tmp_path, db, prices)
    assert main(["memory", "usage", "--by", "user", "--config", str(cfg)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[1].split() == [
        "user",
        "model",
        "calls",
        "prompt",
        "cached",
        "completion",
        "total",
        "cost",
    ]
    # user 42: 1,500 prompt (400 cached), 150 completion, the summary estimated (~):
    # 1,100 x 1.0 + 400 x 0.5 + 150 x 4.0 per million
    assert out[2].split() == ["42", "gpt-x", "2", "~1500", "400", "~150", "~1650", "0.0019"]
    assert out[3].split() == ["43", "gpt-x", "1", "2000", "0", "200", "2200", "0.0028"]
    assert "total: 3 call(s), 3,850 tokens" in out
    assert main(["memory", "usage", "--by", "kind", "--days", "1", "--config", str(cfg)]) == 0
    kinds = capsys.readouterr().out
    assert "chat" in kinds and "summary" in kinds


def test_usage_by_model_shows_the_model_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "m.db"
    seed(
        db,
        [
            UsageRow("chat", "gpt-x", TokenUsage(1000, 0, 100), user_id=42),
            UsageRow("summary", "small-y", TokenUsage(500, 0, 50), user_id=42),
        ],
    )
    assert main(["memory", "usage", "--by", "model", "--config", str(config(tmp_path, db))]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[1].split() == ["model", "calls", "prompt", "cached", "completion", "total", "cost"]
    assert out[2].split() == ["gpt-x", "1", "1000", "0", "100", "1100", "-"]
    assert out[3].split() == ["small-y", "1", "500", "0", "50", "550", "-"]


def test_doctor_shows_the_background_guard(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "m.db"
    seed(db, [UsageRow("summary", "gpt-x", TokenUsage(5000, 0, 500), user_id=42)])
    cfg = config(tmp_path, db, "limits:\n  background: {tokens_per_user: 1000}\n")
    assert main(["memory", "doctor", "--config", str(cfg)]) == 0
    out = capsys.readouterr().out
    assert "background spend in the last 1h: 1 call(s), 5,500 tokens" in out
    assert "1 user(s) at their background cap, their work put off: 42" in out
