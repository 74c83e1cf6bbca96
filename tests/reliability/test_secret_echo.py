"""Secrets stay out of what mnemo prints: a config error names the key and shows the bad
value, except the value of a secret-bearing key (or a secret copied into another key);
and log masking covers the database password both decoded and percent-encoded, secret
query parameters of the database URL, and credentials in the LLM and Telegram URLs."""

from __future__ import annotations

import logging
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from bot.cli import main
from bot.config.settings import ConfigError, load_settings
from tests.reliability.process import REPO
from tests.waits import scaled

TOKEN = "424242:SECRET-token-in-the-wrong-place"


def _error(tmp_path: Path, text: str) -> str:
    path = tmp_path / "config.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        load_settings(path)
    line = str(info.value)
    assert line.startswith(f"{path}: ") and "\n" not in line
    return line


@pytest.mark.parametrize(
    ("yaml_text", "key", "secrets"),
    [
        # All-digit secrets are YAML integers, which a text field refuses.
        ("llm: {api_key: 73920561847302}\n", "llm.api_key: ", ["73920561847302"]),
        ("telegram: {token: 7362519048}\n", "telegram.token: ", ["7362519048"]),
        (
            "telegram: {webhook: {secret_token: 918273645501}}\n",
            "telegram.webhook.secret_token: ",
            ["918273645501"],
        ),
        # A whole section given as the secret.
        ("llm: sk-live-abcdef123456\n", "llm: ", ["sk-live-abcdef123456"]),
        # A URL the driver check refuses: SQLAlchemy can parse it, so only the password goes.
        (
            "database: {url: 'postgres://mnemo:hunter2-secret@db.example/mnemo'}\n",
            "database.url: expected sqlite+aiosqlite",
            ["hunter2-secret"],
        ),
        # Not parseable as a URL: nothing of it is shown.
        (
            "database: {url: 'mnemo:hunter2-secret@db.example/mnemo'}\n",
            "database.url: ",
            ["hunter2-secret"],
        ),
        # An unencoded '@' in the password: SQLAlchemy would split the password at it.
        ("database: {url: 'mysql://u:p@ss-word-x@host/db'}\n", "database.url: ", ["ss-word-x"]),
    ],
)
def test_config_error_hides_secret_values(
    tmp_path: Path, yaml_text: str, key: str, secrets: list[str]
) -> None:
    line = _error(tmp_path, yaml_text)
    assert key in line, line
    for secret in secrets:
        assert secret not in line, line


def test_database_url_error_still_shows_the_rest_of_the_url(tmp_path: Path) -> None:
    line = _error(tmp_path, "database: {url: 'postgres://mnemo:hunter2-secret@db.example/m'}\n")
    assert "postgres://mnemo:***@db.example/m" in line, line


