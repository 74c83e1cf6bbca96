"""What the user is told when the model cannot be reached or does not answer in time:
the two must not be confused (the HTTP transport reports a refused connection as a
connect timeout)."""

from __future__ import annotations

import socket

import pytest

from bot.config.settings import LLMSettings
from bot.model.client import LLMClient, LLMError
from memory.contract.types import Message
from tests.fakes.openai_server import FakeOpenAI, hang


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def ask(base_url: str, timeout_s: float) -> LLMError:
    client = LLMClient(
        LLMSettings(base_url=base_url, api_key="k", timeout_s=timeout_s, max_retries=0)
    )
    try:
        with pytest.raises(LLMError) as info:
            await client.complete([Message(role="user", content="hi")])
    finally:
        await client.close()
    return info.value


async def test_a_refused_connection_is_unreachable_not_a_timeout() -> None:
    err = await ask(f"http://127.0.0.1:{closed_port()}/v1", timeout_s=5)
    assert err.reason == "the language model could not be reached" and err.retryable


async def test_a_server_that_does_not_answer_times_out() -> None:
    async with FakeOpenAI() as server:
        server.push(hang())
        err = await ask(server.base_url, timeout_s=0.5)
    assert err.reason == "the language model timed out" and err.retryable
