"""Hostile exports through `mnemo memory import-chat`, run as the operator runs it (a
subprocess), each under an address-space limit so that a regression fails by that bound
(a MemoryError traceback) instead of taking the machine's memory: a file nested 100,000
deep (200 KB; it took 3 GB and more before issue #32), a lone surrogate escape, a user
id no database holds, a device instead of a file. Each is refused in one line, no
traceback, nothing written."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from tests.chat_import.hostile import deep_export, telegram_saying
from tests.reliability.corpus import looks_like_traceback
from tests.reliability.process import REPO, write_config
from tests.waits import scaled

REFUSED = "mnemo: import refused, nothing was written: "
CAP = 1024 * 2**20  # the CLI's address space: ~3x what it needs, far below the bug's


def _cap() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (CAP, CAP))


def _mnemo_memory(tmp: Path, *args: str) -> tuple[int, str, str]:
    config = write_config(
        tmp / "config.yaml",
        {"database": {"url": f"sqlite+aiosqlite:///{tmp}/m.db"}, "data_dir": str(tmp / "data")},
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("MNEMO_CONFIG", None)
    proc = subprocess.run(
        [sys.executable, "-m", "bot.cli", "--config", str(config), "memory", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        preexec_fn=_cap,
        timeout=scaled(300),  # a bound for a hang, not a timing assertion
    )
    return proc.returncode, proc.stdout, proc.stderr


def _one_line(code: int, err: str) -> str:
    assert code == 1, err
    assert not looks_like_traceback(err), err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


@pytest.mark.parametrize("fmt", ["telegram", "chatgpt"])
def test_an_export_nested_100000_deep_is_refused_in_one_line_within_a_memory_cap(
    tmp_path: Path, fmt: str
) -> None:
    name = {"telegram": "result.json", "chatgpt": "conversations.json"}[fmt]
    path = tmp_path / name
    path.write_bytes(deep_export(fmt, 100_000))
    assert path.stat().st_size < 250_000
    code, out, err = _mnemo_memory(
        tmp_path, "import-chat", str(path), "--format", fmt, "--user", "42"
    )
    line = _one_line(code, err)
    assert line.startswith(f"{REFUSED}{name}: nested deeper than 64 levels"), line
    assert out == ""


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        (b'"broken \\udc00 text"', "a string in it is not UTF-8 text (a lone surrogate escape"),
        (b'"broken \xff text"', "lexical error: invalid bytes in UTF8 string."),
    ],
    ids=["lone-surrogate", "invalid-utf8"],
)
def test_text_that_is_not_utf8_is_refused_in_one_line(
    tmp_path: Path, text: bytes, reason: str
) -> None:
    path = tmp_path / "result.json"
    path.write_bytes(telegram_saying("@@").replace(b"@@", text))
    code, _, err = _mnemo_memory(
        tmp_path, "import-chat", str(path), "--format", "telegram", "--user", "42"
    )
    line = _one_line(code, err)
    assert line.startswith(f"{REFUSED}result.json is not valid JSON: {reason}"), line
    assert "\\x" not in line and "right here" not in line  # no quoted bytes


@pytest.mark.parametrize(
    "command",
    [
        ["import-chat", "{file}", "--format", "telegram", "--user"],
        ["erase", "--dry-run", "--user"],
        ["search", "hi", "--user"],
    ],
    ids=["import-chat", "erase", "search"],
)
def test_a_user_id_no_database_holds_is_refused_in_one_line(
    tmp_path: Path, command: list[str]
) -> None:
    # One argparse type checks every --user (it was an OverflowError traceback).
    path = tmp_path / "result.json"
    path.write_bytes(telegram_saying('"hi"'))
    huge = "1" + "0" * 30
    args = [a.replace("{file}", str(path)) for a in command] + [huge]
    code, out, err = _mnemo_memory(tmp_path, *args)
    assert code == 2, err  # a usage error
    assert not looks_like_traceback(err), err
    assert (
        err.strip()
        .splitlines()[-1]
        .endswith(f"error: argument --user: {huge} is out of range (a user id is below 2^63)")
    ), err
    assert out == ""


def test_a_device_is_refused_at_once_not_read(tmp_path: Path) -> None:
    code, _, err = _mnemo_memory(
        tmp_path, "import-chat", "/dev/zero", "--format", "chatgpt", "--user", "42"
    )
    line = _one_line(code, err)
    assert line == f"{REFUSED}/dev/zero is not a regular file (an export is read twice)"
