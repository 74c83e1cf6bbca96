"""The `mnemo` command line: help everywhere, plain answers for commands not built yet."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bot.cli import build_parser, main
from tests.config.test_config import COMMANDS
from tests.waits import scaled

MNEMO = Path(sys.executable).with_name("mnemo")


@pytest.fixture(autouse=True)
def _clean_dir(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("MNEMO_CONFIG", raising=False)
    monkeypatch.chdir(tmp_path)


def test_top_level_help_lists_every_command(tmp_path: Path) -> None:
    proc = subprocess.run(
        [str(MNEMO), "--help"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=scaled(60),
        env={k: v for k, v in os.environ.items() if k != "MNEMO_CONFIG"},
    )
    assert proc.returncode == 0, proc.stderr
    for command in ("run", "chat", "providers", "migrate", "reflect", "memory", "--config"):
        assert command in proc.stdout


@pytest.mark.parametrize(
    "cmd",
    sorted({tuple(c[:2]) if c[0] in ("memory", "web", "config") else (c[0],) for c in COMMANDS}),
    ids=" ".join,
)
def test_every_subcommand_has_help(
    cmd: tuple[str, ...], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as info:
        main([*cmd, "--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: mnemo {' '.join(cmd)}")
    assert "--config PATH" in out


def test_memory_without_action_prints_its_usage(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["memory"]) == 2
    out = capsys.readouterr().out
    assert "status" in out and "sessions" in out and "compact" in out


def test_unknown_command_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["frobnicate"])
    assert info.value.code == 2
    assert "invalid choice: 'frobnicate'" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("work#2", "'#' is reserved"),
        ("", "cannot be empty"),
        ("a\tb", "control characters"),
        ("x" * 101, "at most 100 characters"),
    ],
)
def test_chat_refuses_session_names_it_could_not_keep_apart(
    name: str, why: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as info:
        main(["chat", "--session", name])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "argument --session" in err and why in err


def test_an_unexpected_error_prints_its_traceback_without_secrets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # A library's message may quote the token (python-telegram-bot's InvalidToken does):
    # the last-resort traceback keeps the story and masks every configured secret.
    token, key = "424242:SECRET-token-in-a-traceback", "sk-SECRET-key-in-a-traceback"
    config = tmp_path / "config.yaml"
    config.write_text(f"telegram: {{token: '{token}'}}\nllm: {{api_key: '{key}'}}\n")

    async def broken_run_bot(settings: object) -> int:
        raise RuntimeError(f"the server said no to {token} (key {key})")

    monkeypatch.setattr("bot.app.run.run_channels", broken_run_bot)
    assert main(["run", "--config", str(config)]) == 1
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err and "RuntimeError: the server said no" in err
    for secret in (token, token.split(":")[1], key):
        assert secret not in err, err


def _parsers(
    parser: argparse.ArgumentParser, name: str = "mnemo"
) -> list[tuple[str, argparse.ArgumentParser]]:
    found = [(name, parser)]
    for action in parser._actions:  # argparse offers no public walk of sub-parsers
        if isinstance(action, argparse._SubParsersAction):
            for sub_name, sub in action.choices.items():
                found += _parsers(sub, f"{name} {sub_name}")
    return found


@pytest.mark.parametrize(
    ("name", "parser"), _parsers(build_parser()), ids=[n for n, _ in _parsers(build_parser())]
)
def test_every_argument_has_help_its_default_and_the_command_examples(
    name: str, parser: argparse.ArgumentParser
) -> None:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction | argparse._HelpAction):
            continue
        what = f"{name} {action.dest}"
        assert action.help and action.help.strip(), f"{what}: no help"
        if action.option_strings and action.default not in (None, argparse.SUPPRESS):
            assert "default" in action.help, f"{what}: default {action.default!r} not said"
    help_text = parser.format_help()
    assert "\nexamples:\n  " in help_text, name
    examples = help_text.split("\nexamples:\n", 1)[1].splitlines()
    assert examples and all("mnemo " in line for line in examples), name
    words = name.split()[1:]
    for line in examples:  # each runs this very command
        assert all(word in line.split() for word in words), (name, line)


def test_version_is_the_installed_one(capsys: pytest.CaptureFixture[str]) -> None:
    from importlib.metadata import version

    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0
    assert capsys.readouterr().out == f"mnemo {version('mnemo')}\n"
