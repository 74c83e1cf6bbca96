"""Images with a turn (`bot.model.images`): on the turn's user message in every model call of
that turn, counted as a fixed estimate against the budget, never stored."""

from __future__ import annotations

from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine

from bot.model.images import IMAGE_TOKENS, Image
from bot.model.tool_loop import run_turn
from memory.contract.types import Message, Session
from tests.bot.conftest import PoolFactory
from tests.bot.test_runner import echo_tool, make_client
from tests.fakes.openai_server import FakeOpenAI, text, tool_call

PNG = Image(b"\x89PNG-fake", "image/png")
URL = "data:image/png;base64,iVBORy1mYWtl"


def user_contents(body: dict[str, Any]) -> list[Any]:
    return [m["content"] for m in body["messages"] if m["role"] == "user"]


async def test_every_round_carries_the_images_on_the_last_user_message(
    llm_server: FakeOpenAI,
) -> None:
    client = make_client(llm_server)
    prompt = [
        Message(role="system", content="be brief"),
        Message(role="user", content="a"),
        Message(role="assistant", content="b"),
        Message(role="user", content="c"),
    ]
    llm_server.push(tool_call("weather", {"city": "Oslo"}), text("sunny"))
    try:
        result = await run_turn(client, prompt, [echo_tool([])], max_rounds=4, images=[PNG])
    finally:
        await client.close()
    parts = [{"type": "text", "text": "c"}, {"type": "image_url", "image_url": {"url": URL}}]
    assert [user_contents(r) for r in llm_server.requests] == [["a", parts], ["a", parts]]
    assert all(isinstance(m.content, str) for m in [*prompt, *result.messages])
    assert prompt[-1].content == "c"


async def test_images_count_a_fixed_estimate_and_are_not_stored(
    engine: AsyncEngine, make_pool: PoolFactory, llm_server: FakeOpenAI
) -> None:
    # A budget the two images leave history room in (the memory tool's schema takes some).
    pool = make_pool(engine, memory={"budget_tokens": 8000})
    budgets: list[int] = []
    assemble = pool.provider.assemble

    async def recording(session: Session, budget: int, fresh_tail: int) -> list[Message]:
        budgets.append(budget)
        return await assemble(session, budget, fresh_tail)

    pool.provider.assemble = recording
    plain = Session(id="default:test:1", user_id=1, channel="test")
    seen = Session(id="default:test:2", user_id=2, channel="test")
    assert not (await pool.chat(plain, "[photo]\nlook")).error
    reply = await pool.chat(seen, "[photo]\nlook", images=[PNG, PNG])
    assert not reply.error and reply.text == "echo: [photo]\nlook"
    assert budgets[0] - budgets[1] == 2 * IMAGE_TOKENS
    assert (
        len([p for p in user_contents(llm_server.requests[1])[-1] if p["type"] == "image_url"]) == 2
    )
    stored = await assemble(seen, 10_000, 10)
    assert [(m.role, m.content) for m in stored] == [
        ("user", "[photo]\nlook"),
        ("assistant", "echo: [photo]\nlook"),
    ]
