"""LLMClient.transcribe against the fake server: the upload, the retry policy shared
with `complete`, and its own metric label."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from bot.config.settings import LLMSettings
from bot.model.client import LLMClient, LLMError
from bot.runtime.metrics import REGISTRY
from tests.fakes.openai_server import FakeOpenAI, error, gated, text

OGG = b"OggS\x00voice"


@pytest.fixture
async def server() -> AsyncIterator[FakeOpenAI]:
    async with FakeOpenAI() as s:
        yield s


def make_client(
    server: FakeOpenAI, *, model: str = "whisper-1", backoff_s: float = 0.01
) -> LLMClient:
    settings = LLMSettings(
        base_url=server.base_url, api_key="k", timeout_s=5, max_retries=3, transcription_model=model
    )
    # A backoff far beyond the test's timeout: only Retry-After makes a retry quick.
    return LLMClient(settings, backoff_s=backoff_s, backoff_cap_s=max(backoff_s, 8.0))


def transcriptions(error_class: str | None = None) -> float:
    if error_class is None:
        name, labels = "mnemo_llm_request_duration_seconds_count", {"kind": "transcription"}
    else:
        name, labels = "mnemo_llm_errors_total", {"kind": "transcription", "error": error_class}
    return REGISTRY.get_sample_value(name, labels) or 0.0


async def test_the_file_and_model_are_sent_and_the_text_returned(server: FakeOpenAI) -> None:
    client = make_client(server)
    before = transcriptions()
    server.push_transcription(text(" buy oat milk \n"))
    try:
        assert await client.transcribe(OGG, "voice.ogg") == "buy oat milk"
    finally:
        await client.close()
    upload = server.transcriptions[0]
    assert (upload.model, upload.filename, upload.file) == ("whisper-1", "voice.ogg", OGG)
    assert server.requests == []  # not a chat completion
    assert transcriptions() == before + 1


async def test_a_429_is_retried_after_its_retry_after(server: FakeOpenAI) -> None:
    client = make_client(server, backoff_s=3600)
    server.push_transcription(error(429, retry_after=0), error(503, retry_after=0), text("finally"))
    try:
        assert await client.transcribe(OGG, "voice.ogg") == "finally"
    finally:
        await client.close()
    assert len(server.transcriptions) == 3


async def test_failures_are_llm_errors_counted_as_transcription(server: FakeOpenAI) -> None:
    client = make_client(server)
    before = [transcriptions("InternalServerError"), transcriptions("NotFoundError")]
    server.push_transcription(*[error(500)] * 4, error(404), text("not reached"))
    try:
        with pytest.raises(LLMError) as gave_up:
            await client.transcribe(OGG, "voice.ogg")
        with pytest.raises(LLMError) as not_found:  # a server without the endpoint
            await client.transcribe(OGG, "voice.ogg")
    finally:
        await client.close()
    assert gave_up.value.attempts == 4 and "HTTP 500" in gave_up.value.reason
    assert not_found.value.attempts == 1 and "404" in not_found.value.reason
    assert len(server.transcriptions) == 5  # 4 attempts, then 1: a 404 is not retried
    after = [transcriptions("InternalServerError"), transcriptions("NotFoundError")]
    assert after == [before[0] + 1, before[1] + 1]


async def test_without_a_model_nothing_is_sent(server: FakeOpenAI) -> None:
    client = make_client(server, model="")
    try:
        with pytest.raises(LLMError, match="transcription_model"):
            await client.transcribe(OGG, "voice.ogg")
    finally:
        await client.close()
    assert server.transcriptions == []


async def test_a_long_recording_gets_more_time_than_a_chat_answer(server: FakeOpenAI) -> None:
    # 0.2 MB of audio at 15 s per MB: 3 s allowed, against the 0.5 s chat timeout.
    settings = LLMSettings(
        base_url=server.base_url,
        api_key="k",
        timeout_s=0.5,
        max_retries=0,
        transcription_model="whisper-1",
    )
    client = LLMClient(settings)
    gate = asyncio.Event()
    asyncio.get_running_loop().call_later(1.0, gate.set)
    server.push_transcription(gated(gate, text("a long story")))
    try:
        assert await client.transcribe(OGG * (200_000 // len(OGG)), "voice.ogg") == ("a long story")
    finally:
        await client.close()
