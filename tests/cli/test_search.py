"""`mnemo memory search` as the operator runs it: by user (the session optional), with
the console's --mode and --limit, on both databases."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import yaml

from bot.cli import main
from bot.config.settings import load_settings
from tests.cli.conftest import mnemo
from tests.ops.conftest import ALICE, GROUP, populate


async def populated(db_url: str, tmp_path: Path) -> Path:
    """A config on a database holding ALICE's (9 exchanges) and GROUP's (4) sessions."""
    config = tmp_path / "config.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "database": {"url": db_url},
                "data_dir": str(tmp_path / "data"),
                "memory": {"provider": "simple", "simple": {"store_dir": str(tmp_path / "notes")}},
            }
        )
    )
    await populate(load_settings(config), tmp_path, compact=False)
    return config


async def search(tmp_path: Path, *args: str):  # noqa: ANN201
    # A subprocess, run beside this loop (which keeps the database's test fixture alive).
    return await asyncio.to_thread(mnemo, "memory", "search", *args, cwd=tmp_path)


@pytest.mark.slow  # subprocesses: `make test-slow`
async def test_search_by_user_with_mode_and_limit(db_url: str, tmp_path: Path) -> None:
    await populated(db_url, tmp_path)
    proc = await search(tmp_path, "--user", str(ALICE.user_id), "question 7")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert any("question 7" in line for line in lines[:2])  # "7" ranks "answer 7" too
    assert all(f"in {ALICE.id}]" in line for line in lines)
    assert f"result(s) for user {ALICE.user_id} (agent default)" in proc.stderr
    # A group's (negative) chat id is a user id too; its memory only.
    proc = await search(tmp_path, "--user", str(GROUP.user_id), "question")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout and all(f"in {GROUP.id}]" in line for line in proc.stdout.splitlines())
    # --limit bounds the results; --mode substring finds the text literally, newest first.
    proc = await search(
        tmp_path, "--user", str(ALICE.user_id), "--mode", "substring", "--limit", "2", "question"
    )
    assert proc.returncode == 0, proc.stderr
    found = proc.stdout.splitlines()
    assert len(found) == 2
    assert "question 8" in found[0] and "question 7" in found[1]
    # A session still names the user, as before.
    proc = await search(tmp_path, ALICE.id, "question 7")
    assert proc.returncode == 0 and proc.stdout.splitlines() == lines
    # --since / --before keep it to dates: everything was said on 2026-03-01.
    alice = ("--user", str(ALICE.user_id))
    proc = await search(tmp_path, *alice, "--since", "2026-03-01", "--before", "7d", "question 7")
    assert proc.returncode == 0 and proc.stdout.splitlines() == lines, proc.stderr
    proc = await search(tmp_path, *alice, "--before", "2026-03-01", "question")
    assert (proc.returncode, proc.stdout) == (0, ""), proc.stderr
    proc = await search(tmp_path, "--user", str(ALICE.user_id), "--since", "soon", "question")
    assert proc.returncode == 2 and "--since must be a date" in proc.stderr


@pytest.mark.slow  # subprocesses: `make test-slow`
async def test_search_names_what_it_did_not_find(db_url: str, tmp_path: Path) -> None:
    await populated(db_url, tmp_path)
    cases = [
        (["--user", "777", "tea"], "mnemo: no memory of user 777 (agent 'default') in "),
        (["--user", "1001", "--agent", "other", "tea"], "mnemo: no memory of user 1001 "),
        (["nobody", "tea"], "mnemo: no session 'nobody' (see `mnemo memory sessions`)\n"),
    ]
    for args, err in cases:
        proc = await search(tmp_path, *args)
        assert (proc.returncode, proc.stdout) == (1, ""), (args, proc.stderr)
        assert proc.stderr.startswith(err), (args, proc.stderr)


@pytest.mark.parametrize(
    ("args", "err"),
    [
        (["tea"], "mnemo: give a SESSION or --user ID (not both)\n"),
        (["s1", "tea", "--user", "1001"], "mnemo: give a SESSION or --user ID (not both)\n"),
        (["s1", "tea", "--agent", "x"], "mnemo: --agent goes with --user"),
        (["--user", "1001", "--limit", "0", "tea"], "argument --limit: invalid choice"),
        (["--user", "1001", "--limit", "201", "tea"], "argument --limit: invalid choice"),
        (["--user", "1001", "--mode", "fuzzy", "tea"], "argument --mode: invalid choice"),
    ],
)
def test_search_usage_errors(
    args: list[str], err: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Said before the database is opened: there is none here.
    config = tmp_path / "config.yaml"
    config.write_text(f"database: {{url: 'sqlite+aiosqlite:///{tmp_path}/none.db'}}\n")
    try:
        code = main(["memory", "search", "--config", str(config), *args])
    except SystemExit as exc:  # argparse's own refusals
        code = exc.code
    assert code == 2
    assert err in capsys.readouterr().err
    assert not (tmp_path / "none.db").exists()
