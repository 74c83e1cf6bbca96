"""Facts through Telegram on the fake servers, the model scripted to call the memory
tool: a home city set citing the user's message, superseded by a move (both intervals,
both sources), a restatement merged, a retraction, the facts in the system prompt at a
new session's snapshot, and a forget of the only message supporting a fact removing it
(and reopening what it superseded)."""

from __future__ import annotations

from pathlib import Path

import pytest
import sqlalchemy as sa

from memory.storage.history import messages
from tests.fakes.openai_server import FakeOpenAI, text, tool_calls
from tests.fakes.telegram_server import FakeTelegram
from tests.telegram.harness import running_bot
from tests.telegram.test_commands import ask
from tests.telegram.test_forget import code_of

U, A = 42, "default"


def fact(action: str, **args: object) -> tuple[str, dict[str, object]]:
    return ("memory", {"action": action, **args})


async def say(tg: FakeTelegram, llm: FakeOpenAI, words: str, *calls: tuple, reply: str) -> None:  # type: ignore[type-arg]
    llm.push(tool_calls(list(calls)), text(reply))
    await ask(tg, words, reply)


async def user_message_id(bot, words: str) -> int:  # type: ignore[no-untyped-def]
    async with bot.provider.engine.connect() as conn:
        found = await conn.scalar(
            sa.select(messages.c.id).where(messages.c.role == "user", messages.c.content == words)
        )
    assert found is not None, words
    return int(found)


@pytest.mark.parametrize("provider", ["lcm", "simple"])
async def test_facts_supersede_restate_retract_and_forget(
    tg: FakeTelegram, llm: FakeOpenAI, tmp_path: Path, provider: str
) -> None:
    async with running_bot(tg, llm, tmp_path, provider=provider) as bot:
        store = bot.provider
        await say(tg, llm, "I live in London", fact("fact_set", key="home city", value="London"),
                  reply="Noted: London.")  # fmt: skip
        london_msg = await user_message_id(bot, "I live in London")
        [london] = await store.current_facts(U, A)
        assert (london.value, london.evidence, london.source) == ("London", (london_msg,), "agent")
        # The tool told the model what it recorded and on what.
        result = next(m for m in llm.requests[-1]["messages"] if m["role"] == "tool")
        assert result["content"].startswith("recorded home city: London")

        await say(tg, llm, "We moved to Berlin!",
                  fact("fact_set", key="Home city", value="Berlin"), reply="Berlin, nice.")  # fmt: skip
        berlin_msg = await user_message_id(bot, "We moved to Berlin!")
        old, new = await store.fact_history(U, A, "home city")
        assert (old.value, old.state, old.evidence) == ("London", "superseded", (london_msg,))
        assert (new.value, new.state, new.evidence) == ("Berlin", "current", (berlin_msg,))
        assert old.valid_to == new.valid_from and old.replaced_by == new.id
        assert old.version_to == new.version_from

        await say(tg, llm, "Berlin really is home now",
                  fact("fact_set", key="home city", value="berlin"), reply="Glad to hear.")  # fmt: skip
        again_msg = await user_message_id(bot, "Berlin really is home now")
        [city] = await store.current_facts(U, A)
        assert city.id == new.id and city.evidence == (berlin_msg, again_msg)

        await say(tg, llm, "I'm vegetarian", fact("fact_set", key="diet", value="vegetarian"),
                  reply="Noted.")  # fmt: skip
        await say(tg, llm, "Not vegetarian any more, I eat fish now",
                  fact("fact_retract", key="diet"), reply="Understood.")  # fmt: skip
        [diet] = await store.fact_history(U, A, "diet")
        assert diet.state == "retracted" and diet.valid_to is not None
        assert len(diet.evidence) == 2  # the saying and the unsaying

        listing = await ask(tg, "/memory facts", "Facts about you:")
        assert "home city: Berlin" in listing and "diet" not in listing
        history = await ask(tg, "/memory history", "Recent memory changes")
        assert (
            "home city: Berlin (was London)" in history and "diet: vegetarian retracted" in history
        )

        # A new conversation's system prompt holds the facts at its snapshot.
        await ask(tg, "/new", "")
        llm.push(text("Hello again."))
        await ask(tg, "hello", "Hello again.")
        system = llm.requests[-1]["messages"][0]["content"]
        assert "- home city: Berlin (since " in system
        assert "London" not in system and "vegetarian" not in system

        # Forgetting one of Berlin's two sources keeps it; forgetting the other removes
        # it, and London, which it had superseded, is current again.
        for msg_id, left in ((again_msg, (berlin_msg,)), (berlin_msg, None)):
            preview = await ask(tg, f"/memory forget {msg_id}", "This would forget")
            assert ("Facts resting on them alone go too" in preview) == (left is None), preview
            assert left is not None or "home city: Berlin" in preview
            await ask(tg, f"/memory forget confirm {code_of(preview)}", "Forgot")
            [now] = await store.current_facts(U, A)
            if left is not None:
                assert (now.value, now.evidence) == ("Berlin", left)
        assert (now.value, now.state, now.valid_to) == ("London", "current", None)
        assert [f.value for f in await store.fact_history(U, A, "city")] == ["London"]
        # The conversation's snapshot moved: its next prompt no longer holds Berlin.
        llm.push(text("Sure."))
        await ask(tg, "where do I live?", "Sure.")
        system = llm.requests[-1]["messages"][0]["content"]
        assert "- home city: London (since " in system and "Berlin" not in system


@pytest.mark.parametrize("provider", ["lcm", "simple"])
async def test_forgetting_the_message_that_retracted_a_fact_brings_it_back(
    tg: FakeTelegram, llm: FakeOpenAI, tmp_path: Path, provider: str, db_kind: str
) -> None:
    async with running_bot(tg, llm, tmp_path, provider=provider, db=db_kind) as bot:
        store = bot.provider
        await say(tg, llm, "I'm vegetarian", fact("fact_set", key="diet", value="vegetarian"),
                  reply="Noted.")  # fmt: skip
        await say(tg, llm, "Not vegetarian any more", fact("fact_retract", key="diet"),
                  reply="Understood.")  # fmt: skip
        said_it = await user_message_id(bot, "I'm vegetarian")
        unsaid = await user_message_id(bot, "Not vegetarian any more")
        assert "diet" not in await ask(tg, "/memory facts", "")
        # The retraction rests on the turn's message: forgetting it undoes the retraction.
        preview = await ask(tg, f"/memory forget {unsaid}", "This would forget")
        assert "Facts they alone retracted are current again: diet: vegetarian." in preview
        assert "Facts resting on them alone go too" not in preview
        await ask(tg, f"/memory forget confirm {code_of(preview)}", "Forgot")
        [diet] = await store.current_facts(U, A)
        assert (diet.value, diet.evidence, diet.valid_to) == ("vegetarian", (said_it,), None)
        assert "diet: vegetarian" in await ask(tg, "/memory facts", "Facts about you:")
        # The conversation's next prompt holds it again.
        llm.push(text("Sure."))
        await ask(tg, "what do I eat?", "Sure.")
        system = llm.requests[-1]["messages"][0]["content"]
        assert "- diet: vegetarian (since " in system
