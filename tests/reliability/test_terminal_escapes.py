"""A user's text never acts on the operator's terminal: control characters (ESC, BEL, C1
CSI, DEL) and bidi controls (a right-to-left override) in a first message, which
becomes the session title, reach `mnemo chat`, `memory sessions`, `status`, `search` and
`export --format markdown` only as visible escapes; the JSON export keeps them exactly
(as JSON escapes) and imports back unchanged; log lines quoting them escape them too.
Every command runs as a subprocess."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.bot.test_terminal import mnemo_chat, write_config
from tests.fakes.openai_server import FakeOpenAI
from tests.reliability.process import REPO
from tests.waits import scaled

# A window-title change, a screen clear, colour, an RTL override that makes the rest read
# backwards, an isolate, a C1 CSI and DEL.
HOSTILE = (
    "\x1b]0;pwned\x07\x1b[2J\x1b[31mred \u202egnp.exe\u202c \u2066iso\u2069 \x9b1m del\x7f end"
)
RAW = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
SESSION = "default:cli:0:main"


@pytest.fixture
async def server():
    async with FakeOpenAI() as srv:
        yield srv


async def _mnemo(cfg: Path, *args: str) -> tuple[int, str, str]:
    env = {k: v for k, v in os.environ.items() if k != "MNEMO_CONFIG"}
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bot.cli",
        *args,
        "--config",
        str(cfg),
        cwd=REPO,
        env=env,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), timeout=scaled(60))
    return proc.returncode or 0, out.decode(), err.decode()


@pytest.mark.slow  # subprocesses: `make test-slow`
async def test_control_and_bidi_characters_never_reach_the_terminal(
    server: FakeOpenAI, tmp_path: Path
) -> None:
    cfg = write_config(tmp_path, server.base_url)
    shown: dict[str, str] = {}
    errors: dict[str, str] = {}
    rc, shown["chat"], errors["chat"] = await mnemo_chat(cfg, HOSTILE + "\n")
    assert rc == 0, errors
    for args in (
        ("memory", "sessions"),
        ("memory", "status", SESSION),
        ("memory", "search", SESSION, "pwned"),
        ("memory", "export", SESSION, "--format", "markdown"),
        ("memory", "export", SESSION),
    ):
        rc, out, err = await _mnemo(cfg, *args)
        assert rc == 0, (args, err)
        name = " ".join(args[1:2] + args[3:])  # e.g. "export --format markdown"
        shown[name], errors[name] = out, err
    leaks = {name: RAW.findall(shown[name] + errors[name]) for name in shown}
    assert not any(leaks.values()), leaks

    title = " ".join(HOSTILE.split())  # as the history names a conversation
    visible = title.replace("\x1b", "\\x1b").replace("\x07", "\\x07")
    assert "echo: " + visible[:20] in shown["chat"], shown["chat"]
    for command in ("sessions", "status", "export --format markdown"):
        assert visible[:20] in shown[command], (command, shown[command])
    assert "\\u202e" in shown["sessions"] and "\\x9b" in shown["export --format markdown"]

    # JSON stays lossless: every character as it was sent (as JSON escapes, none raw).
    out = shown["export"]
    doc = json.loads(out)
    assert doc["session"]["title"] == title[:80]
    assert doc["messages"][0]["content"] == HOSTILE
    assert doc["messages"][1]["content"] == "echo: " + HOSTILE

    # ... and imports back as it was (into a fresh database).
    export = tmp_path / "export.json"
    export.write_text(out, encoding="utf-8")
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    rc, out, err = await _mnemo(
        write_config(fresh, server.base_url), "memory", "import", str(export)
    )
    assert rc == 0, err
    assert not RAW.findall(out + err), out + err
    rc, out, err = await _mnemo(fresh / "config.yaml", "memory", "export", SESSION)
    assert json.loads(out)["messages"] == doc["messages"]


def test_log_lines_show_quoted_text_escaped() -> None:
    # Log lines quote users, models and servers (an error message, a tool's failure); the
    # CLI's logging (every command sets it up) escapes what they quote, newlines kept.
    script = (
        "import logging; from bot.cli import setup_logging; setup_logging(); "
        "logging.getLogger('mnemo.test').warning('tool failed: %s', "
        f"{HOSTILE!r} + chr(10) + 'next line')"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=scaled(60),
        cwd=REPO,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
    )
    assert "tool failed: \\x1b]0;pwned\\x07" in done.stderr, done.stderr
    assert done.stderr.endswith("\nnext line\n") and not RAW.findall(done.stderr), done.stderr
