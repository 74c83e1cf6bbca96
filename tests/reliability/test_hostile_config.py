"""The hostile corpus as config values: every key of config.yaml given every corpus
value either loads or fails with one `ConfigError` line naming the key; and the CLI turns
a bad config into exit code 2 with one line, no traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from bot.config.settings import ConfigError, Settings, load_settings
from memory.text.sanitize import storable
from tests.reliability.corpus import SMALL, looks_like_traceback
from tests.reliability.process import REPO
from tests.waits import scaled


def _leaf_keys(model: Any, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    out = []
    for name in type(model).model_fields:
        value = getattr(model, name)
        if hasattr(type(value), "model_fields"):
            out += _leaf_keys(value, (*prefix, name))
        else:
            out.append((*prefix, name))
    return out


KEYS = _leaf_keys(Settings())


def _nest(key: tuple[str, ...], value: Any) -> dict[str, Any]:
    out: Any = value
    for part in reversed(key):
        out = {part: out}
    return out


def _dump(raw: dict[str, Any]) -> str:
    # Escaped ASCII YAML, so NUL and lone surrogates reach the parser as escapes.
    return yaml.safe_dump(raw, allow_unicode=False)


@pytest.mark.slow  # subprocesses: `make test-slow`
def test_every_key_with_every_corpus_value(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    checked = 0
    values: list[Any] = [v for _, v in SMALL] + [10**400, -(10**30), 1e308, [], {"x": 1}, None]
    for key in KEYS:
        for value in values:
            path.write_text(_dump(_nest(key, value)), encoding="utf-8")
            try:
                settings = load_settings(path)
            except ConfigError as exc:
                line = str(exc)
                assert "\n" not in line.strip() and ".".join(key) in line, (key, line[:200])
            else:
                # An accepted agent id is part of every stored key: it must be storable.
                assert storable(settings.agent.id) == settings.agent.id, repr(value)
            checked += 1
    assert checked == len(KEYS) * len(values)


@pytest.mark.parametrize(
    "body",
    [
        b"\x00\x01\x02",
        b"\xff\xfe not utf-8",
        b"telegram: [unclosed",
        b"- a list\n- at top",
        b"agent:\n  id: ../../etc\n  id: twice\n",
        b"llm: {timeout_s: 1e999}",
        b"memory: {provider: '../../plugins'}",
        b"a" * 200_000,
    ],
)
def test_cli_reports_a_bad_config_in_one_line(body: bytes, tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_bytes(body)
    done = subprocess.run(
        [sys.executable, "-m", "bot.cli", "--config", str(path), "migrate"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=scaled(60),
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
    )
    out = done.stdout + done.stderr
    assert not looks_like_traceback(out), out[-2000:]
    if done.returncode != 0:
        assert done.returncode == 2, out
        assert len(done.stderr.strip().splitlines()) == 1, done.stderr


# --- documents only an attack writes, and numbers no setting needs --------------------

_LAUGHS = 'lol0: &lol0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]\n' + "".join(
    f"lol{i}: &lol{i} [{', '.join([f'*lol{i - 1}'] * 9)}]\n" for i in range(1, 10)
)


@pytest.mark.parametrize(
    ("body", "said"),
    [
        (_LAUGHS, "aliases expand to more than"),  # a billion values once expanded
        (
            "".join(f"l{i}: &l{i} [*l{i - 1}]\n" for i in range(1, 400)).replace("*l0", "x"),
            "aliases nest deeper than",
        ),
        ("agent: &a {id: x, system_prompt: *a}\n", "an alias refers to its own anchor"),
        ("llm: " + "[" * 5000 + "]" * 5000 + "\n", "nested deeper than"),
        ("llm:\n" + "".join("  " * i + f"k{i}:\n" for i in range(1, 5000)), "nested deeper than"),
        ("agent: {id: a}\ndatabase: {}\nagent: {id: b}\n", "duplicate key 'agent' at line 3"),
        (
            "telegram:\n  token: '1:abcdef'\n  token: '2:ghijkl'\n",
            "duplicate key 'token' at line 3",
        ),
        ("llm: {model: a, model: b}\n", "duplicate key 'model' at line 1"),
        ("reflect: {interval: 99999999999999h}\n", "reflect.interval: expected a duration"),
        ("reflect: {interval: " + "9" * 400 + "s}\n", "reflect.interval"),  # inf seconds
        ("llm: {temperature: .nan}\n", "llm.temperature"),
        ("llm: {temperature: nan}\n", "llm.temperature"),
        ("llm: {timeout_s: .inf}\n", "llm.timeout_s"),
        ("llm: {temperature: 7}\n", "llm.temperature: Input should be less than or equal to 2"),
        ("telegram: {token: 'not a token'}\n", "telegram.token: expected a bot token"),
        ("telegram: {allowed_ids: [99999999999999999999]}\n", "telegram.allowed_ids.0"),
        ("telegram: {base_url: 'localhost:8081'}\n", "telegram.base_url: expected"),
    ],
    ids=[
        "billion-laughs",
        "alias-chain",
        "recursive-alias",
        "deep-flow",
        "deep-block",
        "duplicate-section",
        "duplicate-key",
        "duplicate-in-flow",
        "interval-overflow",
        "interval-digits",
        "temperature-nan",
        "temperature-nan-string",
        "timeout-inf",
        "temperature-range",
        "not-a-token",
        "huge-id",
        "base-url-scheme",
    ],
)
def test_cli_refuses_a_hostile_config_in_one_line(body: str, said: str, tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(body, encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-m", "bot.cli", "--config", str(path), "migrate"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=scaled(60),
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 2, done.stdout + done.stderr[-2000:]
    assert done.stdout == ""
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith(f"mnemo: config error: {path}: ") and said in line, line
    assert "not a token" not in line  # a secret's value is never shown


def test_anchors_and_merge_keys_within_bounds_still_work(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(
        "telegram:\n  allowed_ids: &ids [1, 2]\n  admin_ids: *ids\n"
        "  webhook: &hook {listen: 127.0.0.2, port: 9000}\n"
        "health:\n  <<: *hook\n  port: 9100\n",
        encoding="utf-8",
    )
    settings = load_settings(path)
    assert settings.telegram.admin_ids == [1, 2]
    assert (settings.health.listen, settings.health.port) == ("127.0.0.2", 9100)


def _numeric_keys() -> list[tuple[tuple[str, ...], type]]:
    out = []
    for key in KEYS:
        model: Any = Settings()
        for part in key[:-1]:
            model = getattr(model, part)
        annotation = str(type(model).model_fields[key[-1]].annotation)
        for kind in (float, int):
            if kind.__name__ in annotation:
                out.append((key, kind))
                break
    return out


NUMERIC_KEYS = _numeric_keys()


@pytest.mark.parametrize(("key", "kind"), NUMERIC_KEYS, ids=[".".join(k) for k, _ in NUMERIC_KEYS])
def test_every_numeric_key_has_bounds(key: tuple[str, ...], kind: type, tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    model: Any = Settings()
    for part in key[:-1]:
        model = getattr(model, part)
    is_list = "list" in str(type(model).model_fields[key[-1]].annotation)
    bad: list[Any] = [10**19, -(10**19)] + ([float("nan"), float("inf")] if kind is float else [])
    for value in bad:
        path.write_text(_dump(_nest(key, [value] if is_list else value)), encoding="utf-8")
        with pytest.raises(ConfigError) as info:
            load_settings(path)
        assert ".".join(key) in str(info.value), (value, str(info.value))
