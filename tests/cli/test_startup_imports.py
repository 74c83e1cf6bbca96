"""`mnemo --help` and `mnemo --version` start without the heavy parts: no memory
provider (finding one imports it, and SQLAlchemy with it), no OpenAI client, no Telegram
library. The command runs as a user runs it, in a subprocess, and Python's own import
log (`-X importtime`) says what it imported."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.cli.conftest import MNEMO, clean_env
from tests.waits import scaled

# Packages a bare --help or --version must not import (the commands that use them do).
HEAVY = ("sqlalchemy", "openai", "telegram", "plugins.lcm", "plugins.simple")


def imported_by(*args: str) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    """Run `python -X importtime ARGS`: its result, and every module it imported."""
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", *args],
        capture_output=True,
        text=True,
        timeout=scaled(60),
        env=clean_env(),
    )
    modules = {
        line.rsplit("|", 1)[1].strip()
        for line in proc.stderr.splitlines()
        if line.startswith("import time:") and "|" in line
    }
    return proc, modules


@pytest.mark.parametrize("flag", ["--help", "--version"])
def test_help_and_version_import_no_provider_database_or_client(flag: str) -> None:
    proc, modules = imported_by(str(MNEMO), flag)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "mnemo" in proc.stdout
    assert "bot.cli" in modules  # the log is the command's own
    assert heavy(modules) == []


def test_settings_module_finds_the_providers_only_when_settings_are_validated() -> None:
    """Importing the settings imports no provider; validating them finds the installed
    ones (their sections, `memory.lcm`, are part of the settings)."""
    code = (
        "import sys; from bot.config.settings import Settings; "
        "print(sorted(m for m in sys.modules if m.startswith('plugins.'))[:1]); "
        "print(Settings().memory.section('lcm') != {})"
    )
    proc, _ = imported_by("-c", code)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == ["[]", "True"]


def heavy(modules: set[str]) -> list[str]:
    return sorted(m for m in modules if any(m == h or m.startswith(h + ".") for h in HEAVY))
