"""`bot.model.alternation.alternating` (what every request is turned into before it is sent)
and the strict fake server that refuses anything a strict chat template refuses."""

from __future__ import annotations

import aiohttp

from bot.config.settings import LLMSettings
from bot.model.alternation import alternating
from bot.model.client import LLMClient
from tests.fakes.openai_server import ALTERNATION, FakeOpenAI

TWO_USERS = [
    {"role": "system", "content": "be brief"},
    {"role": "user", "content": "one"},
    {"role": "user", "content": "two"},
]


async def test_the_strict_fake_refuses_two_user_turns_and_the_client_merges_them() -> None:
    async with FakeOpenAI() as llm:
        async with (
            aiohttp.ClientSession() as http,
            http.post(
                f"{llm.base_url}/chat/completions", json={"model": "m", "messages": TWO_USERS}
            ) as resp,
        ):
            assert resp.status == 400
            assert ALTERNATION in (await resp.json())["error"]["message"]
        client = LLMClient(LLMSettings(base_url=llm.base_url, api_key="k", max_retries=0))
        try:
            turn = await client.complete(TWO_USERS)
        finally:
            await client.close()
    assert turn.content == "echo: one\n\ntwo"
    assert len(llm.rejected) == 1  # the raw request only
    assert [m["role"] for m in llm.requests[-1]["messages"]] == ["system", "user"]


async def test_the_strict_fake_takes_tool_rounds_and_refuses_orphan_results() -> None:
    calls = [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]
    rounds = [
        {"role": "system", "content": "s"},
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": None, "tool_calls": calls},
        {"role": "tool", "content": "r1", "tool_call_id": "c1"},
        {"role": "tool", "content": "r2", "tool_call_id": "c1"},
        {"role": "assistant", "content": "a"},
        {"role": "user", "content": "q2"},
    ]
    orphan = [{"role": "user", "content": "q"}, {"role": "tool", "content": "r"}]
    leading = [{"role": "assistant", "content": "a"}, {"role": "user", "content": "q"}]
    late_system = [*rounds, {"role": "system", "content": "late"}]
    async with FakeOpenAI() as llm, aiohttp.ClientSession() as http:
        statuses = []
        for messages in (rounds, orphan, leading, late_system):
            url = f"{llm.base_url}/chat/completions"
            async with http.post(url, json={"model": "m", "messages": messages}) as resp:
                statuses.append(resp.status)
        llm.strict = False
        async with http.post(url, json={"model": "m", "messages": TWO_USERS}) as resp:
            statuses.append(resp.status)
    assert statuses == [200, 400, 400, 400, 200]
    assert len(llm.rejected) == 3


def test_alternating_merges_and_keeps_images() -> None:
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AA=="}}
    calls = [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]
    sent = [
        {"role": "system", "content": "base"},
        {"role": "assistant", "content": "an answer whose question was cut"},
        {"role": "user", "content": "<summary>old</summary>"},
        {"role": "system", "content": "more"},
        {"role": "user", "content": [{"type": "text", "text": "look"}, image]},
        {"role": "assistant", "content": None, "tool_calls": calls},
        {"role": "tool", "content": "r", "tool_call_id": "c1"},
        {"role": "assistant", "content": "seen"},
        {"role": "assistant", "content": "really"},
        {"role": "user", "content": ""},
        {"role": "user", "content": "and?"},
    ]
    before = [dict(m) for m in sent]
    assert alternating(sent) == [
        {"role": "system", "content": "base\n\nmore"},
        {
            "role": "user",
            "content": [{"type": "text", "text": "<summary>old</summary>\n\nlook"}, image],
        },
        {"role": "assistant", "content": None, "tool_calls": calls},
        {"role": "tool", "content": "r", "tool_call_id": "c1"},
        {"role": "assistant", "content": "seen\n\nreally"},
        {"role": "user", "content": "and?"},
    ]
    assert sent == before  # the caller's list (the stored history) is never changed
