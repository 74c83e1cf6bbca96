"""`mnemo config show` / `mnemo config init`, and the environment as commands meet it:
no config file needed, typos refused, commands that need no secret not asking for it."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import yaml

from bot.config.settings import Settings, anchor_paths, load_settings
from tests.cli.conftest import MNEMO, clean_env, mnemo
from tests.fakes.openai_server import FakeOpenAI
from tests.waits import scaled

TOKEN = "424242:AAH-bot-secret-part"
API_KEY = "sk-live-4f8a2c9e71d3"
DB_PASSWORD = "hunter2-db-pass"


def shown(stdout: str) -> dict[str, tuple[str, str]]:
    """key -> (value, source) of `mnemo config show`."""
    out = {}
    for line in stdout.splitlines():
        if line.startswith("#"):
            continue
        key, _, rest = line.partition(": ")
        value, _, source = rest.rpartition("  # ")
        out[key] = (value, source)
    return out


def test_config_show_says_every_value_and_its_source_secrets_masked(tmp_path: Path) -> None:
    (tmp_path / "config.yaml").write_text(
        f"llm: {{api_key: {API_KEY}, base_url: 'https://u:llm-pass-77@proxy.example/v1'}}\n"
        f"database: {{url: 'postgresql+psycopg://mnemo:{DB_PASSWORD}@db/mnemo'}}\n"
        "agent: {id: '${AGENT_NAME:-helper}'}\n"
    )
    proc = mnemo(
        "config",
        "show",
        cwd=tmp_path,
        env={
            "TELEGRAM_BOT_TOKEN": TOKEN,
            "MNEMO_TELEGRAM__ALLOWED_IDS": "1,2",
            # A secret pasted where it does not belong is masked there too.
            "MNEMO_LLM__SUMMARY_MODEL": f"x-{API_KEY}",
        },
    )
    assert proc.returncode == 0, proc.stderr
    for secret in (TOKEN, TOKEN.split(":")[1], API_KEY, DB_PASSWORD, "llm-pass-77"):
        assert secret not in proc.stdout + proc.stderr
    rows = shown(proc.stdout)
    assert rows["telegram.token"] == ('"***"', "env TELEGRAM_BOT_TOKEN")
    assert rows["llm.api_key"] == ('"***"', "file")
    assert rows["llm.summary_model"] == ('"x-***"', "env MNEMO_LLM__SUMMARY_MODEL")
    assert rows["database.url"] == ('"postgresql+psycopg://mnemo:***@db/mnemo"', "file")
    assert rows["telegram.allowed_ids"] == ("[1, 2]", "env MNEMO_TELEGRAM__ALLOWED_IDS")
    assert rows["agent.id"] == ('"helper"', "file ${AGENT_NAME}")
    assert rows["telegram.webhook.secret_token"] == ('""', "default")  # unset shows empty
    assert rows["memory.lcm.leaf_chunk_size"] == ("10", "default")
    assert proc.stdout.startswith(f"# config file: {tmp_path / 'config.yaml'}\n")


def test_config_show_without_a_file_and_with_a_secret_unset(tmp_path: Path) -> None:
    proc = mnemo("config", "show", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "config.yaml does not exist: defaults and environment only" in proc.stdout
    assert {source for _, source in shown(proc.stdout).values()} == {"default"}
    (tmp_path / "config.yaml").write_text("telegram: {token: '${MY_TOKEN}'}\n")
    proc = mnemo("config", "show", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert shown(proc.stdout)["telegram.token"] == ('""', "file, ${MY_TOKEN} not set")


def test_config_init_writes_a_starter_of_every_default(tmp_path: Path) -> None:
    proc = mnemo("config", "init", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    path = tmp_path / "config.yaml"
    text = path.read_text()
    # All commented out: the file means "all defaults" until a line is uncommented...
    assert all(line.startswith("#") for line in text.splitlines())
    assert "TELEGRAM_BOT_TOKEN_FILE" in text and "MNEMO_TELEGRAM__ALLOWED_IDS" in text
    shown_rows = shown(mnemo("config", "show", cwd=tmp_path).stdout)
    assert {source for _, source in shown_rows.values()} == {"default"}
    # ... and every line uncommented is a valid config, equal to the defaults.
    body = [line[2:] for line in text.splitlines() if line.startswith("# ") and ":" in line]
    start = next(i for i, line in enumerate(body) if line == "agent:")
    full = tmp_path / "full.yaml"
    full.write_text("\n".join(body[start:]) + "\n")
    assert set(yaml.safe_load(full.read_text())) >= {"agent", "llm", "telegram", "memory", "web"}
    defaults = Settings()
    anchor_paths(defaults, tmp_path)
    assert load_settings(full).model_dump() == defaults.model_dump()
    # Never over an existing file.
    again = mnemo("config", "init", cwd=tmp_path)
    assert again.returncode == 1
    assert (
        again.stderr
        == "mnemo: config.yaml exists; not overwritten (give another PATH, or remove it first)\n"
    )
    assert path.read_text() == text


def test_a_mistyped_variable_stops_every_command_in_one_line(tmp_path: Path) -> None:
    for command in (["config", "show"], ["providers"], ["run"]):
        proc = mnemo(*command, cwd=tmp_path, env={"MNEMO_TELEGRAM__ALOWED_IDS": "1,2"})
        assert proc.returncode == 2
        assert proc.stderr.startswith(
            "mnemo: config error: environment: MNEMO_TELEGRAM__ALOWED_IDS: no key "
            "telegram.alowed_ids (telegram has: token, base_url, allowed_ids,"
        )
        assert len(proc.stderr.splitlines()) == 1 and proc.stdout == ""


@pytest.mark.slow  # subprocesses: `make test-slow`
def test_read_only_commands_do_not_ask_for_an_unset_secret(tmp_path: Path) -> None:
    # The case: `${TELEGRAM_BOT_TOKEN}` (no default) and the variable unset.
    (tmp_path / "config.yaml").write_text(
        "telegram: {token: '${TELEGRAM_BOT_TOKEN}'}\nllm: {api_key: '${OPENAI_API_KEY}'}\n"
    )
    assert mnemo("migrate", cwd=tmp_path).returncode == 0
    proc = mnemo("memory", "sessions", cwd=tmp_path)
    assert (proc.returncode, proc.stdout) == (0, f"no sessions in {tmp_path}/data/mnemo.db\n")
    assert mnemo("memory", "doctor", cwd=tmp_path).returncode == 0
    # `run` uses both: each is named, once.
    proc = mnemo("run", cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [
        "mnemo: config error: config.yaml: telegram.token: environment variable "
        "TELEGRAM_BOT_TOKEN is not set (used as ${TELEGRAM_BOT_TOKEN})",
        "mnemo: config error: config.yaml: llm.api_key: environment variable OPENAI_API_KEY "
        "is not set (used as ${OPENAI_API_KEY})",
    ]


def test_mnemo_run_without_a_config_file_names_what_is_missing(tmp_path: Path) -> None:
    proc = mnemo("run", cwd=tmp_path, env={"TELEGRAM_BOT_TOKEN": TOKEN})
    assert proc.returncode == 2
    assert proc.stderr.startswith("mnemo: no LLM API key: set OPENAI_API_KEY")
    assert list(tmp_path.iterdir()) == []  # stopped before creating anything


async def test_chat_in_an_empty_directory_with_the_key_in_the_environment(tmp_path: Path) -> None:
    # The README's `OPENAI_API_KEY=... mnemo chat`, with no config file anywhere.
    async with FakeOpenAI() as llm:
        env = clean_env(OPENAI_API_KEY=API_KEY, OPENAI_BASE_URL=llm.base_url)
        proc = await asyncio.create_subprocess_exec(
            str(MNEMO),
            "chat",
            cwd=tmp_path,
            env=env,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(proc.communicate(b"hello there\n"), scaled(120))
    assert proc.returncode == 0, err.decode()
    assert "echo: hello there" in out.decode()
    assert API_KEY not in out.decode() + err.decode()
    assert (tmp_path / "data" / "mnemo.db").exists()  # the default database, made here


def test_version(tmp_path: Path) -> None:
    from importlib.metadata import version

    proc = mnemo("--version", cwd=tmp_path)
    assert (proc.returncode, proc.stdout) == (0, f"mnemo {version('mnemo')}\n")
