"""`mnemo memory import` (a session export) reads within a budget (issue #32): a device
with no end is refused at its first byte, an endless stream on stdin past 256 MB, in one
line each, never a MemoryError or a traceback (deep nesting and lone surrogates:
tests/ops/test_hostile_import.py). Run as the operator runs it (a subprocess), under an address-space limit, so
a regression fails by that bound (a MemoryError traceback) and not by the machine's
memory (before: /dev/zero was a MemoryError after 29 s, at 1.7 GB under a 2 GB cap)."""

from __future__ import annotations

import contextlib
import os
import resource
import subprocess
import sys
import threading
from pathlib import Path
from typing import IO

from memory.transfer.schema import MAX_DOCUMENT_BYTES
from tests.reliability.corpus import looks_like_traceback
from tests.reliability.process import REPO, write_config
from tests.waits import scaled

CAP = 1024 * 2**20  # ~2x what reading the largest document allowed takes


def _cap() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (CAP, CAP))


def _import(tmp: Path, path: str, stdin: int | IO[bytes] | None = None) -> subprocess.Popen[bytes]:
    config = write_config(
        tmp / "config.yaml",
        {"database": {"url": f"sqlite+aiosqlite:///{tmp}/m.db"}, "data_dir": str(tmp / "data")},
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("MNEMO_CONFIG", None)
    return subprocess.Popen(
        [sys.executable, "-m", "bot.cli", "--config", str(config), "memory", "import", path],
        cwd=REPO,
        env=env,
        stdin=stdin,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        preexec_fn=_cap,
    )


def _refusal(proc: subprocess.Popen[bytes]) -> str:
    try:
        # A bound for a hang, not a timing assertion.
        out, raw = proc.communicate(timeout=scaled(300))
    except subprocess.TimeoutExpired:
        proc.kill()  # (which also ends a feeding thread's write)
        raise
    err = raw.decode()
    assert proc.returncode == 1, err
    assert not looks_like_traceback(err) and out == b"", err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


def test_dev_zero_is_refused_at_its_first_byte(tmp_path: Path) -> None:
    line = _refusal(_import(tmp_path, "/dev/zero"))
    assert line == "mnemo: /dev/zero is not a JSON export: not JSON: it starts with b'\\x00'"


def test_an_endless_stream_on_stdin_is_refused_past_the_size_budget(tmp_path: Path) -> None:
    proc = _import(tmp_path, "-", stdin=subprocess.PIPE)
    assert proc.stdin is not None
    stdin, proc.stdin = proc.stdin, None  # fed by `feed` alone (communicate would close it)

    def feed() -> None:  # whitespace, then more of it: valid JSON so far, never ending
        with contextlib.suppress(BrokenPipeError, ValueError):
            stdin.write(b"{")
            for _ in range(MAX_DOCUMENT_BYTES // 2**20 + 2):
                stdin.write(b" " * 2**20)
        with contextlib.suppress(OSError):
            stdin.close()

    writer = threading.Thread(target=feed)
    writer.start()
    try:
        line = _refusal(proc)
    finally:
        writer.join()
    assert line == "mnemo: - is not a JSON export: larger than 256 MB, more than an export holds"
