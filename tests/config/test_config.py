"""config.yaml: interpolation, validation, `--config` / MNEMO_CONFIG on every command."""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from bot.cli import EXIT_CONFIG, build_parser, main
from bot.config.settings import ConfigError, interpolate, load_settings, parse_duration
from tests.waits import scaled

MNEMO = Path(sys.executable).with_name("mnemo")

# Every command with the arguments it needs; `test_every_command_is_listed` keeps this
# in step with the parser.
COMMANDS: list[list[str]] = [
    ["run"],
    ["chat"],
    ["providers"],
    ["migrate"],
    ["reflect", "--once"],
    ["memory", "status", "s1"],
    ["memory", "sessions"],
    ["memory", "search", "s1", "tea"],
    ["memory", "export", "s1"],
    ["memory", "compact", "--all"],
    ["memory", "doctor"],
    ["memory", "backup", "out.db"],
    ["memory", "import", "in.json"],
    ["memory", "import-chat", "result.json", "--format", "telegram", "--user", "1", "--dry-run"],
    ["memory", "embed"],
    ["memory", "erase", "--user", "1", "--dry-run"],
    ["memory", "usage"],
    ["web", "token", "--name", "ann"],
    ["web", "hash-token"],
    ["config", "show"],
    ["config", "init", "new.yaml"],
]
# Commands that read the config (all but the one that writes a new one).
READERS = [cmd for cmd in COMMANDS if cmd[:2] != ["config", "init"]]


