"""`mnemo run` as operators start it: a subprocess with a config file, the simple
provider on SQLite, both fake servers; stopped with SIGTERM, restarted with history."""

from __future__ import annotations

import asyncio
import signal
import sys
from pathlib import Path

import pytest

from bot.cli import EXIT_CONFIG, main
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.telegram_server import FakeTelegram
from tests.waits import scaled

REPO = Path(__file__).resolve().parents[2]


def write_config(tmp_path: Path, tg: FakeTelegram, llm: FakeOpenAI) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(f"""
database: {{url: "sqlite+aiosqlite:///{tmp_path}/mnemo.db"}}
data_dir: {tmp_path}/data
llm: {{base_url: "{llm.base_url}", api_key: test-key, max_retries: 0}}
telegram: {{token: "{tg.token}", base_url: "{tg.base_url}"}}
memory: {{provider: simple, simple: {{store_dir: "{tmp_path}/data/memory"}}}}
reflect: {{enabled: false}}
""")
    return path


async def run_once(config: Path, tg: FakeTelegram, say: str) -> str:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bot.cli",
        "run",
        "--config",
        str(config),
        cwd=REPO,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        before = len(tg.bot_messages(42))
        tg.private(42).send(say)
        await tg.wait_for(lambda: len(tg.bot_messages(42)) > before, within=60)
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = await asyncio.wait_for(proc.communicate(), scaled(30))
    assert proc.returncode == 0, err.decode()
    return err.decode()


@pytest.mark.slow
async def test_run_stop_and_restart_keeps_history(tmp_path: Path) -> None:
    async with FakeTelegram() as tg, FakeOpenAI() as llm:
        config = write_config(tmp_path, tg, llm)
        log = await run_once(config, tg, "remember the word ginkgo")
        assert "receiving updates by long polling" in log
        assert tg.token not in log and tg.token.split(":")[1] not in log  # no secrets in logs
        await run_once(config, tg, "what was the word?")
    assert tg.bot_messages(42)[-1].text == "echo: what was the word?"
    history = [m["content"] for m in llm.requests[-1]["messages"] if m["role"] != "system"]
    assert history == [
        "remember the word ginkgo",
        "echo: remember the word ginkgo",
        "what was the word?",
    ]


def test_missing_token_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("TELEGRAM_BOT_TOKEN", raising=False)
    config = tmp_path / "config.yaml"
    config.write_text("telegram: {token: '${TELEGRAM_BOT_TOKEN:-}'}\nllm: {api_key: k}\n")
    assert main(["run", "--config", str(config)]) == EXIT_CONFIG
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "TELEGRAM_BOT_TOKEN" in err
