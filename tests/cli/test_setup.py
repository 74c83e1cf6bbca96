"""Set-up as a newcomer meets it: `make run` honours MNEMO_CONFIG, names everything
missing at once, and docs/CONFIGURATION.md lists every variable config.yaml reads."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from tests.cli.conftest import mnemo
from tests.waits import scaled

ROOT = Path(__file__).resolve().parents[2]


def test_the_readme_lists_every_variable_config_yaml_reads() -> None:
    lines = (ROOT / "config.yaml").read_text(encoding="utf-8").splitlines()
    config = "\n".join(line for line in lines if not line.lstrip().startswith("#"))
    variables = set(re.findall(r"\$\{([A-Z_][A-Z0-9_]*)", config))
    assert {"OPENAI_BASE_URL", "MNEMO_BUDGET_TOKENS"} <= variables
    doc = (ROOT / "docs" / "CONFIGURATION.md").read_text(encoding="utf-8")
    table = re.search(r"reads these environment variables.*?\n\n(\|.*?)\n\n", doc, re.S)
    assert table is not None
    listed = set(re.findall(r"`([A-Z_][A-Z0-9_]*)`", table.group(1)))
    assert variables <= listed, variables - listed


@pytest.mark.slow  # subprocesses: `make test-slow`
def test_make_run_names_everything_missing_at_once_and_honours_mnemo_config(
    tmp_path: Path,
) -> None:
    if not (ROOT / ".venv" / ".installed").exists():
        pytest.skip("make run needs the repository's .venv")
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("MNEMO_", "OPENAI_", "TELEGRAM_", "MAKE"))
    }
    config = tmp_path / "mine.yaml"
    config.write_text(f"database: {{url: 'sqlite+aiosqlite:///{tmp_path}/m.db'}}\n")
    proc = subprocess.run(
        ["make", "--no-print-directory", "-s", "run"],
        cwd=ROOT,
        env={**env, "MNEMO_CONFIG": str(config)},
        capture_output=True,
        text=True,
        timeout=scaled(60),
    )
    # The config named by MNEMO_CONFIG was read (nothing was created: it stopped
    # before), and both missing secrets are named in the same run.
    assert proc.returncode == 2, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.startswith("mnemo:")]
    assert lines == [
        "mnemo: no Telegram bot token: set TELEGRAM_BOT_TOKEN (or telegram.token in the config)",
        "mnemo: no LLM API key: set OPENAI_API_KEY (or llm.api_key in the config); a local "
        "OpenAI-compatible server accepts any non-empty key",
    ]
    missing = subprocess.run(
        ["make", "--no-print-directory", "-s", "run"],
        cwd=ROOT,
        env={**env, "MNEMO_CONFIG": str(tmp_path / "absent.yaml")},
        capture_output=True,
        text=True,
        timeout=scaled(60),
    )
    assert f"{tmp_path}/absent.yaml: no such config file (given by MNEMO_CONFIG)" in (
        missing.stderr
    )
    assert list(tmp_path.iterdir()) == [config]


@pytest.mark.slow  # subprocesses: `make test-slow`
def test_chat_names_a_missing_key_before_anything_else(tmp_path: Path) -> None:
    proc = mnemo("chat", cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.startswith("mnemo: no LLM API key: set OPENAI_API_KEY")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow  # subprocesses: `make test-slow`
async def test_the_budget_fits_a_llama_cpp_servers_context(tmp_path: Path) -> None:
    # The compose profile's llama.cpp runs with LLM_CTX_SIZE tokens; a bot left at its
    # 13,500-token default would fail every long conversation. It reads the server's
    # context at start and fits its budget, saying so once.
    from tests.bot.test_terminal import mnemo_chat, write_config
    from tests.fakes.openai_server import FakeOpenAI

    async with FakeOpenAI() as server:
        server.context_size = 8192
        rc, out, err = await mnemo_chat(write_config(tmp_path, server.base_url), "/memory status\n")
    assert rc == 0, err
    # Compaction stays a quarter below the fitted budget, as at the defaults.
    assert re.search(r"Next turn's context: [\d,]+ of 6,144 tokens", out), out
    assert "; the model's window is 8,192" in out
    assert "(automatic compaction above 4,608)" in out
    assert (
        "the model server's context is 8192 tokens: memory.budget_tokens 13500 lowered to 6144"
        in err
    )


@pytest.mark.slow  # subprocesses: `make test-slow`
async def test_a_configured_window_wins_over_the_servers(tmp_path: Path) -> None:
    # A hosted model says nothing of its window: the operator states it, and the bot
    # fits its budget to it and shows it, as for a server that reports one.
    from tests.bot.test_terminal import mnemo_chat, write_config
    from tests.fakes.openai_server import FakeOpenAI

    async with FakeOpenAI() as server:
        server.context_size = 8192
        cfg = write_config(tmp_path, server.base_url)
        cfg.write_text(
            cfg.read_text().replace("timeout_s: 5}", "timeout_s: 5, context_window: 4096}")
        )
        rc, out, err = await mnemo_chat(cfg, "/memory status\n")
    assert rc == 0, err
    assert re.search(r"Next turn's context: [\d,]+ of 3,072 tokens", out), out
    assert "; the model's window is 4,096" in out
    assert "context is 4096 tokens" in err
