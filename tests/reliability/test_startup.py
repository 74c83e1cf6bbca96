"""`mnemo run` at start, as a subprocess against the fake Bot API:

- a rejected token (revoked: 401; a Bot API URL that is not one: 404; not a token at
  all) ends the start with one `mnemo:` line, exit 2, no traceback, and the token in
  nothing the process wrote (stdout, stderr and its DEBUG logs, files in its directory);
- `telegram.base_url` works as the server root and in python-telegram-bot's `/bot` form;
- a Bot API that is unreachable or failing is retried with backoff, one log line per
  attempt, until it answers; a stop (SIGTERM, SIGINT) during the wait ends it at once,
  cleanly (exit 0)."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

import pytest

from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.telegram_server import FakeTelegram, free_port
from tests.reliability.conftest import SECRET_TOKEN
from tests.reliability.corpus import looks_like_traceback
from tests.reliability.process import REPO, BotProcess, write_config
from tests.reliability.test_logs import run_config
from tests.waits import scaled

# Each test starts `mnemo` subprocesses: `make test-slow`.
pytestmark = pytest.mark.slow

RETRY_LINE = "Telegram Bot API unreachable"
SECRET_PART = SECRET_TOKEN.split(":", 1)[1]


def _config(tmp_path: Path, tg: FakeTelegram, llm: FakeOpenAI, **telegram: object) -> dict:
    config = run_config(
        tmp_path, tg, llm, f"sqlite+aiosqlite:///{tmp_path / 'bot.db'}", log_level="DEBUG"
    )  # PTB logs its Bot API URL, token included
    config["telegram"] = {**config["telegram"], **telegram}  # type: ignore[dict-item]
    return config


async def _run_to_exit(tmp_path: Path, config: dict) -> tuple[int, str, str]:
    path = write_config(tmp_path / "config.yaml", config)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("MNEMO_CONFIG", None)
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bot.cli",
        "--config",
        str(path),
        "run",
        cwd=tmp_path,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), scaled(60))
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise AssertionError("`mnemo run` kept going with a rejected token") from None
    return proc.returncode or 0, out.decode(), err.decode()


def _files_holding(root: Path, secret: str, skip: Path) -> list[Path]:
    return [
        p
        for p in root.rglob("*")
        if p.is_file() and p != skip and secret.encode() in p.read_bytes()
    ]


@pytest.mark.parametrize(
    ("token", "suffix", "refused"),
    [
        ("424242:revoked-or-wrong-token-x", "", "refused the bot token (Unauthorized)"),
        (SECRET_TOKEN, "/not-the-bot-api", "refused the bot token (Not Found"),
        ("not a token", "", "config error:"),
        ("SECRET not a token: 424242", "", "config error:"),
    ],
    ids=["revoked-401", "wrong-url-404", "not-a-token", "token-with-spaces"],
)
async def test_a_rejected_token_ends_the_start_in_one_line_without_the_token(
    tg: FakeTelegram, llm: FakeOpenAI, tmp_path: Path, token: str, suffix: str, refused: str
) -> None:
    config = _config(tmp_path, tg, llm, token=token, base_url=tg.base_url + suffix)
    code, out, err = await _run_to_exit(tmp_path, config)
    assert code == 2, err[-3000:]
    errors = [line for line in err.splitlines() if line.startswith("mnemo:")]
    assert len(errors) == 1 and refused in errors[0], err[-3000:]
    assert err.strip().splitlines()[-1] == errors[0]  # the last word, not a traceback
    if suffix == "":  # (at a wrong URL, PTB logs its failure to parse the 404 page)
        assert not looks_like_traceback(out + err), err[-3000:]
    assert RETRY_LINE not in err  # refused, not retried
    for secret in {token, token.partition(":")[2], SECRET_TOKEN, SECRET_PART} - {""}:
        assert secret not in out and secret not in err, secret
        assert not _files_holding(tmp_path, secret, tmp_path / "config.yaml"), secret
    if refused.startswith("refused"):
        assert "Calling Bot API endpoint `getMe`" in err  # DEBUG was on, getMe was sent


@pytest.mark.parametrize("form", ["/bot", "/bot{token}"])
async def test_base_url_in_python_telegram_bots_form(
    tg: FakeTelegram, llm: FakeOpenAI, tmp_path: Path, form: str
) -> None:
    bot = BotProcess(tmp_path, _config(tmp_path, tg, llm, base_url=tg.base_url + form), tg)
    await bot.start()
    try:
        tg.private(42).send("hello")
        await tg.wait_for_message(42, contains="echo: hello", within=20)
    finally:
        assert await bot.stop() == 0
    assert SECRET_TOKEN not in bot.stderr_text() and SECRET_PART not in bot.stderr_text()


async def _log_lines(bot: BotProcess, mark: str, count: int, within: float = 60.0) -> list[str]:
    """Wait until the bot has logged `count` lines containing `mark`; those lines."""
    deadline = asyncio.get_running_loop().time() + scaled(within)
    while True:
        lines = [line for line in bot.stderr_text().splitlines() if mark in line]
        if len(lines) >= count:
            return lines
        if bot.proc is not None and bot.proc.returncode is not None:
            raise AssertionError(
                f"the bot exited with {bot.proc.returncode}:\n{bot.stderr_text()[-3000:]}"
            )
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"no {count} {mark!r} lines:\n{bot.stderr_text()[-3000:]}")
        await asyncio.sleep(0.05)


async def test_unreachable_at_start_is_retried_until_it_answers(
    llm: FakeOpenAI, tmp_path: Path
) -> None:
    tg = FakeTelegram(token=SECRET_TOKEN, port=free_port())  # nothing listens there yet
    bot = BotProcess(tmp_path, _config(tmp_path, tg, llm), tg)
    starting = asyncio.create_task(bot.start(within=120))
    try:
        lines = await _log_lines(bot, RETRY_LINE, 2)
        assert "attempt 1: NetworkError" in lines[0] and "retrying in 1 s" in lines[0]
        assert "attempt 2: NetworkError" in lines[1] and "retrying in 2 s" in lines[1]
        await tg.start()
        await starting  # it polls: it reached the Bot API on its own
        tg.private(42).send("hello")
        await tg.wait_for_message(42, contains="echo: hello", within=20)
    finally:
        starting.cancel()
        code = await bot.stop()
        await tg.stop()
    assert code == 0
    logged = bot.stderr_text()
    assert logged.count("reached the Telegram Bot API (attempt") == 1  # not once a failure
    assert not looks_like_traceback(logged), logged[-3000:]
    assert SECRET_TOKEN not in logged and SECRET_PART not in logged


async def test_a_failing_bot_api_is_retried(
    tg: FakeTelegram, llm: FakeOpenAI, tmp_path: Path
) -> None:
    tg.fail("getMe", 502, times=2)
    bot = BotProcess(tmp_path, _config(tmp_path, tg, llm), tg)
    await bot.start(within=60)
    assert await bot.stop() == 0
    lines = [line for line in bot.stderr_text().splitlines() if RETRY_LINE in line]
    assert len(lines) == 2 and all("Bad Gateway" in line for line in lines), lines
    assert len(tg.calls_to("getMe")) == 3


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
async def test_a_stop_during_the_retry_wait_ends_it_cleanly(
    tg: FakeTelegram, llm: FakeOpenAI, tmp_path: Path, sig: signal.Signals
) -> None:
    tg.fail("getMe", 429, retry_after=3600)  # the next attempt would be an hour away
    bot = BotProcess(tmp_path, _config(tmp_path, tg, llm), tg)
    starting = asyncio.create_task(bot.start())
    try:
        (line,) = await _log_lines(bot, RETRY_LINE, 1)
        assert "retrying in 3600 s" in line, line
        assert bot.proc is not None
        bot.proc.send_signal(sig)
        # Far below the hour it was waiting: an exit at all proves the wait was cut short.
        code = await asyncio.wait_for(bot.proc.wait(), scaled(30))
    finally:
        starting.cancel()
        bot.kill()
    assert code == 0, bot.stderr_text()[-3000:]
    logged = bot.stderr_text()
    assert "stopped before reaching the Telegram Bot API" in logged
    assert not looks_like_traceback(logged), logged[-3000:]
    assert len(tg.calls_to("getMe")) == 1
