"""Reflect proposes facts as structured operations citing the reviewed messages: the
review context shows each message's id, a fact keeps only ids of what was reviewed, a
later review supersedes it, and a review that changes nothing writes nothing."""

from __future__ import annotations

import json

import pytest
import sqlalchemy as sa

from memory.storage import forgetting as fg
from memory.storage.history import conversations, messages
from tests.fakes.openai_server import text, tool_calls
from tests.reflect.test_cycle import ANA, memory_call, talk, user_prompt

pytestmark = pytest.mark.parametrize("provider", ["lcm"], indirect=True)


async def user_ids(provider, session_id: str) -> list[int]:  # type: ignore[no-untyped-def]
    async with fg.engine_of(provider).connect() as conn:
        rows = await conn.execute(
            sa.select(messages.c.id)
            .join(conversations, conversations.c.id == messages.c.conversation_id)
            .where(conversations.c.session_id == session_id, messages.c.role == "user")
            .order_by(messages.c.seq)
        )
        return [int(i) for i in rows.scalars()]


def tool_results(request: dict) -> list[str]:
    return [m["content"] for m in request["messages"] if m["role"] == "tool"]


async def test_reflect_sets_and_supersedes_facts_citing_reviewed_messages(
    reflector, provider, fake_llm
) -> None:
    elsewhere = ANA.__class__("tg:100#old", "default", 100, "telegram")
    await talk(provider, elsewhere, "I grew up in Leeds")
    [leeds] = await user_ids(provider, elsewhere.id)
    await reflector.run_cycle()  # reviewed already: "no changes"
    await talk(provider, ANA, "I'm Ana and I live in Lisbon.")
    [lisbon] = await user_ids(provider, ANA.id)
    fake_llm.push(
        tool_calls(
            [
                (
                    "memory",
                    {
                        "action": "fact_set",
                        "key": "home city",
                        "value": "Lisbon",
                        "message_ids": [lisbon, leeds, 987654],
                    },
                )
            ]
        ),
        text("home city recorded"),
    )
    report = await reflector.run_cycle()
    assert report.failed == 0 and report.changes == 1
    first = next(r for r in fake_llm.requests if "Lisbon" in user_prompt(r))
    assert f"(message {lisbon}) user: I'm Ana and I live in Lisbon." in user_prompt(first)
    assert "<facts>\n(none)\n</facts>" in user_prompt(first)
    [result] = tool_results(fake_llm.requests[fake_llm.requests.index(first) + 1])
    assert result.startswith(f"recorded home city: Lisbon (version 1); sources: message {lisbon}")
    assert f"memory calls): {leeds}, 987654" in result
    [fact] = await provider.current_facts(100, "default")
    assert (fact.value, fact.evidence, fact.source, fact.session_id) == (
        "Lisbon",
        (lisbon,),
        "reflect",
        ANA.id,
    )

    await talk(provider, ANA, "Big news: I moved to Porto last week.")
    porto = (await user_ids(provider, ANA.id))[-1]
    fake_llm.push(
        tool_calls(
            [memory_call("fact_set", key="Home city", value="Porto", message_ids=[porto])]  # type: ignore[arg-type]
        ),
        text("home city updated"),
    )
    report = await reflector.run_cycle()
    assert [s.status for s in report.sessions] == ["changed"]
    prompt = user_prompt(fake_llm.requests[-2])
    assert "- home city: Lisbon (since" in prompt and "I live in Lisbon" not in prompt
    history = await provider.fact_history(100, "default")
    assert [(f.value, f.state, f.evidence) for f in history] == [
        ("Lisbon", "superseded", (lisbon,)),
        ("Porto", "current", (porto,)),
    ]
    assert history[0].valid_to == history[1].valid_from
    rows = await provider.read_changelog(100, "default", scope="fact")
    assert [(r.action, r.source) for r in rows] == [("update", "reflect"), ("create", "reflect")]
    assert json.loads(rows[0].after_text)[0]["replaced_by"] == history[1].id

    # A review with nothing durable changes nothing.
    await talk(provider, ANA, "thanks, bye")
    report = await reflector.run_cycle()
    assert [s.status for s in report.sessions] == ["unchanged"]
    assert len(await provider.read_changelog(100, "default", scope="fact")) == 2
