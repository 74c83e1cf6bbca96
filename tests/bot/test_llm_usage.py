"""The token usage the model server reports is kept: on each answer, summed over a
turn's rounds, and counted in the metrics by kind and model."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from bot.config.settings import LLMSettings
from bot.model.client import LLMClient, TokenUsage
from bot.model.tool_loop import Tool, run_turn
from bot.runtime import metrics
from memory.contract.types import Message
from memory.text.tokens import estimate_tokens, request_tokens
from tests.fakes.openai_server import FakeOpenAI, text, tool_call

PROMPT = [
    Message(role="system", content="be brief"),
    Message(role="user", content="what is the weather like in Oslo today?"),
]


@pytest.fixture
async def server() -> AsyncIterator[FakeOpenAI]:
    async with FakeOpenAI() as s:
        yield s


def _counted(model: str) -> dict[str, float]:
    return {
        kind: metrics.sample(
            "mnemo_llm_tokens_total", {"kind": "chat", "model": model, "type": kind}
        )
        for kind in ("prompt", "cached_prompt", "completion")
    }


def _expected(body: dict[str, Any], answer: str, cached: int) -> TokenUsage:
    """What the fake server reports for a request (mnemo's own estimate of it)."""
    prompt = request_tokens(body["messages"], body.get("tools"))[0]
    return TokenUsage(prompt=prompt, cached_prompt=cached, completion=estimate_tokens(answer))


async def test_usage_is_returned_summed_and_counted(server: FakeOpenAI) -> None:
    server.cached_tokens = 3
    client = LLMClient(
        LLMSettings(base_url=server.base_url, api_key="k", model="usage-model", max_retries=0)
    )

    async def weather(args: dict[str, Any]) -> str:
        return "sunny"

    tool = Tool(
        {
            "type": "function",
            "function": {
                "name": "weather",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
            },
        },
        weather,
    )
    server.push(tool_call("weather", {"city": "Oslo"}), text("It is sunny in Oslo, enjoy it."))
    before = _counted("usage-model")
    try:
        result = await run_turn(client, PROMPT, [tool], max_rounds=4)
    finally:
        await client.close()
    call_args = 'weather{"city": "Oslo"}'
    expected = _expected(server.requests[0], call_args, 3) + _expected(
        server.requests[1], "It is sunny in Oslo, enjoy it.", 3
    )
    assert result.usage == expected and expected.prompt > 0 and expected.completion > 0
    after = _counted("usage-model")
    assert {k: after[k] - before[k] for k in after} == {
        "prompt": expected.prompt,
        "cached_prompt": 6,
        "completion": expected.completion,
    }


def test_a_report_without_counts_reads_as_zero() -> None:
    assert TokenUsage.from_report(None) == TokenUsage()
    assert (
        TokenUsage.from_report(
            {"prompt_tokens": "12", "completion_tokens": True, "prompt_tokens_details": None}
        )
        == TokenUsage()
    )
    assert TokenUsage.from_report(
        {"prompt_tokens": 12, "completion_tokens": 5, "prompt_tokens_details": {"cached_tokens": 8}}
    ) == TokenUsage(12, 8, 5)
