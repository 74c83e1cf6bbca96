"""Helpers of the command-line tests: `mnemo` run as a user runs it, in a subprocess."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.waits import scaled

MNEMO = Path(sys.executable).with_name("mnemo")


def clean_env(**given: str) -> dict[str, str]:
    """The test's environment without MNEMO_*, API or DATABASE_URL variables, plus `given`."""
    base = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("MNEMO_", "OPENAI_", "TELEGRAM_")) and k != "DATABASE_URL"
    }
    return {**base, **given}


def mnemo(*args: str, cwd: Path, env: dict[str, str] | None = None, timeout: float = 60):
    """`mnemo ARGS` in `cwd`, with no MNEMO_* or API variables from the test's own
    environment unless given in `env`; `timeout` (a hang guard) is scaled to the
    machine's load (tests/waits.py)."""
    return subprocess.run(
        [str(MNEMO), *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=scaled(timeout),
        env=clean_env(**(env or {})),
    )
