"""Every model call is bounded (issue #35): a `max_tokens` per kind of call, and a wall
clock deadline a server streaming for ever cannot outlast; a cut-off call still leaves
its usage row; the server's reason for a refusal is kept (masked, one line) and a
deterministic refusal is not retried; a summary the server cut at its length limit is a
failed summary, not a short one."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from bot.config.settings import LLMSettings
from bot.model.client import LLMClient, LLMError
from memory.compaction.summarizer import LLMSummarizer, SummarizeOptions, SummarizerError
from memory.contract.types import Message
from memory.storage.usage import UsageRecorder, UsageRow, call_kind
from tests.fakes.openai_server import (
    FakeOpenAI,
    error,
    forever,
    hang,
    llama_error,
    text,
    truncated,
)

KEY = "sk-test-secret-key-123456"
HI = [Message(role="user", content="hi")]


@pytest.fixture
async def server() -> AsyncIterator[FakeOpenAI]:
    async with FakeOpenAI() as s:
        yield s


def client_for(server: FakeOpenAI, rows: list[UsageRow] | None = None, **llm: Any) -> LLMClient:
    settings = LLMSettings(base_url=server.base_url, api_key=KEY, **{"max_retries": 0, **llm})
    recorder = UsageRecorder(observers=[rows.append] if rows is not None else [])
    return LLMClient(settings, backoff_s=0.01, backoff_cap_s=0.02, usage=recorder)


async def until(check: Any, within: float = 30.0) -> None:
    for _ in range(int(within / 0.05)):
        if check():
            return
        await asyncio.sleep(0.05)
    raise AssertionError("condition not met in time")


async def test_each_kind_of_call_sends_its_own_max_tokens(server: FakeOpenAI) -> None:
    client = client_for(
        server, max_tokens=111, summary_max_tokens=222, recall_max_tokens=333, reflect_max_tokens=0
    )
    try:
        await client.complete(HI)
        await client.generate("summarize this")
        await client.complete(HI, kind="recall")
        with call_kind("reflect"):
            await client.complete(HI)
    finally:
        await client.close()
    sent = [r.get("max_tokens") for r in server.requests]
    assert sent == [111, 222, 333, None]  # 0: none sent, the server's own limit


async def test_the_defaults_bound_every_answer(server: FakeOpenAI) -> None:
    client = client_for(server)
    try:
        await client.complete(HI)
    finally:
        await client.close()
    assert server.requests[0]["max_tokens"] == LLMSettings().max_tokens > 0


async def test_a_server_asking_for_max_completion_tokens_gets_it(server: FakeOpenAI) -> None:
    """OpenAI's reasoning models refuse `max_tokens`: the bound is sent as they ask,
    from then on, rather than every call failing."""
    client = client_for(server, max_tokens=500)
    server.push(
        error(
            400,
            message="Unsupported parameter: 'max_tokens' is not supported with this model. "
            "Use 'max_completion_tokens' instead.",
        )
    )
    try:
        first = await client.complete(HI)
        await client.complete(HI)
    finally:
        await client.close()
    assert first.content == "echo: hi"
    assert [(r.get("max_tokens"), r.get("max_completion_tokens")) for r in server.requests] == [
        (500, None),
        (None, 500),
        (None, 500),
    ]


async def test_a_stream_that_never_ends_is_cut_at_its_deadline(server: FakeOpenAI) -> None:
    rows: list[UsageRow] = []
    seen: list[str] = []

    async def on_delta(so_far: str) -> None:
        seen.append(so_far)

    # timeout_s is per read: chunks keep coming, so only the deadline can end the call.
    client = client_for(server, rows, timeout_s=30, answer_deadline_s=1)
    server.push(forever("and on "))
    try:
        turn = await client.complete(HI, on_delta=on_delta)
        server.push(text("the next answer"))
        after = await client.complete(HI)
    finally:
        await client.close()
    assert turn.finish_reason == "deadline" and not turn.tool_calls
    assert turn.content.startswith("and on and on")
    assert turn.content.endswith("(cut off: the answer took longer than 1 s)")
    assert seen and turn.content.startswith(seen[-1].rstrip())
    assert after.content == "the next answer"
    # The cut-off call has its usage row: estimated (the report comes at the end only).
    assert [r.kind for r in rows] == ["chat", "chat"]
    assert rows[0].tokens.estimated and rows[0].tokens.completion > 0
    await until(lambda: server.streaming == 0)  # the fake saw us hang up


async def test_a_deadline_with_nothing_streamed_is_one_clear_error(server: FakeOpenAI) -> None:
    rows: list[UsageRow] = []
    client = client_for(server, rows, timeout_s=60, answer_deadline_s=0.5)
    server.push(hang())
    try:
        with pytest.raises(LLMError) as info:
            await client.complete(HI)
    finally:
        await client.close()
    assert info.value.reason == "the language model did not answer within 0.5 s"
    assert rows == []  # nothing was generated


async def test_a_call_interrupted_mid_stream_leaves_a_usage_row(server: FakeOpenAI) -> None:
    rows: list[UsageRow] = []

    async def on_delta(so_far: str) -> None:
        raise RuntimeError("the chat went away")

    client = client_for(server, rows)
    server.push(text("a long answer that is interrupted"))
    try:
        with pytest.raises(RuntimeError):
            await client.complete(HI, on_delta=on_delta)
    finally:
        await client.close()
    assert len(rows) == 1 and rows[0].tokens.estimated and rows[0].tokens.prompt > 0


async def test_the_servers_reason_is_kept_masked_on_one_line(
    server: FakeOpenAI, caplog: pytest.LogCaptureFixture
) -> None:
    client = client_for(server, max_retries=3)
    message = f"Conversation roles must alternate\nuser/assistant/user/assistant (key {KEY})"
    server.push(llama_error(400, message + " " + "x" * 500))
    try:
        with pytest.raises(LLMError) as info:
            await client.complete(HI)
    finally:
        await client.close()
    err = info.value
    assert err.reason == "the language model refused the request (HTTP 400)"
    assert err.detail.startswith("Conversation roles must alternate user/assistant/user")
    assert "\n" not in err.detail and KEY not in err.detail and "(key ***)" in err.detail
    assert len(err.detail) <= 200
    assert KEY not in err.described() and "Conversation roles" in err.described()
    assert len(server.requests) == 1 and not err.retryable  # deterministic: not retried
    logged = [r.getMessage() for r in caplog.records if r.name == "bot.model.client"]
    assert any("Conversation roles must alternate" in line for line in logged), logged
    assert not any(KEY in line for line in logged)


async def test_a_not_supported_500_is_not_retried(server: FakeOpenAI) -> None:
    client = client_for(server, max_retries=4)
    server.push(llama_error(500, "image input is not supported by this model", "server_error"))
    try:
        with pytest.raises(LLMError) as info:
            await client.complete(HI)
    finally:
        await client.close()
    assert len(server.requests) == 1 and info.value.attempts == 1
    assert info.value.reason == "the language model cannot handle this request (HTTP 500)"
    assert info.value.detail == "image input is not supported by this model"


async def test_an_ordinary_500_is_still_retried(server: FakeOpenAI) -> None:
    client = client_for(server, max_retries=2)
    server.push(error(500, message="out of memory"), text("fine now"))
    try:
        turn = await client.complete(HI)
    finally:
        await client.close()
    assert turn.content == "fine now" and len(server.requests) == 2


async def test_a_summary_cut_at_the_length_limit_is_a_failed_summary(
    server: FakeOpenAI,
) -> None:
    client = client_for(server)
    summarizer = LLMSummarizer(client.generate)
    server.push(truncated("The user asked about Oslo and then"))
    try:
        with pytest.raises(SummarizerError, match="finish_reason: length"):
            await summarizer.summarize("a long talk about Oslo " * 50, SummarizeOptions())
    finally:
        await client.close()
