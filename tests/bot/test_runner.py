"""The LLM client and the tool loop against a real local OpenAI-compatible server."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from bot.config.settings import LLMSettings
from bot.model.client import LLMClient, LLMError, MissingApiKey, require_api_key
from bot.model.tool_loop import Tool, run_turn
from memory.contract.types import Message
from tests.fakes.openai_server import (
    FakeOpenAI,
    empty,
    error,
    garbage,
    hang,
    text,
    tool_call,
    tool_calls,
)


@pytest.fixture
async def server() -> AsyncIterator[FakeOpenAI]:
    async with FakeOpenAI() as srv:
        yield srv


def make_client(server: FakeOpenAI, **overrides: Any) -> LLMClient:
    values: dict[str, Any] = {
        "base_url": server.base_url,
        "api_key": "test-key",
        "timeout_s": 2,
        "max_retries": 3,
        **overrides,
    }
    settings = LLMSettings(**values)
    return LLMClient(settings, backoff_s=0.001)


@pytest.fixture
async def client(server: FakeOpenAI) -> AsyncIterator[LLMClient]:
    c = make_client(server)
    yield c
    await c.close()


def echo_tool(log: list[dict[str, Any]]) -> Tool:
    async def handler(args: dict[str, Any]) -> str:
        log.append(args)
        return f"weather in {args.get('city')}: sunny"

    schema = {
        "type": "function",
        "function": {
            "name": "weather",
            "description": "weather of a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
    return Tool(schema=schema, handler=handler)


PROMPT = [Message(role="system", content="be brief"), Message(role="user", content="hi")]


async def test_stream_delivers_growing_text_and_usage(server: FakeOpenAI, client: LLMClient):
    server.push(text("The quick brown fox jumps.", chunk_size=5))
    seen: list[str] = []

    async def on_delta(so_far: str) -> None:
        seen.append(so_far)

    turn = await client.complete(PROMPT, on_delta=on_delta)
    assert turn.content == "The quick brown fox jumps."
    assert seen[-1] == turn.content and len(seen) == 6
    assert all(b.startswith(a) for a, b in zip(seen, seen[1:], strict=False))
    assert turn.usage and turn.usage["total_tokens"] > 0
    body = server.requests[0]
    assert body["stream"] is True and body["messages"][0] == {
        "role": "system",
        "content": "be brief",
    }


async def test_tool_round_trip(server: FakeOpenAI, client: LLMClient):
    calls: list[dict[str, Any]] = []
    server.push(tool_call("weather", {"city": "Oslo"}), text("It is sunny in Oslo."))
    result = await run_turn(client, PROMPT, [echo_tool(calls)], max_rounds=4)
    assert calls == [{"city": "Oslo"}]
    assert result.text == "It is sunny in Oslo."
    roles = [m.role for m in result.messages]
    assert roles == ["assistant", "tool", "assistant"]
    call = result.messages[0].tool_calls[0]
    assert call.name == "weather" and json.loads(call.arguments) == {"city": "Oslo"}
    assert result.messages[1].tool_call_id == call.id
    assert result.messages[1].content == "weather in Oslo: sunny"
    # The second request carried the assistant's call and the tool's result back.
    second = server.requests[1]["messages"]
    assert second[-2]["tool_calls"][0]["id"] == call.id
    assert second[-1] == {
        "role": "tool",
        "content": "weather in Oslo: sunny",
        "tool_call_id": call.id,
    }
    assert server.requests[0]["tools"][0]["function"]["name"] == "weather"


async def test_parallel_calls_unknown_tool_and_bad_json_become_error_results(
    server: FakeOpenAI, client: LLMClient
):
    calls: list[dict[str, Any]] = []
    server.push(
        tool_calls([("nope", {}), ("weather", "{not json"), ("weather", {"city": "Rome"})]),
        text("done"),
    )
    result = await run_turn(client, PROMPT, [echo_tool(calls)], max_rounds=4)
    outputs = [m.content for m in result.messages if m.role == "tool"]
    assert outputs[0].startswith("error: unknown tool 'nope'") and "weather" in outputs[0]
    assert outputs[1].startswith("error: invalid arguments for weather")
    assert outputs[2] == "weather in Rome: sunny"
    assert calls == [{"city": "Rome"}] and result.text == "done"


async def test_rounds_are_bounded_and_the_last_round_has_no_tools(
    server: FakeOpenAI, client: LLMClient
):
    server.push(*[tool_call("weather", {"city": str(i)}) for i in range(2)], text("giving up"))
    result = await run_turn(client, PROMPT, [echo_tool([])], max_rounds=2)
    assert result.text == "giving up" and result.rounds == 3
    assert [("tools" in r) for r in server.requests] == [True, True, False]


async def test_a_repeat_in_the_same_message_is_not_run_and_other_calls_go_on(
    server: FakeOpenAI, client: LLMClient
):
    calls: list[dict[str, Any]] = []
    server.push(
        tool_calls(
            [("weather", '{"city": "Oslo"}'), ("weather", '{ "city":"Oslo" }'), ("nope", "{")]
        ),
        tool_calls([("nope", "{"), ("weather", {"city": "Rome"})]),
        text("done"),
    )
    result = await run_turn(client, PROMPT, [echo_tool(calls)], max_rounds=4)
    outputs = [m.content for m in result.messages if m.role == "tool"]
    assert calls == [{"city": "Oslo"}, {"city": "Rome"}] and result.text == "done"
    assert outputs[1].startswith("error: you already called weather with exactly these")
    assert outputs[2].startswith("error: unknown tool 'nope'")
    # The same malformed call again is a repeat too (compared as its raw text); a round
    # that also ran something new is not the last.
    assert outputs[3].startswith("error: you already called nope")
    assert [("tools" in r) for r in server.requests] == [True, True, True]


async def test_text_beside_calls_streams_before_the_next_round(
    server: FakeOpenAI, client: LLMClient
):
    seen: list[str] = []

    async def on_delta(so_far: str) -> None:
        seen.append(so_far)

    server.push(tool_calls([("weather", {"city": "Oslo"})], content="Looking. "), text("Sunny."))
    result = await run_turn(client, PROMPT, [echo_tool([])], max_rounds=4, on_delta=on_delta)
    assert result.text == "Looking.\n\nSunny."
    assert seen[-1] == result.text and all(s.startswith("Looking.") for s in seen), seen
    assert [m.content for m in result.messages if m.role == "assistant"] == ["Looking. ", "Sunny."]


async def test_retries_429_and_500_then_succeeds(server: FakeOpenAI, client: LLMClient):
    server.push(error(429, retry_after=0), error(500), error(503), text("finally"))
    turn = await client.complete(PROMPT)
    assert turn.content == "finally" and len(server.requests) == 4


async def test_retries_timeouts_and_non_json_bodies(server: FakeOpenAI):
    c = make_client(server, timeout_s=0.3)
    try:
        server.push(hang(), garbage(), text("ok"))
        assert (await c.complete(PROMPT)).content == "ok"
        assert len(server.requests) == 3
    finally:
        await c.close()


async def test_gives_up_after_max_retries(server: FakeOpenAI, client: LLMClient):
    server.push(*[error(500)] * 4, text("never reached"))
    with pytest.raises(LLMError) as info:
        await client.complete(PROMPT)
    assert info.value.attempts == 4 and "HTTP 500" in info.value.reason
    assert server.pending == 1


async def test_client_errors_are_not_retried(server: FakeOpenAI, client: LLMClient):
    server.push(error(401), text("not reached"))
    with pytest.raises(LLMError, match="API key"):
        await client.complete(PROMPT)
    assert len(server.requests) == 1


async def test_empty_answer_is_an_error(server: FakeOpenAI, client: LLMClient):
    server.push(empty())
    with pytest.raises(LLMError, match="empty answer"):
        await run_turn(client, PROMPT, [], max_rounds=2)


async def test_generate_uses_the_given_model(server: FakeOpenAI, client: LLMClient):
    out = await client.generate("summarize this", model="small-model")
    assert out == "echo: summarize this"
    assert server.requests[0]["model"] == "small-model" and "tools" not in server.requests[0]


def test_missing_api_key_names_the_variable():
    with pytest.raises(MissingApiKey, match="OPENAI_API_KEY"):
        require_api_key(LLMSettings(api_key=" "))
    require_api_key(LLMSettings(api_key="sk-x"))
