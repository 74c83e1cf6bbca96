"""Webhook mode: Telegram POSTs updates to the bot, which checks the secret token."""

from __future__ import annotations

import re
import socket
from pathlib import Path

from aiohttp import ClientSession

from bot.channels.telegram.channel import derived_webhook_secret
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.telegram_server import FakeTelegram
from tests.telegram.harness import running_bot


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def test_webhook_mode(tg: FakeTelegram, llm: FakeOpenAI, tmp_path: Path) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}/telegram/hook"
    webhook = {"url": url, "listen": "127.0.0.1", "port": port, "secret_token": "s3cret-token"}
    async with running_bot(tg, llm, tmp_path, webhook=webhook):
        assert tg.webhook is not None and tg.webhook["url"] == url
        assert tg.webhook["secret_token"] == "s3cret-token"
        tg.private(42).send("through the hook")
        await tg.wait_for_message(42, contains="echo: through the hook")
        assert tg.calls_to("getUpdates") == []
        forged = {
            "update_id": 999,
            "message": {
                "message_id": 1,
                "date": 0,
                "chat": {"id": 66, "type": "private", "first_name": "M"},
                "from": {"id": 66, "is_bot": False, "first_name": "M"},
                "text": "forged",
            },
        }
        async with ClientSession() as http:
            for headers in ({}, {"X-Telegram-Bot-Api-Secret-Token": "wrong"}):
                async with http.post(url, json=forged, headers=headers) as resp:
                    assert resp.status == 403
    assert len(llm.requests) == 1
    assert tg.bot_messages(66) == []


async def test_webhook_without_configured_secret_derives_one_from_the_token(
    tg: FakeTelegram, llm: FakeOpenAI, tmp_path: Path
) -> None:
    # Every replica derives the same secret (tests/ops/test_webhook_tls.py runs two behind
    # one TLS proxy); the token itself never travels in it.
    port = free_port()
    webhook = {"url": f"http://127.0.0.1:{port}/hook", "listen": "127.0.0.1", "port": port}
    async with running_bot(tg, llm, tmp_path, webhook=webhook):
        assert tg.webhook is not None
        secret = tg.webhook["secret_token"]
        assert secret == derived_webhook_secret(tg.token)
        assert len(secret) >= 32 and re.fullmatch(r"[A-Za-z0-9_-]+", secret)
        assert tg.token not in secret and tg.token.split(":")[1] not in secret
        tg.private(42).send("hello")
        await tg.wait_for_message(42, contains="echo: hello")
    assert derived_webhook_secret("123:other-token") != secret
