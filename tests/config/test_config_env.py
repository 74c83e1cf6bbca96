"""Settings from the environment (bot/config/env.py): every key, over any config file or
none; the well-known names; `*_FILE`; typos refused; secrets never echoed."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from bot.config.settings import ConfigError, load_config, load_settings
from tests.memory.test_registry import third_party  # noqa: F401,F811  (a fixture)

TOKEN = "424242:AAH-bot-secret-part"
API_KEY = "sk-live-4f8a2c9e71d3"


@pytest.fixture(autouse=True)
def _clean(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in list(os.environ):
        if name.startswith(("MNEMO_", "TELEGRAM_", "OPENAI_")) or name == "DATABASE_URL":
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)  # no ./config.yaml unless a test writes one


def setenv(monkeypatch: pytest.MonkeyPatch, **values: str) -> None:
    for name, value in values.items():
        monkeypatch.setenv(name, value)


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def test_the_well_known_names_work_without_a_config_file(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    setenv(
        monkeypatch,
        TELEGRAM_BOT_TOKEN=TOKEN,
        OPENAI_API_KEY=API_KEY,
        OPENAI_BASE_URL="http://llm.local/v1",
        DATABASE_URL="postgres://mnemo:pw-123456@db/mnemo",  # as hosting platforms give it
        MNEMO_MODEL="gpt-4o",
        MNEMO_VISION="true",
        MNEMO_BUDGET_TOKENS="9000",
        MNEMO_COMPACTION_MAX_TOKENS="6000",
        TELEGRAM_WEBHOOK_URL="https://bot.example/hook",
        MNEMO_HEALTH_ENABLED="true",
        MNEMO_HEALTH_LISTEN="0.0.0.0",
    )
    s = load_settings()
    assert s.telegram.token == TOKEN and s.llm.api_key == API_KEY
    assert s.llm.base_url == "http://llm.local/v1" and s.llm.model == "gpt-4o"
    assert s.database.url == "postgresql+psycopg://mnemo:pw-123456@db/mnemo"
    assert s.llm.vision is True
    assert (s.memory.budget_tokens, s.compaction.max_tokens) == (9000, 6000)
    assert s.telegram.webhook.url == "https://bot.example/hook"
    # As the image sets them: the health server on, and the console beside it.
    assert s.health.enabled is True and s.health.listen == s.web.listen == "0.0.0.0"


def test_a_small_config_file_takes_the_secrets_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The case: a 4-line file naming only the servers.
    path = write(
        tmp_path,
        "telegram:\n  base_url: http://tg.local:8081\nllm:\n  base_url: http://llm.local/v1\n",
    )
    setenv(monkeypatch, TELEGRAM_BOT_TOKEN=TOKEN, OPENAI_API_KEY=API_KEY)
    s = load_settings(path)
    assert s.telegram.token == TOKEN and s.llm.api_key == API_KEY
    assert s.telegram.base_url == "http://tg.local:8081"


def test_every_key_has_a_variable_typed_like_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    setenv(
        monkeypatch,
        MNEMO_TELEGRAM__ALLOWED_IDS="1, 2,-1001234567890",
        MNEMO_TELEGRAM__ADMIN_IDS="[7]",
        MNEMO_LIMITS__TOKENS_PER_DAY="200000",
        MNEMO_LIMITS__BACKGROUND__WINDOW="30m",
        MNEMO_MEMORY__PROVIDER="simple",
        MNEMO_MEMORY__LCM__LEAF_CHUNK_SIZE="12",
        MNEMO_MEMORY__SIMPLE__STORE_DIR="notes",
        MNEMO_LLM__PRICES='{"gpt-4o-mini": {"input": 0.15, "output": 0.6}}',
        MNEMO_LLM__TEMPERATURE="0.2",
        MNEMO_WEB__OPERATORS='[{"name": "ann", "token_sha256": "' + "ab" * 32 + '"}]',
        MNEMO_DATA_DIR="state",
        MNEMO_LOG_LEVEL="DEBUG",
        MNEMO_REFLECT__ENABLED="false",
    )
    s = load_settings()
    assert s.telegram.allowed_ids == [1, 2, -1001234567890] and s.telegram.admin_ids == [7]
    assert s.limits.tokens_per_day == 200_000 and s.limits.background.window_s == 1800
    assert s.memory.provider == "simple"
    assert s.provider_config()["store_dir"] == str(tmp_path / "notes")
    assert s.memory.section("lcm")["leaf_chunk_size"] == 12
    assert s.llm.price_table()["gpt-4o-mini"].output == 0.6
    assert s.llm.temperature == 0.2
    assert [o.name for o in s.web.operators] == ["ann"]
    # A relative path from the environment is relative to the current directory.
    assert s.data_dir == str(tmp_path / "state")
    assert s.log_level == "DEBUG" and s.reflect.enabled is False


def test_environment_over_file_and_specific_over_general(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write(
        tmp_path,
        "llm: {model: from-file, api_key: file-key-123456}\n"
        "telegram: {allowed_ids: [5], group_mode: always}\n"
        "database: {url: 'sqlite+aiosqlite:///file.db'}\n",
    )
    setenv(
        monkeypatch,
        MNEMO_MODEL="from-short-name",
        MNEMO_LLM__MODEL="from-key-name",
        OPENAI_API_KEY=API_KEY,
        MNEMO_TELEGRAM__ALLOWED_IDS="6",
        DATABASE_URL="sqlite+aiosqlite:///general.db",
        MNEMO_DATABASE_URL="sqlite+aiosqlite:////srv/specific.db",
    )
    loaded = load_config(path)
    s = loaded.settings
    assert s.llm.model == "from-key-name" and s.llm.api_key == API_KEY
    assert s.telegram.allowed_ids == [6] and s.telegram.group_mode == "always"
    assert s.database.url == "sqlite+aiosqlite:////srv/specific.db"
    assert loaded.source("llm.model") == "env MNEMO_LLM__MODEL"
    assert loaded.source("database.url") == "env MNEMO_DATABASE_URL"
    assert loaded.source("telegram.group_mode") == "file"
    assert loaded.source("agent.id") == "default"


def test_a_whole_section_as_json_is_merged_over_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write(tmp_path, "health: {enabled: true, port: 9100}\n")
    setenv(monkeypatch, MNEMO_HEALTH='{"listen": "0.0.0.0"}')
    s = load_settings(path)
    assert (s.health.enabled, s.health.port, s.health.listen) == (True, 9100, "0.0.0.0")


def test_the_shipped_config_and_its_variables_still_work(monkeypatch: pytest.MonkeyPatch) -> None:
    shipped = Path(__file__).resolve().parents[2] / "config.yaml"
    setenv(monkeypatch, MNEMO_BUDGET_TOKENS="8000", TELEGRAM_BOT_TOKEN=TOKEN)
    loaded = load_config(shipped)
    assert loaded.settings.memory.budget_tokens == 8000
    assert loaded.settings.telegram.token == TOKEN
    assert loaded.source("llm.model") == "file ${MNEMO_MODEL}"


def test_a_secret_may_come_from_a_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "token").write_text(TOKEN + "\n")  # as `echo` writes it
    (tmp_path / "key").write_text(API_KEY)
    setenv(
        monkeypatch,
        TELEGRAM_BOT_TOKEN_FILE=str(tmp_path / "token"),
        MNEMO_LLM__API_KEY_FILE=str(tmp_path / "key"),
    )
    loaded = load_config()
    assert loaded.settings.telegram.token == TOKEN and loaded.settings.llm.api_key == API_KEY
    assert loaded.source("telegram.token") == f"env TELEGRAM_BOT_TOKEN_FILE ({tmp_path}/token)"


@pytest.mark.parametrize(
    ("env", "line"),
    [
        (
            {"MNEMO_TELEGRAM__ALOWED_IDS": "1,2"},
            "environment: MNEMO_TELEGRAM__ALOWED_IDS: no key telegram.alowed_ids (telegram has: "
            "token, base_url, allowed_ids, admin_ids, group_mode, webhook, concurrent_updates, "
            "stream_edit_interval_s)",
        ),
        (
            {"MNEMO_TELEGRAM_ALLOWED_IDS": "1,2"},
            "environment: MNEMO_TELEGRAM_ALLOWED_IDS: not a setting; a key inside a section "
            "takes two underscores (MNEMO_TELEGRAM__ALLOWED_IDS)",
        ),
        (
            {"MNEMO_MODLE": "gpt-4o"},
            "environment: MNEMO_MODLE: not a setting; did you mean MNEMO_MODEL?",
        ),
        (
            {"MNEMO_MEMORY__LCN__LEAF_CHUNK_SIZE": "4"},
            "environment: MNEMO_MEMORY__LCN__LEAF_CHUNK_SIZE: no key memory.lcn (memory has: "
            "provider, budget_tokens, fresh_tail, max_facts, retention, lcm, simple)",
        ),
        (
            {"MNEMO_AGENT__ID__X": "1"},
            "environment: MNEMO_AGENT__ID__X: agent.id is a single value, not a section",
        ),
        (
            {"MNEMO_LIMITS__TOKENS_PER_DAY": "lots"},
            "environment: MNEMO_LIMITS__TOKENS_PER_DAY: limits.tokens_per_day: Input should be "
            "a valid integer, unable to parse string as an integer (got 'lots')",
        ),
        (
            {"MNEMO_TELEGRAM__ALLOWED_IDS": "1,two"},
            "environment: MNEMO_TELEGRAM__ALLOWED_IDS: telegram.allowed_ids.1: Input should be "
            "a valid integer, unable to parse string as an integer (got 'two')",
        ),
        (
            {"MNEMO_WEB__OPERATORS": '[{"name": "ann",'},
            "environment: MNEMO_WEB__OPERATORS: not valid JSON (line 1, column 17)",
        ),
        (
            {"MNEMO_LLM__PRICES": "gpt-4o-mini"},
            "environment: MNEMO_LLM__PRICES: expected a JSON object for llm.prices",
        ),
        (
            {"MNEMO_MEMORY__PROVIDER": "lcn"},
            "environment: MNEMO_MEMORY__PROVIDER: memory.provider: unknown provider 'lcn'; "
            "installed: lcm, simple",
        ),
        (
            {"OPENAI_API_KEY": API_KEY, "OPENAI_API_KEY_FILE": "/run/secrets/key"},
            "environment: OPENAI_API_KEY_FILE: give OPENAI_API_KEY or OPENAI_API_KEY_FILE, "
            "not both",
        ),
        (
            {"TELEGRAM_BOT_TOKEN_FILE": "/nonexistent/token"},
            "environment: TELEGRAM_BOT_TOKEN_FILE: cannot read /nonexistent/token "
            "(No such file or directory)",
        ),
    ],
)
def test_a_wrong_variable_is_one_line_naming_it(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], line: str
) -> None:
    setenv(monkeypatch, **env)
    with pytest.raises(ConfigError) as info:
        load_settings()
    assert str(info.value) == line


def test_every_wrong_variable_at_once_beside_the_files_mistakes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write(tmp_path, "llm: {timeout_s: -1}\n")
    setenv(monkeypatch, MNEMO_LLM__MAX_RETRIES="many", MNEMO_RECALL__MAX_ROUNDS="9")
    with pytest.raises(ConfigError) as info:
        load_settings(path)
    lines = str(info.value).splitlines()
    assert len(lines) == 3
    assert f"{path}: llm.timeout_s: Input should be greater than 0 (got -1)" in lines
    assert any(
        x.startswith("environment: MNEMO_LLM__MAX_RETRIES: llm.max_retries: ") for x in lines
    )
    assert any(
        x.startswith("environment: MNEMO_RECALL__MAX_ROUNDS: recall.max_rounds: ") for x in lines
    )


def test_other_programs_mnemo_variables_are_left_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The test tools' own, docker compose's host ports, and what the file reads itself.
    setenv(
        monkeypatch,
        MNEMO_TEST_PG="postgresql+psycopg://postgres@127.0.0.1/test",
        MNEMO_CRASH_SEED="7",
        MNEMO_BENCH_CACHE="/tmp/x",
        MNEMO_EVENT_LOOP="uvloop",
        MNEMO_HEALTH_PORT="9500",
        MNEMO_WEBHOOK_PORT="8443",
        MNEMO_MY_PORT="9100",
    )
    s = load_settings(write(tmp_path, "health: {port: '${MNEMO_MY_PORT}'}\n"))
    assert s.health.port == 9100


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("MNEMO_MEMORY__PROVIDER", API_KEY),
        ("MNEMO_AGENT__ID", f"\x01{API_KEY}"),
        ("MNEMO_TELEGRAM__ALLOWED_IDS", TOKEN.split(":")[1]),
        ("MNEMO_REFLECT__INTERVAL", API_KEY),
    ],
)
def test_a_secret_from_the_environment_is_never_echoed(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str
) -> None:
    setenv(monkeypatch, OPENAI_API_KEY=API_KEY, TELEGRAM_BOT_TOKEN=TOKEN, **{name: value})
    with pytest.raises(ConfigError) as info:
        load_settings()
    text = str(info.value)
    assert text.startswith(f"environment: {name}: ") and "***" in text, text
    assert value.strip("\x01") not in text


def test_a_wrong_secret_from_the_environment_is_not_shown(monkeypatch: pytest.MonkeyPatch) -> None:
    setenv(monkeypatch, TELEGRAM_BOT_TOKEN="not a token at all, secret-xyz")
    with pytest.raises(ConfigError) as info:
        load_settings()
    text = str(info.value)
    assert text.startswith("environment: TELEGRAM_BOT_TOKEN: telegram.token: expected a bot token")
    assert "secret-xyz" not in text


def test_an_unset_secret_stops_only_commands_that_need_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write(
        tmp_path,
        "telegram: {token: '${MY_BOT_TOKEN}'}\nllm: {api_key: '${MY_KEY}'}\n"
        "web: {session_secret: '${MY_SESSION_SECRET}'}\n",
    )
    # A command that needs no secret (memory sessions) loads it, the secrets empty.
    loaded = load_config(path, secrets=())
    assert loaded.settings.telegram.token == "" and loaded.settings.llm.api_key == ""
    assert loaded.source("telegram.token") == "file, ${MY_BOT_TOKEN} not set"
    # One that needs the key is stopped by that one only; `run` (all) by each.
    with pytest.raises(ConfigError) as info:
        load_settings(path, secrets=("llm.api_key",))
    assert str(info.value) == (
        f"{path}: llm.api_key: environment variable MY_KEY is not set (used as ${{MY_KEY}})"
    )
    with pytest.raises(ConfigError) as info:
        load_settings(path)
    assert len(str(info.value).splitlines()) == 3
    # The environment's own name for the key fills it as well.
    setenv(monkeypatch, OPENAI_API_KEY=API_KEY)
    assert load_settings(path, secrets=("llm.api_key",)).llm.api_key == API_KEY


def test_an_unset_database_url_stops_every_command(tmp_path: Path) -> None:
    # Nearly every command opens the database: no silent fallback to a fresh SQLite file.
    path = write(tmp_path, "database: {url: '${MY_DB_URL}'}\n")
    with pytest.raises(ConfigError, match="database.url: environment variable MY_DB_URL"):
        load_settings(path, secrets=())


def test_an_empty_variable_counts_as_unset(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # docker compose passes `MNEMO_BUDGET_TOKENS: ${MNEMO_BUDGET_TOKENS:-}` through.
    setenv(monkeypatch, MNEMO_BUDGET_TOKENS="", MNEMO_LLM__MODEL="", TELEGRAM_BOT_TOKEN="")
    path = write(tmp_path, "llm: {model: from-file}\n")
    s = load_settings(path)
    assert s.memory.budget_tokens == 13500 and s.llm.model == "from-file"


def test_a_third_party_providers_section_from_the_environment(
    third_party: Path,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A plugin without a settings model of its own: its keys pass as JSON values (else text).
    setenv(
        monkeypatch,
        MNEMO_MEMORY__PROVIDER="acme",
        MNEMO_MEMORY__ACME__SHARDS="3",
        MNEMO_MEMORY__ACME__LABEL="blue",
    )
    config = load_settings().provider_config()
    assert (config["shards"], config["label"]) == (3, "blue")
    setenv(monkeypatch, MNEMO_MEMORY__ACME='{"shards": 4, "zones": ["a"]}')
    config = load_settings().provider_config()
    assert (config["shards"], config["zones"], config["label"]) == (3, ["a"], "blue")
