"""Tokens and API keys never appear in the logs of `mnemo run`, even at DEBUG (where
python-telegram-bot logs its Bot API URL, which carries the token) and when calls fail."""

from __future__ import annotations

from pathlib import Path

from tests.fakes.openai_server import FakeOpenAI, error
from tests.fakes.telegram_server import FakeTelegram
from tests.reliability.conftest import SECRET_TOKEN
from tests.reliability.harness import API_KEY
from tests.reliability.process import BotProcess


def run_config(
    tmp_path: Path, tg: FakeTelegram, llm: FakeOpenAI, db_url: str, **extra: object
) -> dict[str, object]:
    return {
        "database": {"url": db_url},
        "data_dir": str(tmp_path / "data"),
        "llm": {"base_url": llm.base_url, "api_key": API_KEY, "timeout_s": 3, "max_retries": 1},
        "telegram": {"token": tg.token, "base_url": tg.base_url, "concurrent_updates": 8},
        "memory": {"provider": "simple", "simple": {"store_dir": str(tmp_path / "data/memory")}},
        "compaction": {"max_tokens": -1, "keep_tail": 2},
        "reflect": {"enabled": False},
        **extra,
    }


async def test_secrets_never_logged(tg: FakeTelegram, llm: FakeOpenAI, tmp_path: Path) -> None:
    db = f"sqlite+aiosqlite:///{tmp_path / 'bot.db'}"
    bot = BotProcess(tmp_path, run_config(tmp_path, tg, llm, db, log_level="DEBUG"), tg)
    await bot.start()
    try:
        alice = tg.private(42)
        alice.send("hello")
        await tg.wait_for_message(42, contains="echo: hello", within=20)
        llm.push(error(500), error(401))  # failures are logged with their details
        alice.send("again")
        await tg.wait_for_message(42, contains="Sorry", within=20)
        tg.fail("sendMessage", 429, retry_after=1)
        alice.send("once more")
        # (answered with the failed turn's "again": one user turn for the model)
        await tg.wait_for_message(42, contains="echo: again\n\nonce more", within=20)
    finally:
        assert await bot.stop() == 0
    logged = bot.stderr_text()
    assert "Calling Bot API endpoint" in logged  # DEBUG from the config was in force
    assert "failed after" in logged
    for secret in (SECRET_TOKEN, SECRET_TOKEN.split(":", 1)[1], API_KEY):
        assert secret not in logged