def write(tmp_path: Path, text: str, name: str = "config.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture(autouse=True)
def _no_env_config(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("MNEMO_CONFIG", raising=False)
    monkeypatch.chdir(tmp_path)  # no ./config.yaml unless a test writes one


# --- interpolation ------------------------------------------------------------------


def test_interpolation_forms() -> None:
    env = {"A": "alpha", "EMPTY": ""}
    tree = {
        "x": "${A}",
        "y": ["${B:-beta}", "${EMPTY:-dflt}", "${EMPTY}"],
        "z": 5,
        "w": "pre-${A}-${B:-}-post",
    }
    assert interpolate(tree, env) == {
        "x": "alpha",
        "y": ["beta", "dflt", ""],
        "z": 5,
        "w": "pre-alpha--post",
    }


def test_missing_variable_names_the_key() -> None:
    with pytest.raises(ConfigError) as info:
        interpolate({"telegram": {"token": "${NO_SUCH_VAR_X}"}}, {})
    assert str(info.value) == (
        "telegram.token: environment variable NO_SUCH_VAR_X is not set (used as ${NO_SUCH_VAR_X})"
    )


def test_values_from_environment_are_typed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MNEMO_TEST_PORT", "9000")
    monkeypatch.setenv("MNEMO_TEST_KEY", "sk-test")
    path = write(
        tmp_path,
        "telegram: {webhook: {port: '${MNEMO_TEST_PORT}'}}\n"
        "llm: {api_key: '${MNEMO_TEST_KEY}', base_url: '${UNSET_URL:-http://x/v1}'}\n",
    )
    settings = load_settings(path)
    assert settings.telegram.webhook.port == 9000
    assert settings.llm.api_key == "sk-test" and settings.llm.base_url == "http://x/v1"


# --- validation ---------------------------------------------------------------------


def test_defaults_and_partial_config(tmp_path: Path) -> None:
    assert load_settings().memory.provider == "lcm"  # no ./config.yaml: all defaults
    settings = load_settings(write(tmp_path, "memory: {fresh_tail: 5}\nreflect: {interval: 90m}\n"))
    assert settings.memory.fresh_tail == 5 and settings.memory.budget_tokens == 13500
    assert settings.reflect.interval_s == 5400
    assert settings.provider_config()["keep_tail"] == settings.compaction.keep_tail
    assert parse_duration("1d") == 86400


def test_prices_and_limits(tmp_path: Path) -> None:
    settings = load_settings(
        write(
            tmp_path,
            "llm:\n  prices:\n    gpt-4o-mini: {input: 0.15, cached_input: 0.075, output: 0.6}\n"
            "    text-embedding-3-small: {input: 0.02}\n"
            "limits: {tokens_per_day: 100000, background: {window: 30m, calls_total: 0}}\n",
        )
    )
    prices = settings.llm.price_table()
    assert prices["gpt-4o-mini"].cached_input == 0.075
    assert prices["text-embedding-3-small"].output == 0.0
    assert prices["text-embedding-3-small"].cached_input is None  # billed as input
    assert settings.limits.tokens_per_day == 100_000 and settings.limits.tokens_per_month == 0
    assert settings.limits.background.window_s == 1800
    assert settings.limits.background.calls_total == 0  # that cap off
    assert settings.limits.background.calls_per_user == 200  # the default kept


def test_transcription_is_off_unless_a_model_is_set(tmp_path: Path) -> None:
    assert load_settings().llm.transcription_model == ""
    settings = load_settings(write(tmp_path, "llm: {transcription_model: whisper-1}\n"))
    assert settings.llm.transcription_model == "whisper-1"


def test_vision_is_off_unless_turned_on(tmp_path: Path) -> None:
    assert load_settings().llm.vision is False
    assert load_settings(write(tmp_path, "llm: {vision: true}\n")).llm.vision is True


@pytest.mark.parametrize(
    ("yaml_text", "message"),
    [
        ("memory: {budget_tokens: lots}\n", "memory.budget_tokens: "),
        ("telegram: {group_mode: sometimes}\n", "telegram.group_mode: "),
        ("telegram: {allowed_ids: [1, two]}\n", "telegram.allowed_ids.1: "),
        ("reflect: {interval: soon}\n", "reflect.interval: expected a duration"),
        ("database: {url: 'mysql://x'}\n", "database.url: expected sqlite+aiosqlite"),
        ("agnet: {id: x}\n", "agnet: unknown key"),
        ("telegram: {webhook: {urll: x}}\n", "telegram.webhook.urll: unknown key"),
        ("memory: {lcm: {leaf_chunk_sise: 4}}\n", "memory.lcm.leaf_chunk_sise: unknown key"),
        ("memory: {lcn: {leaf_chunk_size: 4}}\n", "memory.lcn: unknown key"),
        ("memory: {provider: lcn}\n", "memory.provider: unknown provider 'lcn'; installed: "),
        ("- just\n- a list\n", "expected a mapping of sections"),
        ("memory: {fresh_tail: [\n", "not valid YAML at line"),
        ("llm: {api_key: '${NOT_SET_ANYWHERE}'}\n", "llm.api_key: environment variable"),
        ("llm: {prices: {gpt-x: {input: -1}}}\n", "llm.prices.gpt-x.input: "),
        ("llm: {prices: {gpt-x: {output: 2}}}\n", "llm.prices.gpt-x.input: required"),
        ("llm: {prices: {gpt-x: {input: 1, cache: 1}}}\n", "llm.prices.gpt-x.cache: unknown"),
        ("llm: {prices: {gpt-x: 0.15}}\n", "llm.prices.gpt-x: "),
        ("limits: {tokens_per_day: -5}\n", "limits.tokens_per_day: "),
        ("limits: {background: {window: 5s}}\n", "limits.background.window: expected"),
        ("limits: {tokens_per_dya: 5}\n", "limits.tokens_per_dya: unknown key"),
    ],
)
def test_bad_config_is_one_line_naming_the_key(
    tmp_path: Path, yaml_text: str, message: str
) -> None:
    path = write(tmp_path, yaml_text)
    with pytest.raises(ConfigError) as info:
        load_settings(path)
    text = str(info.value)
    assert text.startswith(f"{path}: ") and message in text and "\n" not in text


@pytest.mark.parametrize(
    "given",
    [
        "http://host:8081",
        "http://host:8081/",
        "http://host:8081/bot",
        "http://host:8081/bot/",
        "http://host:8081/bot{token}",
    ],
)
def test_telegram_base_url_as_root_or_in_ptb_form(tmp_path: Path, given: str) -> None:
    # The bot adds /bot<token> and /file/bot<token> to the root.
    path = write(tmp_path, f"telegram: {{base_url: '{given}'}}\n")
    assert load_settings(path).telegram.base_url == "http://host:8081"


def test_a_server_under_a_path_keeps_its_path(tmp_path: Path) -> None:
    path = write(tmp_path, "telegram: {base_url: 'https://proxy.example/telegram/bot'}\n")
    assert load_settings(path).telegram.base_url == "https://proxy.example/telegram"


@pytest.mark.parametrize(
    "text",
    [
        "reflect: {interval: 10s}\n",
        "reflect: {interval: 365d}\n",
        "llm: {temperature: 0}\n",
        "llm: {temperature: 2}\n",
        "telegram: {allowed_ids: [-1001234567890, 42]}\n",
    ],
)
def test_the_edges_of_each_range_are_accepted(tmp_path: Path, text: str) -> None:
    load_settings(write(tmp_path, text))


def test_unknown_provider_lists_installed(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"installed: .*lcm.*simple"):
        load_settings(write(tmp_path, "memory: {provider: nope}\n"))
    # Commands that do not need the provider accept it.
    assert (
        load_settings(
            write(tmp_path, "memory: {provider: nope}\n"), check_provider=False
        ).memory.provider
        == "nope"
    )


def test_explicit_config_must_exist(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ConfigError, match="no such config file .given by --config"):
        load_settings(tmp_path / "missing.yaml")
    monkeypatch.setenv("MNEMO_CONFIG", str(tmp_path / "gone.yaml"))
    with pytest.raises(ConfigError, match="no such config file .given by MNEMO_CONFIG"):
        load_settings()


def test_config_flag_beats_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    env_file = write(tmp_path, "agent: {id: from-env}\n", "env.yaml")
    flag_file = write(tmp_path, "agent: {id: from-flag}\n", "flag.yaml")
    write(tmp_path, "agent: {id: from-cwd}\n")
    assert load_settings().agent.id == "from-cwd"
    monkeypatch.setenv("MNEMO_CONFIG", str(env_file))
    assert load_settings().agent.id == "from-env"
    assert load_settings(flag_file).agent.id == "from-flag"


# --- every command honours --config and MNEMO_CONFIG --------------------------------


def _subcommands(
    parser: argparse.ArgumentParser, prefix: tuple[str, ...] = ()
) -> set[tuple[str, ...]]:
    found: set[tuple[str, ...]] = set()
    for action in parser._actions:  # argparse offers no public walk of sub-parsers
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                inner = _subcommands(sub, (*prefix, name))
                found |= inner or {(*prefix, name)}
    return found


def test_every_command_is_listed() -> None:
    listed = {
        tuple(cmd[:2]) if cmd[0] in ("memory", "web", "config") else (cmd[0],) for cmd in COMMANDS
    }
    assert _subcommands(build_parser()) == listed


@pytest.mark.parametrize("cmd", READERS, ids=lambda c: " ".join(c))
def test_mnemo_config_env_on_every_command(
    cmd: list[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    bad = write(tmp_path, "memory: {fresh_tail: many}\n", "bad.yaml")
    monkeypatch.setenv("MNEMO_CONFIG", str(bad))
    assert main(cmd) == EXIT_CONFIG
    err = capsys.readouterr().err
    assert err.startswith(f"mnemo: config error: {bad}: memory.fresh_tail: ")


@pytest.mark.slow  # subprocesses: `make test-slow`
@pytest.mark.parametrize("cmd", READERS, ids=lambda c: " ".join(c))
def test_bad_config_exits_nonzero_with_one_line(cmd: list[str], tmp_path: Path) -> None:
    bad = write(tmp_path, "compaction: {keep_tail: -3}\n", "bad.yaml")
    env = {k: v for k, v in os.environ.items() if k != "MNEMO_CONFIG"}
    proc = subprocess.run(
        [str(MNEMO), "--config", str(bad), *cmd],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=scaled(60),
    )
    assert proc.returncode == EXIT_CONFIG, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "compaction.keep_tail" in lines[0] and "greater than or equal to 0" in lines[0]
    assert proc.stdout == ""


def test_config_flag_after_the_subcommand(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = write(tmp_path, "memory: {fresh_tail: many}\n", "bad.yaml")
    assert main(["memory", "status", "s1", "--config", str(bad)]) == EXIT_CONFIG
    assert "memory.fresh_tail" in capsys.readouterr().err


def _settings_keys(model: type, prefix: str = "") -> set[str]:
    from pydantic import BaseModel

    keys: set[str] = set()
    for name, field in model.model_fields.items():
        kind = field.annotation
        if isinstance(kind, type) and issubclass(kind, BaseModel):
            keys |= _settings_keys(kind, f"{prefix}{name}.")
        else:
            keys.add(prefix + name)
    return keys


def _readme_keys() -> set[str]:
    """The keys named in the first column of docs/CONFIGURATION.md's table. A cell lists
    full keys (`llm.model`) and short ones relative to the previous full key's parent
    (`.listen`, `admin_ids`)."""
    doc = Path(__file__).resolve().parents[2] / "docs" / "CONFIGURATION.md"
    section = doc.read_text(encoding="utf-8").split("\n## Every key\n", 1)[1].split("\n## ", 1)[0]
    keys: set[str] = set()
    for row in section.splitlines():
        if not row.startswith("| `"):
            continue
        parent = ""
        for name in re.findall(r"`([\w.]+)`", row.split("|")[1]):
            if name.isupper():  # the environment variables' table (MNEMO_MODEL...)
                break
            if "." in name.lstrip("."):
                parent = name.rsplit(".", 1)[0] + "."
                keys.add(name)
            else:
                keys.add(parent + name.lstrip("."))
    return keys


def test_readme_documents_exactly_the_config_keys() -> None:
    from bot.config.settings import Settings, memory_settings

    memory_settings()  # the providers' sections join the fields when first asked for
    assert _readme_keys() == _settings_keys(Settings)


# --- a secret pasted into another key is never echoed -------------------------------

API_KEY = "sk-live-4f8a2c9e71d3"
DB_PASSWORD = "hunter2-db-pass"
BOT_TOKEN = "424242:AAH-bot-secret-part"


def with_secrets(tmp_path: Path, key: str, value: object) -> Path:
    """A config setting every kind of secret, plus `key: value`."""
    config: dict[str, Any] = {
        "llm": {"api_key": API_KEY},
        "database": {"url": f"postgresql+psycopg://mnemo:{DB_PASSWORD}@db/mnemo"},
        "telegram": {
            "token": BOT_TOKEN,
            "base_url": "http://api:tg-api-pass-5@localhost:8081",
            "webhook": {
                "url": "https://hook:hook-pass-4@bot.example/hook",
                "secret_token": "wh-secret-77",
            },
        },
    }
    *parents, last = key.split(".")
    section = config
    for part in parents:
        section = section.setdefault(part, {})
    section[last] = value
    return write(tmp_path, yaml.safe_dump(config))


@pytest.mark.parametrize(
    ("key", "value", "secret"),
    [
        ("memory.provider", API_KEY, API_KEY),
        ("agent.id", f"\x01{DB_PASSWORD}", DB_PASSWORD),
        ("telegram.allowed_ids", [BOT_TOKEN], BOT_TOKEN),
        # The token's secret part alone, without the bot id.
        ("telegram.allowed_ids", ["AAH-bot-secret-part"], "AAH-bot-secret-part"),
        ("reflect.interval", "tg-api-pass-5", "tg-api-pass-5"),
        ("agent.id", "\x01hook-pass-4", "hook-pass-4"),
        ("memory.budget_tokens", "wh-secret-77", "wh-secret-77"),
    ],
)
def test_a_secret_pasted_into_another_key_is_not_echoed(
    tmp_path: Path, key: str, value: object, secret: str
) -> None:
    with pytest.raises(ConfigError) as info:
        load_settings(with_secrets(tmp_path, key, value))
    text = str(info.value)
    assert f"{key}" in text and secret not in text and "***" in text, text


def test_an_all_digit_api_key_pasted_into_the_model_is_not_echoed(tmp_path: Path) -> None:
    # YAML reads it as a number, which `llm.model` refuses, quoting the value.
    path = write(tmp_path, "llm: {api_key: '73920561847302', model: 73920561847302}\n")
    with pytest.raises(ConfigError) as info:
        load_settings(path)
    assert "llm.model: " in str(info.value) and "73920561847302" not in str(info.value)


def test_a_secret_inside_a_longer_value_is_masked_the_rest_shown(tmp_path: Path) -> None:
    path = with_secrets(tmp_path, "memory.provider", f"lcm-{API_KEY}-x")
    with pytest.raises(ConfigError) as info:
        load_settings(path)
    assert "memory.provider: unknown provider 'lcm-***-x'" in str(info.value)


def test_llm_url_credentials_are_masked_in_other_keys(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "llm: {base_url: 'https://proxy:llm%40pass-3@proxy.example/v1'}\n"
        'agent: {id: "llm@pass-3 \\x01 llm%40pass-3"}\n',
    )
    with pytest.raises(ConfigError) as info:
        load_settings(path)
    assert "agent.id: " in str(info.value) and "pass-3" not in str(info.value), info.value


def test_short_values_are_not_masked(tmp_path: Path) -> None:
    # A 3-character password is no secret worth mangling the line for.
    path = write(
        tmp_path, "database: {url: 'postgresql+psycopg://u:lcm@db/m'}\nmemory: {provider: lcn}\n"
    )
    with pytest.raises(ConfigError) as info:
        load_settings(path)
    assert "unknown provider 'lcn'; installed: lcm, simple" in str(info.value), info.value


def test_cli_config_error_names_the_key_not_the_pasted_secret(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = with_secrets(tmp_path, "telegram.allowed_ids", ["AAH-bot-secret-part"])
    assert main(["memory", "status", "s1", "--config", str(bad)]) == EXIT_CONFIG
    out = capsys.readouterr()
    assert out.err.startswith(f"mnemo: config error: {bad}: telegram.allowed_ids.0: "), out.err
    assert "AAH-bot-secret-part" not in out.err + out.out
