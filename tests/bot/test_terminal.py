"""`mnemo chat` as a subprocess, fed through stdin, against the fake OpenAI server and the
`simple` provider on a SQLite file (so a second run sees the first one's history)."""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.openai_server import FakeOpenAI, Response, echo, error, text, tool_call
from tests.waits import scaled

REPO = Path(__file__).resolve().parents[2]


def write_config(tmp_path: Path, base_url: str) -> Path:
    cfg = tmp_path / "config.yaml"
    cfg.write_text(
        f"""
database: {{url: "sqlite+aiosqlite:///{tmp_path / "mnemo.db"}"}}
llm: {{base_url: "{base_url}", api_key: "${{OPENAI_API_KEY:-}}", max_retries: 1, timeout_s: 5}}
memory: {{provider: simple, simple: {{store_dir: "{tmp_path / "notes"}"}}}}
data_dir: "{tmp_path / "data"}"
reflect: {{enabled: false}}
""",
        encoding="utf-8",
    )
    return cfg


async def start_chat(
    cfg: Path, *args: str, api_key: str | None = "test-key", output: int = asyncio.subprocess.PIPE
) -> asyncio.subprocess.Process:
    """`mnemo chat` reading a pipe, its stdout and stderr to `output`."""
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "MNEMO_CONFIG")}
    if api_key is not None:
        env["OPENAI_API_KEY"] = api_key
    # asyncio's subprocess keeps this loop (and the fake server on it) running meanwhile.
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bot.cli",
        "chat",
        "--config",
        str(cfg),
        *args,
        stdin=asyncio.subprocess.PIPE,
        stdout=output,
        stderr=output,
        cwd=REPO,
        env=env,
    )


async def mnemo_chat(
    cfg: Path, stdin: str, *args: str, api_key: str | None = "test-key"
) -> tuple[int, str, str]:
    proc = await start_chat(cfg, *args, api_key=api_key)
    out, err = await asyncio.wait_for(proc.communicate(stdin.encode()), timeout=scaled(60))
    return proc.returncode or 0, out.decode(), err.decode()


@pytest.fixture
async def server():
    async with FakeOpenAI() as srv:
        yield srv


@pytest.mark.slow  # subprocesses: `make test-slow`
async def test_chat_failure_commands_rotation_and_restart(server: FakeOpenAI, tmp_path: Path):
    cfg = write_config(tmp_path, server.base_url)
    server.push(error(500), error(500))  # the first message fails (max_retries: 1)
    rc, out, err = await mnemo_chat(
        cfg,
        "this one fails\nhello there\n/memory status\n\n/new\nsecond conversation\n",
        "--session",
        "work",
    )
    assert rc == 0, err
    blocks = out.strip().split("\n\n")
    assert blocks[0].startswith("Sorry, I couldn't answer: the language model answered HTTP 500")
    assert "\n" not in blocks[0]
    # The failed turn kept its user message, answered with the next one (one user turn
    # for the model: the echo holds both), and nothing else.
    assert blocks[1:3] == ["echo: this one fails", "hello there"]
    assert "Conversation: default:cli:0:work\n" in blocks[3] and "Messages: 3 " in blocks[3]
    assert blocks[-2].startswith("Started a new conversation")
    assert blocks[-1] == "echo: second conversation"
    assert len(server.requests) == 4

    # A second run: the rotation and the history survived; /quit stops reading.
    rc, out, err = await mnemo_chat(cfg, "/memory status\n/quit\nnot sent\n", "--session", "work")
    assert rc == 0, err
    assert "Conversation: default:cli:0:work#1\n" in out and "Messages: 2 " in out
    assert len(server.requests) == 4


@pytest.mark.slow  # subprocesses: `make test-slow`
async def test_missing_api_key_names_the_variable(server: FakeOpenAI, tmp_path: Path):
    rc, out, err = await mnemo_chat(write_config(tmp_path, server.base_url), "hi\n", api_key=None)
    assert rc == 2 and out == ""
    assert "OPENAI_API_KEY" in err and "Traceback" not in err
    assert not server.requests


def _citing(body: dict[str, Any]) -> Response:
    """Echoes; `TOOL <json>` calls the memory tool; after its result, an answer citing
    every message id it returned and one it makes up."""
    last = (body.get("messages") or [{}])[-1]
    content = str(last.get("content") or "")
    if last.get("role") == "tool":
        ids = re.findall(r"^\[message (\d+)\]", content, re.M)
        return text("It is PLATYPUS-7731 " + " ".join(f"[{i}]" for i in [*ids, "99999"]) + ".")
    if content.startswith("TOOL "):
        return tool_call("memory", content[5:])
    return echo(body)


@pytest.mark.slow  # subprocesses: `make test-slow`
async def test_chat_prints_an_answer_s_sources_as_plain_lines(tmp_path: Path):
    async with FakeOpenAI(_citing) as srv:
        search = json.dumps({"action": "search", "text": "locker PLATYPUS"})
        rc, out, err = await mnemo_chat(
            write_config(tmp_path, srv.base_url),
            f"my locker code is PLATYPUS-7731\nTOOL {search}\n",
        )
    assert rc == 0, err
    answer = out.strip().split("\n\n")[1]
    assert answer.startswith("It is PLATYPUS-7731 [1]"), answer
    assert "99999" not in answer, answer
    assert "\nSources:\n[1] message " in answer, answer
    assert "“my locker code is PLATYPUS-7731”" in answer, answer
