"""Relative paths in a config file follow the file, not the current directory; commands
that read never create a database, and every command says which one it opened."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.config.settings import load_settings
from tests.cli.conftest import mnemo


def _layout(tmp_path: Path) -> tuple[Path, Path]:
    conf = tmp_path / "bot"
    conf.mkdir()
    (conf / "config.yaml").write_text(
        "database: {url: 'sqlite+aiosqlite:///db/m.db'}\n"
        "data_dir: state\n"
        "memory: {provider: simple, simple: {store_dir: notes}}\n"
    )
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    return conf, elsewhere


def test_relative_paths_are_read_from_the_config_files_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    conf, elsewhere = _layout(tmp_path)
    monkeypatch.chdir(elsewhere)
    settings = load_settings("../bot/config.yaml")
    assert settings.database.url == f"sqlite+aiosqlite:///{conf}/db/m.db"
    assert settings.data_dir == str(conf / "state")
    assert settings.provider_config()["store_dir"] == str(conf / "notes")
    # Absolute paths and other databases stay as written; without a file, the defaults
    # are the current directory's.
    (conf / "abs.yaml").write_text(
        f"database: {{url: 'sqlite+aiosqlite:///{tmp_path}/x.db'}}\ndata_dir: /srv/d\n"
    )
    absolute = load_settings(conf / "abs.yaml")
    assert absolute.database.url == f"sqlite+aiosqlite:///{tmp_path}/x.db"
    assert absolute.data_dir == "/srv/d"
    monkeypatch.delenv("MNEMO_CONFIG", raising=False)
    assert load_settings().database.url == "sqlite+aiosqlite:///data/mnemo.db"


@pytest.mark.slow  # subprocesses: `make test-slow`
def test_read_commands_never_create_a_database_and_name_the_one_they_open(
    tmp_path: Path,
) -> None:
    conf, elsewhere = _layout(tmp_path)
    config = str(conf / "config.yaml")
    db = conf / "db" / "m.db"

    missing = mnemo("--config", config, "memory", "sessions", cwd=elsewhere)
    assert missing.returncode == 3, missing.stderr
    assert missing.stderr.strip().splitlines() == [
        f"mnemo: no database at {db} (database.url); `mnemo migrate` or `mnemo run` creates it"
    ]
    assert missing.stdout == ""
    assert not (conf / "db").exists() and list(elsewhere.iterdir()) == []

    created = mnemo("--config", config, "migrate", cwd=elsewhere)
    assert created.returncode == 0, created.stderr
    assert created.stdout == f"created the database {db} with mnemo's tables\n"
    assert f"created directory {db.parent} for the database" in created.stderr
    again = mnemo("--config", config, "migrate", cwd=elsewhere)
    assert again.stdout == f"the database {db} is up to date (nothing to migrate)\n"

    listed = mnemo("--config", config, "memory", "sessions", cwd=elsewhere)
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout == f"no sessions in {db}\n"
    assert list(elsewhere.iterdir()) == []


@pytest.mark.slow  # subprocesses: `make test-slow`
def test_an_empty_database_is_no_mnemo_database(tmp_path: Path) -> None:
    # The file exists (an empty SQLite file, a wrong path to another program's
    # database): a read command says so, and adds no tables to it.
    empty = tmp_path / "empty.db"
    empty.write_bytes(b"")
    (tmp_path / "config.yaml").write_text(f"database: {{url: 'sqlite+aiosqlite:///{empty}'}}\n")
    proc = mnemo("memory", "doctor", cwd=tmp_path)
    assert proc.returncode == 3
    assert proc.stderr.strip().splitlines() == [
        f"mnemo: the database {empty} holds no mnemo data (no tables); "
        "`mnemo migrate` or `mnemo run` creates them"
    ]
    assert empty.stat().st_size == 0
