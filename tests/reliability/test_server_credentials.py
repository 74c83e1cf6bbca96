"""A model server behind a proxy with basic auth, written as operators write it:
`http://user:password@host/v1` in `llm.base_url` (and `embeddings.base_url`). aiohttp
refused every call when the URL held credentials beside the openai client's bearer
header; they are now sent as Basic auth, and appear in no log line."""

from __future__ import annotations

import base64
import logging
from pathlib import Path

import pytest

from bot.config.settings import LLMSettings
from bot.model.client import require_api_key
from memory.search.semantic.client import Embedder
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.telegram_server import FakeTelegram
from tests.reliability.conftest import ask
from tests.reliability.harness import live_bot

USER, PASSWORD = "mnemo", "pr0xy p@ss/word"  # '@', '/' and a space, percent-encoded below
QUOTED = "pr0xy%20p%40ss%2Fword"
BASIC = "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()


def with_credentials(base_url: str) -> str:
    return base_url.replace("http://", f"http://{USER}:{QUOTED}@", 1)


async def test_the_bot_answers_through_a_proxy_with_basic_auth(
    tg: FakeTelegram, llm: FakeOpenAI, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    url = with_credentials(llm.base_url)
    async with live_bot(tmp_path, tg, llm, llm={"base_url": url}) as bot:
        require_api_key(bot.settings.llm)  # a key is set too: warned about, not refused
        assert await ask(tg, tg.private(1), "hello there") == "echo: hello there"
    assert llm.authorizations and set(llm.authorizations) == {BASIC}
    assert "llm.api_key is not sent" in caplog.text
    for secret in (PASSWORD, QUOTED, BASIC.split()[1]):
        assert secret not in caplog.text


def test_credentials_in_the_url_need_no_key() -> None:
    require_api_key(LLMSettings(base_url="http://u:p@127.0.0.1:1/v1", api_key=""))


async def test_embeddings_through_a_proxy_with_basic_auth() -> None:
    async with FakeOpenAI() as server:
        embedder = Embedder("fake-embed", base_url=with_credentials(server.base_url), api_key="")
        try:
            vectors = await embedder.embed(["hello world"])
        finally:
            await embedder.close()
    assert vectors.shape[0] == 1 and server.authorizations == [BASIC]