def test_a_secret_copied_into_an_ordinary_key_is_hidden(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MNEMO_TEST_TOKEN", TOKEN)
    line = _error(
        tmp_path, "telegram: {token: '${MNEMO_TEST_TOKEN}', allowed_ids: '${MNEMO_TEST_TOKEN}'}\n"
    )
    assert "telegram.allowed_ids: " in line and TOKEN not in line, line


@pytest.mark.parametrize(
    ("yaml_text", "shown"),
    [
        ("memory: {budget_tokens: lots}\n", "(got 'lots')"),
        ("compaction: {keep_tail: -3}\n", "(got -3)"),
        ("telegram: {group_mode: sometimes}\n", "(got 'sometimes')"),
    ],
)
def test_ordinary_values_are_still_shown(tmp_path: Path, yaml_text: str, shown: str) -> None:
    assert shown in _error(tmp_path, yaml_text)


def test_cli_config_error_hides_the_database_password(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(
        "database: {url: 'postgresql://mnemo:hunter2-secret@db/mnemo'}\n", encoding="utf-8"
    )
    done = subprocess.run(
        [sys.executable, "-m", "bot.cli", "--config", str(path), "providers"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=scaled(60),
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "database.url: " in lines[0], done.stderr
    assert "hunter2-secret" not in done.stderr + done.stdout


# --- log masking of the database password -------------------------------------------


@pytest.fixture
def _root_level() -> Iterator[None]:
    # `mnemo` sets the root level from the config's log_level: put it back.
    root = logging.getLogger()
    level = root.level
    yield
    root.setLevel(level)


@pytest.mark.usefixtures("_root_level")
def test_encoded_database_password_is_masked_in_logs(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> None:
    # Password `p@ss/word-x`, written with lower-case escapes as an operator might.
    raw = "p%40ss%2fword-x"
    url = f"postgresql+psycopg://mnemo:{raw}@127.0.0.1/mnemo"
    path = tmp_path / "config.yaml"
    path.write_text(f"database: {{url: '{url}'}}\nlog_level: DEBUG\n", encoding="utf-8")
    # The real CLI path: `main` loads the config and installs the masking.
    assert main(["providers", "--config", str(path)]) == 0
    capsys.readouterr()
    forms = ["p@ss/word-x", raw, "p%40ss%2Fword-x"]
    log = logging.getLogger("mnemo.test_secret_echo")
    with caplog.at_level(logging.DEBUG):
        log.debug("connecting to %s", url)
        for form in forms:
            log.warning("password was %s", form)
    assert len(caplog.records) == 1 + len(forms)
    assert "mnemo:***@127.0.0.1/mnemo" in caplog.text
    for form in forms:
        assert form not in caplog.text, caplog.text


# --- secrets in URL query strings and in the other URLs -------------------------------


@pytest.mark.parametrize(
    ("url", "shown", "secrets"),
    [
        # The driver check refuses `postgres://`, so the URL is shown, its secrets masked.
        (
            "postgres://mnemo@db/m?password=s3cret-pw",
            "postgres://mnemo@db/m?password=***",
            ["s3cret-pw"],
        ),
        # As written and decoded; other parameters stay readable, exactly as written.
        (
            "postgres://mnemo:hunter2-secret@db/m?sslmode=require&sslpassword=ss%2Fl-pass-x",
            "postgres://mnemo:***@db/m?sslmode=require&sslpassword=***",
            ["hunter2-secret", "ss%2Fl-pass-x", "ss/l-pass-x", "%2A"],
        ),
        # Any parameter named like a secret, in any case.
        (
            "postgres://db/m?API_Token=tok-value-1&client_secret=sec-value-2",
            "postgres://db/m?API_Token=***&client_secret=***",
            ["tok-value-1", "sec-value-2"],
        ),
    ],
)
def test_config_error_masks_secret_query_parameters(
    tmp_path: Path, url: str, shown: str, secrets: list[str]
) -> None:
    line = _error(tmp_path, f"database: {{url: '{url}'}}\n")
    assert f"(got {shown!r})" in line, line
    for secret in secrets:
        assert secret not in line, line


def test_a_query_password_copied_into_an_ordinary_key_is_hidden(tmp_path: Path) -> None:
    line = _error(
        tmp_path,
        "database: {url: 'postgresql+psycopg://u@db/m?password=s3cret-pw'}\n"
        "memory: {budget_tokens: s3cret-pw}\n",
    )
    assert "memory.budget_tokens: " in line and "s3cret-pw" not in line, line


@pytest.mark.usefixtures("_root_level")
def test_url_query_and_userinfo_secrets_are_masked_in_logs(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> None:
    db_url = (
        "postgresql+psycopg://mnemo@127.0.0.1/mnemo?password=qp%2Fsecret-1&sslpassword=ssl-secret-2"
    )
    llm_url = "https://proxy-user:llm%40pass-3@proxy.example/v1"
    hook_url = "https://hook:hook-pass-4@bot.example/hook"
    api_url = "http://api:tg-api-pass-5@localhost:8081"
    path = tmp_path / "config.yaml"
    path.write_text(
        f"database: {{url: '{db_url}'}}\nllm: {{base_url: '{llm_url}'}}\n"
        f"telegram: {{base_url: '{api_url}', webhook: {{url: '{hook_url}'}}}}\n"
        "log_level: DEBUG\n",
        encoding="utf-8",
    )
    # The real CLI path: `main` loads the config and installs the masking.
    assert main(["providers", "--config", str(path)]) == 0
    capsys.readouterr()
    forms = [
        "qp%2Fsecret-1",
        "qp/secret-1",
        "ssl-secret-2",
        "llm%40pass-3",
        "llm@pass-3",
        "hook-pass-4",
        "tg-api-pass-5",
    ]
    log = logging.getLogger("mnemo.test_secret_echo")
    with caplog.at_level(logging.DEBUG):
        for url in (db_url, llm_url, hook_url, api_url):
            log.debug("requesting %s", url)
        for form in forms:
            log.warning("secret was %s", form)
    assert len(caplog.records) == 4 + len(forms)
    assert "mnemo?password=***&sslpassword=***" in caplog.text, caplog.text
    assert "https://proxy-user:***@proxy.example/v1" in caplog.text, caplog.text
    for form in forms:
        assert form not in caplog.text, caplog.text
