"""The benchmarks still run: each at a toy size, as a subprocess, as `make bench` starts
them. Their figures are not checked here (bench/RESULTS.md holds them); a benchmark that
no longer starts, or hangs, is."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.slow


def run_bench(*argv: str) -> str:
    done = subprocess.run([sys.executable, *argv], cwd=REPO, capture_output=True, text=True,
                          timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_bot_throughput_runs() -> None:
    out = run_bench("bench/bot_throughput.py", "--chats", "3", "--rounds", "1",
                    "--repeat", "1")
    assert "mnemo / echo throughput" in out
    for bot in ("mnemo run", "bare PTB echo bot", "our Telegram channel"):
        assert f"| {bot}" in out


def test_bot_throughput_turns_only_runs() -> None:
    out = run_bench("bench/bot_throughput.py", "--turns-only", "--chats", "3",
                    "--rounds", "1")
    assert "SQL statements per turn" in out


def test_compaction_latency_runs() -> None:
    out = run_bench("bench/compaction_latency.py", "--sessions", "1", "--turns", "12",
                    "--delay", "0.05", "--max-tokens", "200")
    assert "p50 ratio triggering / non-triggering" in out
