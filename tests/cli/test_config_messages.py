"""Config errors as a newcomer meets them: every wrong key at once, each said once, an
unknown provider stopping every command, docs/CONFIGURATION.md's sample the real line."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from bot.config.settings import ConfigError, load_settings
from tests.cli.conftest import mnemo

CONFIGURATION = Path(__file__).resolve().parents[2] / "docs" / "CONFIGURATION.md"


def test_every_wrong_key_is_reported_one_line_each(tmp_path: Path) -> None:
    (tmp_path / "config.yaml").write_text(
        "agent: {idd: 1}\nllm: {modell: x, timeout_s: -1}\nreflect: {interval: soon}\n"
        "memory: {provider: lcn, budget: 3}\n"
    )
    proc = mnemo("providers", cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert proc.stderr.splitlines() == [
        "mnemo: config error: config.yaml: agent.idd: unknown key (check the spelling; "
        "see config.yaml for the known keys)",
        "mnemo: config error: config.yaml: llm.timeout_s: Input should be greater than 0 (got -1)",
        "mnemo: config error: config.yaml: llm.modell: unknown key (check the spelling; "
        "see config.yaml for the known keys)",
        # The value once, not "got 'soon' (got 'soon')".
        "mnemo: config error: config.yaml: reflect.interval: expected a duration like 30s, "
        "5m, 1h or 1d (got 'soon')",
        "mnemo: config error: config.yaml: memory.provider: unknown provider 'lcn'; "
        "installed: lcm, simple",
        # A stray key under memory (read as a provider's section) is named with the rest.
        "mnemo: config error: config.yaml: memory.budget: unknown key (not a setting, nor an "
        "installed provider; installed: lcm, simple)",
    ]


@pytest.mark.slow  # subprocesses: `make test-slow`
def test_an_unknown_provider_stops_every_command(tmp_path: Path) -> None:
    (tmp_path / "config.yaml").write_text("memory: {provider: nope}\n")
    line = (
        "mnemo: config error: config.yaml: memory.provider: unknown provider 'nope'; "
        "installed: lcm, simple\n"
    )
    for command in ("providers", "migrate"):
        proc = mnemo(command, cwd=tmp_path)
        assert (proc.returncode, proc.stdout, proc.stderr) == (2, "", line), command
    assert list(tmp_path.iterdir()) == [tmp_path / "config.yaml"]  # migrate made nothing


def test_stream_edit_interval_below_a_second_is_refused(tmp_path: Path) -> None:
    # docs/CONFIGURATION.md says "at least 1" (Telegram takes about one edit a second per chat).
    config = tmp_path / "config.yaml"
    config.write_text("telegram: {stream_edit_interval_s: 0.2}\n")
    with pytest.raises(
        ConfigError, match="stream_edit_interval_s: Input should be greater than or equal to 1"
    ):
        load_settings(config)
    config.write_text("telegram: {stream_edit_interval_s: 1}\n")
    assert load_settings(config).telegram.stream_edit_interval_s == 1


def test_the_readmes_sample_config_error_is_the_real_one(tmp_path: Path) -> None:
    block = re.search(r"```\n(mnemo: config error: .*?)```", CONFIGURATION.read_text(), re.S)
    assert block is not None
    sample = block.group(1).splitlines()
    config = tmp_path / "config.yaml"
    config.write_text("memory: {budget_tokens: abc}\nllm: {modell: x}\n")
    with pytest.raises(ConfigError) as info:
        load_settings(config)
    real = [
        f"mnemo: config error: {line.replace(str(config), 'config.yaml')}"
        for line in str(info.value).splitlines()
    ]
    assert sorted(real) == sorted(sample)
