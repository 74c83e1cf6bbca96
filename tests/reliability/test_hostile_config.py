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

from bot.config import ConfigError, Settings, load_settings
from memory.sanitize import storable
from tests.reliability.corpus import SMALL, looks_like_traceback
from tests.reliability.process import REPO


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


@pytest.mark.parametrize("body", [
    b"\x00\x01\x02", b"\xff\xfe not utf-8", b"telegram: [unclosed", b"- a list\n- at top",
    b"agent:\n  id: ../../etc\n  id: twice\n", b"llm: {timeout_s: 1e999}",
    b"memory: {provider: '../../plugins'}", b"a" * 200_000,
])
def test_cli_reports_a_bad_config_in_one_line(body: bytes, tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_bytes(body)
    done = subprocess.run([sys.executable, "-m", "bot.cli", "--config", str(path), "migrate"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=60,
                          env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    out = done.stdout + done.stderr
    assert not looks_like_traceback(out), out[-2000:]
    if done.returncode != 0:
        assert done.returncode == 2, out
        assert len(done.stderr.strip().splitlines()) == 1, done.stderr
